"""`fakegpu preflight`: run a command under fakecuda, collect its processes' reports, give a verdict.

The command runs in the environment `fakegpu run --mode fakecuda` gives (fakegpu.launcher.prepare: the device
table, FAKEGPU_RUNTIME=fakecuda, and a folder first on PYTHONPATH whose sitecustomize.py imports
fakegpu.fakecuda.envhook and then hands over to the sitecustomize that would otherwise have run), plus
FAKEGPU_REPORT_DIR for the processes' reports. Why this start hook: a .pth line needs a write into the
interpreter's site-packages (not ours to change for one run), and wrapping `python` itself misses
interpreters started by the script; PYTHONPATH reaches every Python process of the command tree, child
processes included. Interpreters started with -I or -S skip it; then no report comes back, which the
verdict says.

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
from fakegpu.fakecuda.report import PROCESS_REPORT

PREFLIGHT_REPORT = "preflight"
SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("schemas") / "preflight.schema.json"
EXIT_FOR = {"PASS_FIT": 0, "FAIL_OOM": 2, "RUNTIME_ERROR": 1}

def collect(report_dir: str) -> list[dict[str, Any]]:
    reports = []
    for path in sorted(Path(report_dir).glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if doc.get("report") == PROCESS_REPORT:
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


def run_preflight(command: list[str], devices: str, environ: dict[str, str] | None = None,
                  stdout=None) -> dict[str, Any]:
    """Run `command` under fakecuda; the preflight document (see schemas/preflight.schema.json)."""
    from fakegpu.launcher import prepare  # the one place a child's fake-GPU environment is made

    launch = prepare(devices, "fakecuda", dict(os.environ if environ is None else environ))
    try:
        report_dir = os.path.join(launch.root, "reports")
        os.makedirs(report_dir)
        env = {**launch.env, "FAKEGPU_REPORT_DIR": report_dir}
        try:
            returncode = subprocess.run(command, env=env, stdout=stdout).returncode
        except OSError as exc:
            returncode = 127
            print(f"fakegpu preflight: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        processes = collect(report_dir)
    finally:
        launch.cleanup()
    name, notes = verdict(returncode, processes)
    ooms = [p["oom"] for p in processes if p["oom"]["occurred"]]
    return {
        "report": PREFLIGHT_REPORT,
        "schema_version": SCHEMA_VERSION,
        "mode": "fakecuda",
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
        "notes": notes,
    }


def validate(doc: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError when `doc` breaks the preflight schema."""
    import jsonschema

    jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text())).validate(doc)
