"""Native mode's side of `fakegpu preflight`: at exit, torch's own CUDA allocator statistics, per process.

In native mode PyTorch's real caching allocator runs on FakeGPU's simulated device memory, so its statistics
are the ones a GPU would show for the same program (static shapes; kernels are not run). This hook, imported by
the interpreter-start hook when FAKEGPU_TORCH_REPORT=1 (preflight sets it with FAKEGPU_REPORT_DIR), writes
<pid>.json in the process-report shape fakecuda writes (report.py), with mode "native". It never imports torch:
a process that did not use CUDA reports nothing. The CUDA context's footprint is not torch's to know; preflight
takes it from the native libraries' own report (fakegpu-native-<pid>.json) of the same process.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import sys
from typing import Any

from fakegpu.fakecuda.report import PROCESS_SCHEMA
from fakegpu.shared_state import process_name
from fakegpu.sizes import parse_bytes

_REQUESTED = re.compile(r"Tried to allocate ([0-9.]+ (?:B|KiB|MiB|GiB))")
_state: dict[str, Any] = {"uncaught": None, "message": None}


def process_report(torch: Any) -> dict[str, Any] | None:
    """The report of this process, or None when it never initialised CUDA."""
    if not torch.cuda.is_initialized():
        return None
    devices, ooms, last_oom_device = [], 0, None
    for i in range(torch.cuda.device_count()):
        stats = torch.cuda.memory_stats(i)
        props = torch.cuda.get_device_properties(i)
        n = int(stats.get("num_ooms", 0))
        if n:
            ooms, last_oom_device = ooms + n, i
        devices.append({
            "index": i,
            "name": props.name,
            "uuid": f"GPU-{props.uuid}",
            "capacity_bytes": props.total_memory,
            "context_bytes": 0,  # filled in by preflight from the native libraries' report
            "peak_allocated_bytes": int(stats.get("allocated_bytes.all.peak", 0)),
            "peak_reserved_bytes": int(stats.get("reserved_bytes.all.peak", 0)),
            "peak_used_bytes": int(stats.get("reserved_bytes.all.peak", 0)),
        })
    message = _state["message"]
    requested = None
    if message and (m := _REQUESTED.search(message)):
        requested = parse_bytes(m.group(1))
    return {
        "schema": PROCESS_SCHEMA,
        "mode": "native",
        "pid": os.getpid(),
        "name": process_name(),
        "devices_spec": os.environ.get("FAKEGPU_DEVICES", ""),
        "torch_version": torch.__version__,
        "uncaught_exception": _state["uncaught"],
        "devices": devices,
        "oom": {"occurred": bool(ooms), "count": ooms, "device": last_oom_device, "requested_bytes": requested,
                "message": message},
    }


def _excepthook(previous):
    def hook(kind, value, tb):
        _state["uncaught"] = kind.__name__
        if kind.__name__ == "OutOfMemoryError":
            _state["message"] = str(value).splitlines()[0] if str(value) else None
        previous(kind, value, tb)
    return hook


def _write() -> None:
    torch = sys.modules.get("torch")
    directory = os.environ.get("FAKEGPU_REPORT_DIR")
    if torch is None or not directory:
        return
    try:
        doc = process_report(torch)
    except Exception as exc:  # a report must not turn a clean exit into a traceback
        print(f"fakegpu preflight: no native report from this process: {exc}", file=sys.stderr)
        return
    if doc is None:
        return
    path = os.path.join(directory, f"{os.getpid()}.json")
    try:
        with open(path + ".tmp", "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(path + ".tmp", path)
    except OSError as exc:
        print(f"fakegpu preflight: cannot write the report {path}: {exc}", file=sys.stderr)


def install() -> None:
    sys.excepthook = _excepthook(sys.excepthook)
    atexit.register(_write)
