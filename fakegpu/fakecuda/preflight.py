"""`fakegpu preflight`: run a command under fakecuda or native mode (or both), collect its processes' reports,
give a verdict.

The command runs in the environment `fakegpu run --mode fakecuda` gives (fakegpu.launcher.prepare: the device
table, FAKEGPU_RUNTIME=fakecuda, and a folder first on PYTHONPATH whose sitecustomize.py imports
fakegpu.fakecuda.envhook and then hands over to the sitecustomize that would otherwise have run), plus
FAKEGPU_REPORT_DIR for the processes' reports. Why this start hook: a .pth line needs a write into the
interpreter's site-packages (not ours to change for one run), and wrapping `python` itself misses
interpreters started by the script; PYTHONPATH reaches every Python process of the command tree, child
processes included. Interpreters started with -I or -S skip it; then no report comes back, which the
verdict says.

Native mode (`--mode native`) runs PyTorch's real CUDA dispatch and caching allocator on simulated memory; the
same start hook then installs nativehook.py, which reports torch's own statistics at exit. `--mode both` runs the
two and reports the difference, the verdict taken from native mode (see _both).

Verdicts: PASS_FIT (exit 0), FAIL_OOM (exit 2: the command failed and a CUDA out-of-memory error was raised),
RUNTIME_ERROR (exit 1: any other failure, or no fakecuda process ran).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fakegpu.devices import resolve_devices
from fakegpu.fakecuda.report import PROCESS_SCHEMA
from fakegpu.reports import schema_id

PREFLIGHT_SCHEMA = schema_id("preflight")
EXIT_FOR = {"PASS_FIT": 0, "FAIL_OOM": 2, "RUNTIME_ERROR": 1}

def collect(report_dir: str) -> list[dict[str, Any]]:
    reports = []
    for path in sorted(Path(report_dir).glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if doc.get("schema") == PROCESS_SCHEMA:
            reports.append(doc)
    return reports


def verdict(returncode: int, processes: list[dict[str, Any]]) -> tuple[str, list[str]]:
    notes: list[str] = []
    oom = any(p["oom"]["occurred"] for p in processes)
    uncaught_oom = any(p.get("uncaught_exception") == "OutOfMemoryError" for p in processes)
    if not processes:
        notes.append("no fakecuda process reported: the command ran no Python with the start hook (python -I/-S?)")
        return "RUNTIME_ERROR", notes
    if uncaught_oom or (oom and returncode != 0):
        return "FAIL_OOM", notes
    if returncode != 0:
        notes.append(f"the command exited with status {returncode} without a CUDA out-of-memory error")
        return "RUNTIME_ERROR", notes
    if oom:
        notes.append("an out-of-memory error was raised and handled by the program; it then finished")
    return "PASS_FIT", notes


def merge_devices(spec: str, processes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per device: the processes' peaks added up (an upper bound when several processes share a device)."""
    rows = []
    for dev in resolve_devices(spec):
        per = [d for p in processes for d in p["devices"] if d["index"] == dev.index]
        used = sum(d["peak_used_bytes"] for d in per)
        capacity = dev.profile.cuda_total_bytes
        rows.append({
            "index": dev.index,
            "name": dev.profile.name,
            "capacity_bytes": capacity,
            "peak_allocated_bytes": sum(d["peak_allocated_bytes"] for d in per),
            "peak_reserved_bytes": sum(d["peak_reserved_bytes"] for d in per),
            "peak_used_bytes": used,
            "headroom_bytes": capacity - used,
        })
    return rows


MODES = ("fakecuda", "native", "both")
NATIVE_SCHEMA = schema_id("native-process")  # what the native libraries write per process (native/cuda)


def _with_context(processes: list[dict[str, Any]], native_reports: dict[int, dict[str, Any]]) -> None:
    """Native mode: the CUDA context's bytes come from the native libraries' report of the same process."""
    for proc in processes:
        libs = {d["index"]: d for d in native_reports.get(proc["pid"], {}).get("devices", [])}
        for d in proc["devices"]:
            context = libs.get(d["index"], {}).get("context_bytes", 0)
            d["context_bytes"] = context
            d["peak_used_bytes"] = context + d["peak_reserved_bytes"]


def request_reports(env: dict[str, str], root: str | os.PathLike[str], mode: str, report_dir: str) -> None:
    """Have a command's processes write their memory reports into `report_dir`, in the environment `prepare` made
    under `root`: fakecuda's own at exit; in native mode torch's statistics (nativehook.py, through the start hook
    fakecuda uses) and the native libraries' per-process report. The one place it is set up: preflight and
    `fakegpu validate`'s memory expectations both ask through it, and read the answers with `gather`."""
    from fakegpu.launcher import prepend_python_hook

    env["FAKEGPU_REPORT_DIR"] = report_dir
    if mode == "native":
        env["FAKEGPU_TORCH_REPORT"] = "1"
        prepend_python_hook(env, root)


def gather(report_dir: str | os.PathLike[str], mode: str) -> list[dict[str, Any]]:
    """The processes' reports `request_reports` asked for; in native mode each with its CUDA context's bytes from
    the native libraries' report of the same process."""
    processes = collect(str(report_dir))
    if mode == "native":
        natives = {}
        for path in Path(report_dir).glob("fakegpu-native-*.json"):
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if doc.get("schema") == NATIVE_SCHEMA:
                natives[doc["pid"]] = doc
        _with_context(processes, natives)
    return processes


