"""What a validate run tells: one plain progress line per case (CI logs read them as they come), a summary,
and the JSON report (schema fakegpu/reports/schemas/validate.schema.json, written atomically)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fakegpu import reports
from fakegpu.atomic_file import write_atomic
from fakegpu.errors import EXIT_FAILURE, EXIT_OK
from fakegpu.validate.runner import STATUSES, CaseResult

SCHEMA = reports.schema_id("validate")


def exit_code(results: Sequence[CaseResult]) -> int:
    """0 when every case passed, 1 otherwise (a manifest or usage error, 2, never gets this far)."""
    return EXIT_OK if results and all(r.ok for r in results) else EXIT_FAILURE


def progress_line(result: CaseResult, done: int, total: int) -> str:
    """[3/6] FAIL smi[profile=t4] 0.4 s: stdout contains 'Tesla T4': not found in stdout '...'"""
    head = f"[{done}/{total}] {result.status.upper():7} {result.case.id} {result.elapsed_s:.1f} s"
    failed = [c for c in result.checks if not c.passed]
    why = "; ".join(f"{c.check}: {c.detail}" for c in failed) or result.message
    return f"{head}: {why}" if why and not result.ok else head


def summary_line(doc: dict[str, Any]) -> str:
    """6 cases: 5 passed, 1 failed in 3.2 s, from a built report."""
    counts = doc["summary"]
    parts = ", ".join(f"{n} {s}" for s, n in counts.items() if s != "total" and n)
    return f"{counts['total']} case{'s' if counts['total'] != 1 else ''}: {parts} in {doc['elapsed_s']:.1f} s"


def build(manifest: Path, results: Sequence[CaseResult], started: float, elapsed_s: float) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "manifest": str(manifest),
        "started": started,
        "elapsed_s": round(elapsed_s, 3),
        "exit_code": exit_code(results),
        "summary": {"total": len(results), **{s: sum(r.status == s for r in results) for s in STATUSES}},
        "cases": [_case(r) for r in results],
    }


def _case(r: CaseResult) -> dict[str, Any]:
    c = r.case
    return {
        "id": c.id,
        "name": c.name,
        "values": c.values,
        "devices": c.devices,
        "mode": c.mode,
        "command": c.command,
        "cwd": str(c.cwd),
        "timeout_s": c.timeout_s,
        "status": r.status,
        "exit_code": r.exit_code,
        "elapsed_s": round(r.elapsed_s, 3),
        "message": r.message,
        "checks": [{"check": k.check, "passed": k.passed, "detail": k.detail} for k in r.checks],
        "stdout_log": str(r.stdout_log) if r.stdout_log else None,
        "stderr_log": str(r.stderr_log) if r.stderr_log else None,
    }


def write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(doc, indent=2) + "\n")
