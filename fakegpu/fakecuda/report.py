"""The per-process fakecuda report `fakegpu preflight` reads: peaks per device, capacity, OOMs. No torch here.

A process writes it at exit to $FAKEGPU_REPORT_DIR/<pid>.json when that variable is set (preflight sets it for
the command it runs); every Python process of the command that activated fakecuda writes its own.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from typing import Any

from fakegpu.fakecuda.runtime import Runtime
from fakegpu.fakecuda.state import process_name

PROCESS_REPORT = "fakecuda-process"
SCHEMA_VERSION = 1


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
        "report": PROCESS_REPORT,
        "schema_version": SCHEMA_VERSION,
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
    }


class Reporter:
    """Writes the report at interpreter exit; remembers the type of an uncaught exception on the way out."""

    def __init__(self, rt: Runtime, directory: str) -> None:
        self.rt, self.dir = rt, directory
        self.uncaught: str | None = None
        self.previous_hook = sys.excepthook
        sys.excepthook = self._excepthook
        atexit.register(self.write)

    def _excepthook(self, kind, value, tb) -> None:
        self.uncaught = kind.__name__
        self.previous_hook(kind, value, tb)

    def write(self) -> None:
        torch = sys.modules.get("torch")
        doc = process_report(self.rt, self.uncaught, getattr(torch, "__version__", ""))
        path = os.path.join(self.dir, f"{os.getpid()}.json")
        try:
            os.makedirs(self.dir, exist_ok=True)
            with open(path + ".tmp", "w") as f:
                json.dump(doc, f, indent=1)
            os.replace(path + ".tmp", path)
        except OSError as exc:
            print(f"fakecuda: cannot write the preflight report {path}: {exc}", file=sys.stderr)


def install_from_env(rt: Runtime) -> Reporter | None:
    directory = os.environ.get("FAKEGPU_REPORT_DIR")
    return Reporter(rt, directory) if directory else None