def _run(command: list[str], devices: str, mode: str, environ: dict[str, str] | None, stdout) -> tuple[int, list]:
    from fakegpu.launcher import prepare  # the one place a child's fake-GPU environment is made

    base = dict(os.environ if environ is None else environ)
    if mode == "native":
        launch = prepare(devices, "native", base, memory="accounting")
    else:
        launch = prepare(devices, "fakecuda", base)
    try:
        report_dir = os.path.join(launch.root, "reports")
        os.makedirs(report_dir)
        env = dict(launch.env)
        request_reports(env, launch.root, mode, report_dir)
        try:
            returncode = subprocess.run(command, env=env, stdout=stdout).returncode
        except OSError as exc:
            returncode = 127
            print(f"fakegpu preflight: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        processes = gather(report_dir, mode)
    finally:
        launch.cleanup()
    return returncode, processes


def document(command: list[str], devices: str, mode: str, returncode: int,
             processes: list[dict[str, Any]]) -> dict[str, Any]:
    """The preflight document of a command's run: its verdict and per-device peaks from its processes' reports."""
    name, notes = verdict(returncode, processes)
    if mode == "native" and not processes and returncode == 0:
        notes = ["no process initialised CUDA through torch in native mode"]
    ooms = [p["oom"] for p in processes if p["oom"]["occurred"]]
    uncertain = merge_uncertainty(processes)
    if uncertain:
        directions = sorted({u["direction"] for u in uncertain})
        notes = [*notes, f"the peak may be off where fakecuda's memory is known not to match CUDA's "
                         f"({', '.join(directions)}): {', '.join(u['op'] for u in uncertain)}; "
                         f"`--mode native` measures PyTorch's own CUDA path"]
    return {
        "schema": PREFLIGHT_SCHEMA,
        "mode": mode,
        "devices_spec": devices,
        "command": command,
        "verdict": name,
        "exit_code": EXIT_FOR[name],
        "process_exit_code": returncode,
        "devices": merge_devices(devices, processes),
        "oom": {
            "occurred": bool(ooms),
            "device": ooms[-1]["device"] if ooms else None,
            "requested_bytes": ooms[-1]["requested_bytes"] if ooms else None,
            "message": ooms[-1]["message"] if ooms else None,
        },
        "processes": processes,
        "uncertainty": uncertain,
        "notes": notes,
    }


def merge_uncertainty(processes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The processes' uncertain ops (fidelity.py) as one list, calls summed, most called first."""
    merged: dict[str, dict[str, Any]] = {}
    for p in processes:
        for u in p.get("uncertainty", []):
            entry = merged.setdefault(u["op"], {**u, "calls": 0})
            entry["calls"] += u["calls"]
    return sorted(merged.values(), key=lambda u: (-u["calls"], u["op"]))


def _relative(a: int, b: int) -> float | None:
    return None if b == 0 else round((a - b) / b, 4)


def _both(native: dict[str, Any], fake: dict[str, Any]) -> dict[str, Any]:
    """One document from the two runs: native mode's verdict (PyTorch's own CUDA allocation sequence), unless
    native mode could not run the program and fakecuda could (control flow on computed values)."""
    use_fake = native["verdict"] == "RUNTIME_ERROR" and fake["verdict"] != "RUNTIME_ERROR"
    doc = dict(fake if use_fake else native)
    doc["mode"] = "both"
    doc["verdict_from"] = "fakecuda" if use_fake else "native"
    why = ("verdict from fakecuda: native mode failed to run the command (it computes no values, so a program "
           "that branches on them can fail there)" if use_fake else
           "verdict from native mode: PyTorch's own CUDA dispatch and caching allocator on the simulated memory, "
           "exact for programs whose shapes do not depend on computed values")
    doc["notes"] = [*doc["notes"], why]
    other = native if use_fake else fake
    doc["other"] = {"mode": "native" if use_fake else "fakecuda", "verdict": other["verdict"],
                    "devices": other["devices"], "processes": other["processes"]}
    doc["comparison"] = [{
        "index": n["index"],
        "native_peak_allocated_bytes": n["peak_allocated_bytes"],
        "fakecuda_peak_allocated_bytes": f["peak_allocated_bytes"],
        "native_peak_reserved_bytes": n["peak_reserved_bytes"],
        "fakecuda_peak_reserved_bytes": f["peak_reserved_bytes"],
        "fakecuda_error_allocated": _relative(f["peak_allocated_bytes"], n["peak_allocated_bytes"]),
        "fakecuda_error_reserved": _relative(f["peak_reserved_bytes"], n["peak_reserved_bytes"]),
    } for n, f in zip(native["devices"], fake["devices"], strict=True)]
    return doc


def run_preflight(command: list[str], devices: str, environ: dict[str, str] | None = None,
                  stdout=None, mode: str = "fakecuda") -> dict[str, Any]:
    """Run `command` under fakecuda, native mode, or both; the preflight document (reports: `preflight`).

    Native mode needs PyTorch's CUDA build and FakeGPU's native libraries (LaunchError names what is missing).
    """
    if mode not in MODES:
        raise ValueError(f"unknown preflight mode {mode!r}; expected one of: {', '.join(MODES)}")
    if mode == "both":
        native = document(command, devices, "native", *_run(command, devices, "native", environ, stdout))
        fake = document(command, devices, "fakecuda", *_run(command, devices, "fakecuda", environ, stdout))
        return _both(native, fake)
    return document(command, devices, mode, *_run(command, devices, mode, environ, stdout))


