"""The per-process fakecuda report `fakegpu preflight` reads: peaks per device, capacity, OOMs. No torch here.

A process writes it at exit to $FAKEGPU_REPORT_DIR/<pid>.json when that variable is set (preflight sets it for
the command it runs); every Python process of the command that activated fakecuda writes its own.

Beside it goes <pid>.activity.json ("fakecuda-activity"): the process's torch.distributed identity
(RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK as torchrun sets them), its collective statistics and a timeline of
allocated/reserved bytes per device, sampled every FAKEGPU_REPORT_SAMPLE_S seconds (0.5; 0 turns it off). It is
a separate document so the process report, which the preflight report embeds under its schema, is unchanged;
the cluster report (fakegpu.cluster.report) reads both.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from typing import Any

from fakegpu.fakecuda.fidelity import uncertainty
from fakegpu.fakecuda.runtime import Runtime
from fakegpu.reports import schema_id
from fakegpu.shared_state import process_name

PROCESS_SCHEMA = schema_id("fakecuda-process")
ACTIVITY_SCHEMA = schema_id("fakecuda-activity")
MAX_SAMPLES = 2048  # per device; past it every other sample is dropped and the interval doubles


def process_report(rt: Runtime, uncaught: str | None = None, torch_version: str = "") -> dict[str, Any]:
    devices = []
    for d in rt.devices:
        peak_alloc, peak_reserved = rt.lifetime_peaks(d.index)
        context = rt.context_bytes(d.index) if d.initialized else 0
        devices.append({
            "index": d.index,
            "name": d.profile.name,
            "uuid": d.device.uuid,
            "capacity_bytes": d.profile.cuda_total_bytes,
            "context_bytes": context,
            "peak_allocated_bytes": peak_alloc,
            "peak_reserved_bytes": peak_reserved,
            "peak_used_bytes": context + peak_reserved if d.initialized else 0,
        })
    last = rt.ooms[-1] if rt.ooms else None
    return {
        "schema": PROCESS_SCHEMA,
        "mode": "fakecuda",
        "pid": os.getpid(),
        "name": process_name(),
        "devices_spec": rt.spec,
        "torch_version": torch_version,
        "uncaught_exception": uncaught,
        "devices": devices,
        "oom": {
            "occurred": last is not None,
            "count": len(rt.ooms),
            "device": None if last is None else last.device,
            "requested_bytes": None if last is None else last.requested,
            "message": None if last is None else last.message,
        },
        "uncertainty": uncertainty(rt.gap_calls),
    }


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def activity_report(rt: Runtime, timeline: dict[int, list[list[float]]]) -> dict[str, Any]:
    dist = sys.modules.get("fakegpu.fakecuda.distributed")  # never imported here: only a job that used it has stats
    return {
        "schema": ACTIVITY_SCHEMA,
        "pid": os.getpid(),
        "rank": _env_int("RANK"),
        "local_rank": _env_int("LOCAL_RANK"),
        "world_size": _env_int("WORLD_SIZE"),
        "node_rank": _env_int("GROUP_RANK"),
        "restart_count": _env_int("TORCHELASTIC_RESTART_COUNT"),
        "collectives": dist.collective_stats() if dist is not None else {},
        "timeline": [{"index": i, "samples": s} for i, s in sorted(timeline.items())],
    }


class Sampler:
    """Samples [seconds since start, allocated, reserved] of each device in use, from a daemon thread: the
    allocator is only read (plain int attributes), so the sampled process runs unchanged."""

    def __init__(self, rt: Runtime, interval: float) -> None:
        self.rt, self.interval = rt, interval
        self.start = time.monotonic()
        self.samples: dict[int, list[list[float]]] = {}
        if interval > 0:
            threading.Thread(target=self._loop, name="fakecuda-sampler", daemon=True).start()

    def sample(self) -> None:
        t = round(time.monotonic() - self.start, 3)
        for d in self.rt.devices:
            if d.initialized:
                a = d.allocator
                rows = self.samples.setdefault(d.index, [])
                rows.append([t, a.allocated_bytes, a.reserved_bytes])
                if len(rows) > MAX_SAMPLES:
                    del rows[1::2]
                    self.interval *= 2

    def _loop(self) -> None:
        while True:
            time.sleep(self.interval)
            self.sample()


class Reporter:
    """Writes the report at interpreter exit; remembers the type of an uncaught exception on the way out."""

    def __init__(self, rt: Runtime, directory: str) -> None:
        self.rt, self.dir = rt, directory
        self.uncaught: str | None = None
        self.previous_hook = sys.excepthook
        sys.excepthook = self._excepthook
        self.sampler = Sampler(rt, float(os.environ.get("FAKEGPU_REPORT_SAMPLE_S", "0.5") or 0))
        atexit.register(self.write)

    def _excepthook(self, kind, value, tb) -> None:
        self.uncaught = kind.__name__
        self.previous_hook(kind, value, tb)

    def write(self) -> None:
        torch = sys.modules.get("torch")
        doc = process_report(self.rt, self.uncaught, getattr(torch, "__version__", ""))
        self.sampler.sample()  # the state at exit closes every timeline
        self._dump(doc, f"{os.getpid()}.json")
        self._dump(activity_report(self.rt, self.sampler.samples), f"{os.getpid()}.activity.json")

    def _dump(self, doc: dict[str, Any], name: str) -> None:
        path = os.path.join(self.dir, name)
        try:
            os.makedirs(self.dir, exist_ok=True)
            with open(path + ".tmp", "w") as f:
                json.dump(doc, f, indent=1)
            os.replace(path + ".tmp", path)
        except OSError as exc:
            print(f"fakecuda: cannot write the report {path}: {exc}", file=sys.stderr)


def install_from_env(rt: Runtime) -> Reporter | None:
    directory = os.environ.get("FAKEGPU_REPORT_DIR")
    return Reporter(rt, directory) if directory else None
