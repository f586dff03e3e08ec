"""Speed of simulate-topology on 1,024 GPUs (128 HGX H100 nodes on 8 rails of NDR 400 InfiniBand): an all-reduce
swept from 8 B to 8 GiB (31 sizes), every candidate algorithm and protocol priced per size.

Prints the library call's wall time (best of RUNS, and the first, cold one) and the whole CLI run's, with a bare
`python -c pass` beside it. Acceptance (issue 16): the sweep in under 2 s on this machine.
"""

from __future__ import annotations

import subprocess
import sys
import time

RUNS = 5
ARGS = ["--nodes", "128", "--gpus-per-node", "8", "--profile", "h100", "--fabric", "ib-ndr400", "--rail-optimized",
        "--collective", "all-reduce", "--sizes", "8B:8GiB"]


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    from fakegpu.perf.simulate import Request, parse_sizes, simulate
    from fakegpu.perf.topology import Fabric, generated
    from fakegpu.profiles import load_catalog

    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        fabric = Fabric(generated(128, 8, load_catalog().get("h100"), "ib-ndr400", rail_optimized=True))
        report = simulate(fabric, Request(collective="all-reduce", sizes=parse_sizes("8B:8GiB")))
        times.append(time.perf_counter() - start)
    last = report["rows"][-1]
    bare = min(wall([sys.executable, "-c", "pass"]) for _ in range(3))
    cli = min(wall([sys.executable, "-m", "fakegpu", "simulate-topology", *ARGS]) for _ in range(3))
    print(f"fabric: {fabric.gpu_count} GPUs, {fabric.nodes} nodes, {fabric.link_count} links, "
          f"{fabric.n_leaves} leaves; {len(report['rows'])} sizes")
    print(f"library (build fabric + sweep): first {times[0]:.3f} s, best of {RUNS} {min(times):.3f} s")
    print(f"CLI run: {cli:.3f} s (python -c pass: {bare:.3f} s)")
    print(f"8 GiB: {last['time_us'] / 1e3:.2f} ms, busbw {last['busbw_gb_s']:.1f} GB/s by {last['algorithm']}/"
          f"{last['protocol']}; critical: {report['critical_links'][0]['link']}")
    ok = max(times[0], cli) < 2.0
    print(f"acceptance (< 2 s): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
