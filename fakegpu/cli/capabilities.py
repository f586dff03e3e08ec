"""`fakegpu capabilities`: per library, what FakeGPU implements, what it refuses on purpose, what is a
not-supported stub; `--strict` audits the built exports, `--from-report` lists the unsupported calls a run made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from fakegpu.cli.output import emit_json, fail
from fakegpu.errors import EXIT_CHECK_FAILED, EXIT_OK, FakeGPUError

SHOWN_STUBS = 12  # text output with one library: stub names shown (the --json report has them all)


def capabilities(
    library: list[str] = typer.Option([], "--library", "-l", help="Only this library (nvml, cuda, cudart, "
                                      "cublas, cublasLt, cudnn, nccl, ..., fakecuda; driver and runtime are "
                                      "accepted); repeatable. With one library, its functions are listed."),
    strict: bool = typer.Option(False, "--strict", help="Audit the built libraries' dynamic exports against the "
                                "tables and generated stubs; exit 3 naming every drift."),
    from_report: list[Path] = typer.Option([], "--from-report", metavar="FILE", help="A native-mode process "
                                           "report (fakegpu-native-<pid>.json, nvml-<pid>.json) or a `fakegpu run "
                                           "--report-dir` folder: list the unsupported calls the run made; "
                                           "repeatable."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output (schema capabilities)."),
) -> None:
    """What FakeGPU does for real, records only, or refuses, per CUDA library and for fakecuda's torch.cuda."""
    from fakegpu.analyze.capabilities import capabilities as build
    from fakegpu.fakecuda.surface import surface

    try:
        report = build(library, strict=strict, reports=from_report, fakecuda_surface=surface)
    except FakeGPUError as exc:
        raise fail("capabilities", exc, as_json) from exc
    code = EXIT_CHECK_FAILED if strict and not report["strict"]["ok"] else EXIT_OK
    if as_json:
        from fakegpu.analyze.capabilities.audit import describe

        errors = [{"code": f"drift-{d['kind']}", "message": describe(d)} for d in report["strict"]["drift"]] \
            if report["strict"] else []
        emit_json("capabilities", report, code, errors)
    else:
        _render(report)
    raise typer.Exit(code)


def _render(report: dict[str, Any]) -> None:
    from fakegpu.text import table

    # With --from-report the run's calls are the answer; the library overview would bury them.
    if report["hits"] is None:
        _render_libraries(report, table)
        if report["fakecuda"] is not None:
            _render_fakecuda(report["fakecuda"])
    else:
        _render_hits(report["hits"], table)
    if report["strict"] is not None:
        _render_strict(report["strict"])


def _render_libraries(report: dict[str, Any], table) -> None:
    libraries = report["libraries"]
    if not libraries:
        return
    if not report["built"]:
        typer.echo("native libraries not built (`make native`): stub lists unknown, implemented functions from the "
                   "tables\n")
    rows = []
    for lib in libraries:
        for i, b in enumerate(lib["builds"] or [{"file": "(not built)", "implemented": None, "stub_count": None}]):
            rows.append((lib["library"] if i == 0 else "", b["file"],
                         b["implemented"] if b["implemented"] is not None else len(lib["implemented"]),
                         sum(f["recorded"] for f in lib["implemented"]) if i == 0 else "",
                         len(lib["unsupported_declared"]) if i == 0 else "",
                         "?" if b["stub_count"] is None else b["stub_count"]))
    typer.echo(table(rows, ["LIBRARY", "FILE", "IMPLEMENTED", "OF THEM RECORDED ONLY", "REFUSED ON PURPOSE",
                            "NOT-SUPPORTED STUBS"]))
    typer.echo("")
    if len(libraries) == 1:
        _render_one(libraries[0])
        return
    width = max(len(lib["library"]) for lib in libraries)
    for lib in libraries:
        typer.echo(f"{lib['library'].ljust(width)}  {lib['title']}: {lib['native_behaviour']}")
    typer.echo("\nNot-supported stubs return the library's not-supported status and are counted in the process "
               "report (FAKEGPU_UNSUPPORTED_API=warn prints each, =error aborts); `--library NAME` lists one "
               "library's functions, `--json` every name.")


