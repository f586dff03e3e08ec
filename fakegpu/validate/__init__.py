"""`fakegpu validate`: run a declarative matrix of commands against fake GPU profiles and check what each does.

    manifest.py   read a YAML/JSON/TOML manifest, check it against manifest.schema.json (file:line errors)
    matrix.py     axes x cases with include/exclude, placeholders filled in, --filter
    checks.py     expectations: exit code, stdout/stderr contains/matches, JSON pointer operators
    requires.py   a case's requirements (modules, programs, a Docker Engine): unmet, it is skipped
    runner.py     each case as `fakegpu run` runs it, own process group, timeout ends the tree, -j N
    container.py  mode container: the case's image through the Docker SDK with --runtime=fakegpu, by label
    report.py     progress lines, summary, the JSON report (reports/schemas/validate.schema.json): the one
                  source of the others
    progress.py   the per-case lines, and on a terminal a live status line (done, running, failed, time)
    junit.py      the report as JUnit XML (--junit) for GitHub Actions, GitLab and Jenkins
    summary.py    the report as Markdown (--markdown, $GITHUB_STEP_SUMMARY) and one HTML page (--html)

`run_manifest` is the whole of it for a caller that is not the CLI.

--rerun-failed (`plan(..., rerun_failed=True)`): the cases of the manifest whose ids the last report in the output
folder lists as not passed; ids the manifest no longer makes are named in the plan (and the new report) and
skipped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakegpu.errors import UsageError
from fakegpu.validate import report
from fakegpu.validate.manifest import ManifestError, load
from fakegpu.validate.matrix import Case, expand, select
from fakegpu.validate.runner import CaseResult, check_runnable, run_cases

DEFAULT_OUT = Path(".fakegpu") / "validate"

__all__ = ["DEFAULT_OUT", "FORMATS", "Case", "CaseResult", "ManifestError", "Plan", "plan", "run_manifest",
           "run_plan", "write_reports"]


def _writers() -> dict[str, Callable[[Path, dict[str, Any]], None]]:
    from fakegpu.validate import junit, summary

    return {"junit": junit.write, "markdown": summary.write_markdown, "html": summary.write_html}


# The formats besides report.json, each written from the same report document.
FORMATS = ("junit", "markdown", "html")


@dataclass(frozen=True)
class Plan:
    """What a run will run: `cases`, and with --rerun-failed what the last report gave (`rerun`: the report's
    `rerun` object, None otherwise). `cases` may be empty only for a rerun with nothing left to run."""

    cases: list[Case]
    rerun: dict[str, Any] | None = None


def plan(manifest_path: str | Path, out_dir: str | Path = DEFAULT_OUT, filters: Sequence[str] = (),
         rerun_failed: bool = False) -> Plan:
    """The cases a run would run, checked runnable; ManifestError when the manifest is bad or a filter
    selects nothing, UsageError when --rerun-failed finds no last report."""
    manifest = load(manifest_path)
    cases = expand(manifest, Path(out_dir).resolve())
    chosen = select(cases, filters)
    if not chosen:
        raise ManifestError([f"{manifest_path}: --filter {' '.join(filters)} selects none of the "
                             f"{len(cases)} cases (e.g. {cases[0].id})"])
    rerun = None
    if rerun_failed:
        last = report.read_last(Path(out_dir))
        ids = report.not_passed(last)
        known = {c.id for c in cases}
        chosen = [c for c in chosen if c.id in ids]
        rerun = {"last_started": last.get("started"), "not_passed": len(ids),
                 "rerun": [c.id for c in chosen], "not_in_manifest": [i for i in ids if i not in known]}
    check_runnable(chosen)
    return Plan(chosen, rerun)


def run_plan(planned: Plan, manifest_path: str | Path, out_dir: str | Path = DEFAULT_OUT, jobs: int = 1,
             fail_fast: bool = False, on_start: Callable[[Case], None] | None = None,
             on_done: Callable[[CaseResult], None] | None = None,
             extra: Mapping[str, str | Path] | None = None) -> dict[str, Any]:
    """Run planned cases and write <out_dir>/report.json, and each of `extra` ({format: path}, FORMATS);
    returns the report."""
    started, clock = time.time(), time.monotonic()
    if not planned.cases:  # a rerun with nothing left to run: the last report stays as it is
        return report.build(Path(manifest_path), [], started, 0.0, planned.rerun)
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        # Found before any case runs: each case's logs go under it, and a worker that cannot make its folder
        # would die in its thread with the cases left unreported.
        raise UsageError(f"--out {out_dir}: exists and is not a folder; name a folder for report.json and the "
                         "cases' logs")
    for name, path in (extra or {}).items():
        if Path(path).is_dir():
            raise UsageError(f"--{name} {path}: is a folder; name the file to write")
    Path(out_dir).mkdir(parents=True, exist_ok=True)  # an OSError (no permission) now, not in every case
    results = run_cases(planned.cases, jobs=jobs, fail_fast=fail_fast, on_start=on_start, on_done=on_done)
    doc = report.build(Path(manifest_path), results, started, time.monotonic() - clock, planned.rerun)
    write_reports(doc, out_dir, extra or {})
    return doc


def write_reports(doc: dict[str, Any], out_dir: str | Path, extra: Mapping[str, str | Path]) -> None:
    """report.json under `out_dir`, then every other format asked for, all from `doc`."""
    unknown = [f for f in extra if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown report format {unknown[0]!r}; expected one of: {', '.join(FORMATS)}")
    report.write(Path(out_dir) / "report.json", doc)
    writers = _writers()
    for name, path in extra.items():
        writers[name](Path(path), doc)


def run_manifest(manifest_path: str | Path, out_dir: str | Path = DEFAULT_OUT, jobs: int = 1,
                 filters: Sequence[str] = (), fail_fast: bool = False,
                 extra: Mapping[str, str | Path] | None = None, rerun_failed: bool = False) -> dict[str, Any]:
    """plan, then run_plan."""
    return run_plan(plan(manifest_path, out_dir, filters, rerun_failed), manifest_path, out_dir, jobs, fail_fast,
                    extra=extra)
