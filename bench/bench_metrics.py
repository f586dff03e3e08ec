"""`fakegpu metrics`: one scrape of 64 GPUs with 8 processes on each, side by side with the same readings
rendered by prometheus_client's generic writer, and over HTTP as Prometheus fetches it.

Target (issue 14): a 64-device scrape under 50 ms. Needs `make native`. Prints one line per figure and exits
non-zero when the target is missed.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

TARGET_MS = 50.0
DEVICES = 64
PROCESSES = 8


def timed_ms(fn, runs: int) -> float:
    fn()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def prometheus_client_scrape(collector) -> bytes:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import GaugeMetricFamily, UnknownMetricFamily

    class Families:
        def collect(self):
            for field, values in collector.readings():
                kind = UnknownMetricFamily if field.counter else GaugeMetricFamily
                family = kind(field.name, field.help, labels=list(collector.entities[0].labels))
                for k, v in values:
                    family.add_metric(list(collector.entities[k].labels.values()), v)
                yield family

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Families())
    return generate_latest(registry)


def main() -> int:
    state = tempfile.mkdtemp(prefix="bench-metrics-")
    os.environ.update(FAKEGPU_DEVICES=f"h100:{DEVICES}", FAKEGPU_STATE_DIR=state)
    os.environ.pop("FAKEGPU_DEVICE_TABLE", None)
    from fakegpu.faults.exporter import DcgmCollector, load_nvml, serve
    from fakegpu.shared_state import StateFile

    # Live processes (readers reap the entries of dead pids), each holding memory on every device.
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(PROCESSES)]
    entries = []
    try:
        for n, p in enumerate(sleepers):
            entry = StateFile(state, p.pid, f"python rank{n}.py")
            for d in range(DEVICES):
                entry.set(d, (n + 1) << 30)
            entries.append(entry)
        collector = DcgmCollector(load_nvml())
        runs = int(os.environ.get("BENCH_RUNS", "50"))
        ours = timed_ms(collector.scrape, runs)
        theirs = timed_ms(lambda: prometheus_client_scrape(collector), runs)
        server = serve(collector, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        http = timed_ms(lambda: urllib.request.urlopen(url, timeout=10).read(), runs)
        server.shutdown()
        size = len(collector.scrape())
    finally:
        for e in entries:
            e.close()
        for p in sleepers:
            p.kill()
            p.wait()
        shutil.rmtree(state, ignore_errors=True)
    met = http <= TARGET_MS
    print(f"metrics scrape, {DEVICES} GPUs x {PROCESSES} processes, {size // 1024} KiB: render {ours:5.1f} ms, "
          f"prometheus_client's writer on the same readings {theirs:5.1f} ms (ratio {theirs / ours:4.1f}x)")
    print(f"metrics scrape over HTTP {http:5.1f} ms  target <= {TARGET_MS} ms: {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