def _render_one(lib: dict[str, Any]) -> None:
    typer.echo(f"{lib['title']}: {lib['native_behaviour']}")
    by_file: dict[str, list[str]] = {}
    for f in lib["implemented"]:
        by_file.setdefault(f["file"], []).append(f["name"] + (f" ({f['note']})" if "note" in f else ""))
    typer.echo(f"\nimplemented ({len(lib['implemented'])}, by source file):")
    for file in sorted(by_file):
        typer.echo(f"  {file}: {', '.join(by_file[file])}")
    recorded = [f["name"] for f in lib["implemented"] if f["recorded"]]
    if recorded:
        typer.echo(f"\nof them recorded only, validated and counted but not done ({len(recorded)}): "
                   f"{', '.join(recorded)}")
    if lib["unsupported_declared"]:
        typer.echo(f"\nrefused on purpose ({len(lib['unsupported_declared'])}):")
        for r in lib["unsupported_declared"]:
            typer.echo(f"  {r['name']}: {r['reason']}")
    for b in lib["builds"]:
        if b["implemented_elsewhere"]:
            typer.echo(f"\n{b['file']} leaves out (its CUDA headers do not declare them): "
                       f"{', '.join(b['implemented_elsewhere'])}")
        stubs = b["stubs"]
        if b["stub_count"] is None:
            continue
        shown = ", ".join(stubs[:SHOWN_STUBS]) + (f", ... (--json lists all {len(stubs)})"
                                                  if len(stubs) > SHOWN_STUBS else "")
        typer.echo(f"\n{b['file']}: {len(stubs)} not-supported stubs" + (f": {shown}" if stubs else ""))


def _render_fakecuda(section: dict[str, Any]) -> None:
    typer.echo(f"\n{section['title']}: {section['behaviour']}")
    if not section["available"]:
        typer.echo(f"  not listed: {section['reason']}")
        return
    owners: dict[str, list[str]] = {}
    for e in section["entry_points"]:
        owners.setdefault(e["owner"], []).append(e["name"])
    typer.echo(f"  {len(section['entry_points'])} entry points replaced (torch {section['torch_version']}):")
    for owner in sorted(owners):
        typer.echo(f"  {owner}: {', '.join(owners[owner])}")


def _render_strict(result: dict[str, Any]) -> None:
    from fakegpu.analyze.capabilities.audit import describe

    files = len(result["checked"])
    exports = sum(c["exports"] for c in result["checked"])
    if result["ok"]:
        typer.echo(f"\nstrict: the exports of {files} built libraries ({exports} symbols) match the tables and "
                   "generated stubs")
        return
    typer.echo(f"\nstrict: DRIFT in {len(result['drift'])} place(s) ({files} libraries checked):")
    for d in result["drift"]:
        typer.echo(f"  {describe(d)}")


def _render_hits(hits: dict[str, Any], table) -> None:
    if not hits["libraries"]:
        typer.echo(f"no unsupported call in {hits['processes']} process report(s)")
        return
    typer.echo(f"unsupported calls the run made ({hits['total_calls']} in {hits['processes']} process "
               "report(s)):")
    rows = [(lib["library"] if i == 0 else "", f["name"], f["calls"], f["processes"], f["kind"] +
             (f": {f['reason']}" if f["reason"] else ""))
            for lib in hits["libraries"] for i, f in enumerate(lib["functions"])]
    typer.echo(table(rows, ["LIBRARY", "FUNCTION", "CALLS", "PROCESSES", "WHAT"]))
    typer.echo("\nstub: FakeGPU does not implement it and returned the library's not-supported status; "
               "refused: a function FakeGPU implements refused that flag or mode; unsupported-declared: not "
               "supported on purpose. The program saw an error status at each call: check that it copes, or that "
               "the path is one your real run would not take.")
