"""`fakegpu validate MANIFEST [-j N] [--filter PATTERN]... [--fail-fast] [--rerun-failed] [--out DIR]
[--junit FILE] [--markdown FILE] [--html FILE] [--json]`: run a matrix of commands on fake GPU profiles and check
their expectations; `fakegpu validate --init [FILE]` writes a starter manifest (library: fakegpu.validate)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from fakegpu.cli.output import emit_json, fail
from fakegpu.errors import EXIT_INTERRUPTED, FakeGPUError, UsageError
from fakegpu.validate import DEFAULT_OUT


def validate(
    manifest: Path | None = typer.Argument(
        None, help="The manifest: .yaml, .yml, .json or .toml (with --init: the file to write, default "
        "fakegpu-validate.yaml)."),
    jobs: int = typer.Option(1, "--jobs", "-j", help="Cases run at once."),
    filters: list[str] = typer.Option(
        [], "--filter", "-k", help="Run only cases whose id (as progress prints it: the case name, then its "
        "axis values) contains this, e.g. t4 or batch=8, or matches it whole as a glob with * and ?; repeat for more."),
    fail_fast: bool = typer.Option(False, "--fail-fast", help="Start no new case after the first that fails."),
    rerun_failed: bool = typer.Option(
        False, "--rerun-failed", help="Run only the cases that did not pass in the last run (the report in --out)."),
    out: Path = typer.Option(DEFAULT_OUT, "--out", help="Folder for report.json and each case's logs."),
    junit: Path | None = typer.Option(
        None, "--junit", help="Also write the report as JUnit XML (GitHub Actions, GitLab, Jenkins read it)."),
    markdown: Path | None = typer.Option(
        None, "--markdown", help="Also write a Markdown summary (e.g. --markdown \"$GITHUB_STEP_SUMMARY\")."),
    html: Path | None = typer.Option(None, "--html", help="Also write a self-contained HTML summary."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON (progress goes to stderr)."),
    init: bool = typer.Option(False, "--init", help="Write a starter manifest for this repository and exit."),
) -> None:
    """Run MANIFEST's cases on every profile of its matrix; exit 0 when none failed (skipped ones do not fail a
    run), 1 when one did, 2 for a bad manifest or usage."""
    from fakegpu.validate import plan, run_plan
    from fakegpu.validate import report as text
    from fakegpu.validate.progress import Progress

    stream = sys.stderr if as_json else sys.stdout
    if init:
        _init(manifest, as_json)
    try:
        if manifest is None:
            raise UsageError("no manifest given: fakegpu validate MANIFEST (or --init to write one)")
        if jobs < 1:
            raise UsageError(f"--jobs {jobs}: at least 1")
        planned = plan(manifest, out, filters, rerun_failed)
        if planned.rerun is not None:
            print(text.rerun_line(planned.rerun), file=stream, flush=True)
        if not planned.cases:
            print("nothing to rerun; the last report stays as it was", file=stream)
            if as_json:
                emit_json("validate", None)
            raise typer.Exit(0)
        progress = Progress(stream, len(planned.cases))
        extra = {name: path for name, path in (("junit", junit), ("markdown", markdown), ("html", html)) if path}
        try:
            doc = run_plan(planned, manifest, out, jobs=jobs, fail_fast=fail_fast, on_start=progress.start,
                           on_done=progress.done, extra=extra)
        finally:
            progress.close()
    except FakeGPUError as exc:
        raise fail("validate", exc, as_json) from exc
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM/SIGHUP while cases ran: their process trees are ended
        print("fakegpu validate: interrupted; the running cases were ended", file=sys.stderr)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except OSError as exc:
        raise fail("validate", FakeGPUError(
            f"cannot write {exc.filename or f'under {out}'}: {exc.strerror or exc}"), as_json) from exc
    written = "".join(f", {name}: {path}" for name, path in extra.items())
    print(f"{text.summary_line(doc)}; report: {out / 'report.json'}{written}", file=stream)
    if as_json:
        emit_json("validate", doc, doc["exit_code"])
    raise typer.Exit(doc["exit_code"])


def _init(path: Path | None, as_json: bool) -> None:
    from fakegpu.validate import starter

    target = path or Path(starter.DEFAULT_NAME)
    try:
        starter.write(target)
    except FakeGPUError as exc:
        raise fail("validate", exc, as_json) from exc
    except OSError as exc:
        raise fail("validate", FakeGPUError(f"cannot write {target}: {exc.strerror or exc}"), as_json) from exc
    if as_json:
        emit_json("validate", {"manifest": str(target)})
    else:
        print(f"wrote {target}; run it with: fakegpu validate {target}")
    raise typer.Exit(0)
