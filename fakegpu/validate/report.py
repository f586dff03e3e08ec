"""What a validate run tells: one plain progress line per case (CI logs read them as they come), a summary,
and the JSON report (schema fakegpu/reports/schemas/validate.schema.json, written atomically).

The JSON report is the one source of every other report (junit.py, summary.py): they read the built document,
and the per-case logs it names, through the helpers at the end of this module."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fakegpu import reports
from fakegpu.atomic_file import write_atomic
from fakegpu.errors import EXIT_FAILURE, EXIT_OK, UsageError, shorten
from fakegpu.user_files import loads_json
from fakegpu.validate.runner import STATUSES, CaseResult

SCHEMA = reports.schema_id("validate")


def exit_code(results: Sequence[CaseResult]) -> int:
    """1 when a case failed, timed out or could not start, else 0 (a manifest or usage error, 2, never gets this
    far)."""
    return EXIT_FAILURE if any(r.failing for r in results) else EXIT_OK


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


def build(manifest: Path, results: Sequence[CaseResult], started: float, elapsed_s: float,
          rerun: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = {
        "schema": SCHEMA,
        "manifest": str(manifest),
        "started": started,
        "elapsed_s": round(elapsed_s, 3),
        "exit_code": exit_code(results),
        "summary": {"total": len(results), **{s: sum(r.status == s for r in results) for s in STATUSES}},
        "cases": [_case(r) for r in results],
    }
    if rerun is not None:
        doc["rerun"] = rerun
    return doc


def _case(r: CaseResult) -> dict[str, Any]:
    c = r.case
    doc = {
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
    if c.image:
        doc["image"] = c.image
    if r.memory is not None:
        doc["memory"] = _memory(r.memory)
    return doc


def _memory(preflight: dict[str, Any]) -> dict[str, Any]:
    """What a case's memory checks were held against: preflight's verdict and per-device peaks."""
    return {"verdict": preflight["verdict"], "processes": len(preflight["processes"]),
            "devices": preflight["devices"], "notes": preflight["notes"]}


def read_last(out_dir: Path) -> dict[str, Any]:
    """The report the last run left in `out_dir`; UsageError (exit 2) when there is none or it is not one."""
    path = Path(out_dir) / "report.json"
    try:
        doc = loads_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"--rerun-failed: no report of a last run in {out_dir} ({path.name}); run the manifest "
                         "once first, with the same --out") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--rerun-failed: cannot read {path}: {exc}") from None
    if not (isinstance(doc, dict) and doc.get("schema") == SCHEMA and isinstance(doc.get("cases"), list)):
        raise UsageError(f"--rerun-failed: {path} is no fakegpu validate report (schema {SCHEMA})")
    return doc


def not_passed(doc: dict[str, Any]) -> list[str]:
    """The ids of a report's cases that did not pass (failed, timed out, could not start, or were skipped)."""
    return [c["id"] for c in doc["cases"] if isinstance(c, dict) and c.get("status") != "passed"
            and isinstance(c.get("id"), str)]


def rerun_line(rerun: dict[str, Any]) -> str:
    """What --rerun-failed took from the last report, for the person reading the log."""
    picked = rerun["rerun"]
    text = (f"--rerun-failed: {len(picked)} of the {rerun['not_passed']} case"
            f"{'s' if rerun['not_passed'] != 1 else ''} that did not pass in the last run")
    gone = rerun["not_in_manifest"]
    if gone:
        text += (f"; not in the manifest any more, skipped: {', '.join(shorten(g) for g in gone[:5])}"
                 + (f" and {len(gone) - 5} more" if len(gone) > 5 else ""))
    return text


def write(path: Path, doc: dict[str, Any]) -> None:
    write_text(path, json.dumps(doc, indent=2) + "\n")


def write_text(path: Path, text: str) -> None:
    """Any report file: its folder made, the file replaced atomically (a CI step reading it never sees half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)


# ---------------------------------------------------------------- reading a built report, for the other formats


def axis_text(case: dict[str, Any]) -> str:
    """profile=t4, mode=native: the combination a case ran on (include's added keys too)."""
    return ", ".join(f"{k}={v}" for k, v in case["values"].items())


def first_failure(case: dict[str, Any]) -> str:
    """Why a case did not pass, in one line: its first failed check and what was found, else its message
    (timeout, error, skipped); empty for a case that passed."""
    if case["status"] == "passed":
        return ""
    failed = [c for c in case["checks"] if not c["passed"]]
    if failed:
        return f"{failed[0]['check']}: {failed[0]['detail']}" if failed[0]["detail"] else failed[0]["check"]
    return case["message"]


def failed_checks(case: dict[str, Any]) -> list[str]:
    """Every check that did not hold, with its detail."""
    return [f"{c['check']}: {c['detail']}" if c["detail"] else c["check"] for c in case["checks"] if not c["passed"]]


# How much of a log a report quotes: its end, where a failure shows.
EXCERPT_CHARS = 8000


def log_excerpt(path: str | None, limit: int = EXCERPT_CHARS) -> str:
    """The last `limit` characters of a case's log, saying what was left out and where the whole is; empty when
    there is no log (a case that never started)."""
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            start = max(0, size - 4 * limit)  # at most 4 bytes a character: enough for `limit` of them
            f.seek(start)
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    if start == 0 and len(text) <= limit:
        return text
    return f"[... the first part left out; the whole log ({size} bytes): {path}]\n" + text[-limit:]
