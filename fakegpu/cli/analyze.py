"""`fakegpu analyze-repo`: which FakeGPU path runs each entry point of a repository, with the evidence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from fakegpu.cli.output import emit_json, fail
from fakegpu.errors import FakeGPUError

SHOWN_PER_LIST = 8  # text output: items per repository-level list (the --json report has them all)


def analyze_repo(
    path: Path = typer.Argument(..., help="The repository (a folder), or one Python file or notebook in it.",
                                show_default=False),
    entry: list[str] = typer.Option([], "--entry", "-e", help="Judge only this entry point (a Python file or "
                                    "notebook of the tree, relative to the current folder or to PATH); repeatable."),
    max_file_size: str = typer.Option("2MiB", "--max-file-size", help="Text files larger than this are not parsed "
                                      "(each is reported as too-large with its size)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output (schema analyze-repo)."),
) -> None:
    """What in a repository needs a GPU: per entry point, the FakeGPU path that runs it (cpu, fakecuda, native,
    container, real-gpu), the evidence with file:line, and the command to try."""
    from fakegpu.analyze.repo import analyze_repo as analyze
    from fakegpu.errors import UsageError
    from fakegpu.sizes import parse_bytes

    try:
        try:
            limit = parse_bytes(max_file_size)
        except ValueError as exc:
            raise UsageError(f"--max-file-size: {exc}") from exc
        report = analyze(path, entry, limit)
    except FakeGPUError as exc:
        raise fail("analyze-repo", exc, as_json) from exc
    if as_json:
        emit_json("analyze-repo", report)
        return
    _render(report, str(path))


def _at(where: dict[str, Any]) -> str:
    cell = f":cell {where['cell']}" if where.get("cell") else ""
    line = f":{where['line']}" if where.get("line") else ""
    return f"{where['path']}{cell}{line}"


def _render(report: dict[str, Any], shown_root: str) -> None:
    scanned = report["scanned"]
    kinds = scanned["by_kind"]
    other = kinds.get("other", 0)
    typer.echo(f"{shown_root}: {scanned['files']} files, {kinds.get('python', 0)} Python "
               f"({scanned['python_parsed']} parsed, {scanned['python_pattern_read']} with no GPU-facing name: "
               f"imports read only), {other} of no kind the scan reads (counted, not opened)")
    for reason, skipped in report["skipped"].items():
        shown = ", ".join(e["path"] + (f" ({e['bytes']} bytes)" if "bytes" in e else "")
                          + (f" (line {e['line']}: {e['error']})" if reason == "syntax-error" else "")
                          for e in skipped["examples"][:3])
        more = "" if skipped["count"] <= 3 else f", ... ({skipped['count']} in all)"
        typer.echo(f"skipped, {reason}: {skipped['count']}: {shown}{more}")
    summary = report["summary"]
    typer.echo(f"verdict: {summary['verdict']} (entry points: " + ", ".join(
        f"{n} {p}" for p, n in summary["entries_by_verdict"].items() if n) + f"; whole tree: "
               f"{summary['repository_verdict']})" if report["entries"] else
               f"verdict: {summary['repository_verdict']} (no entry point found; whole tree)")
    for e in report["entries"]:
        how = "; ".join(f"{d['how']} {_at(d)}" for d in e["declared_by"])
        typer.echo(f"\n{e['name']}  [{e['verdict']}]  {e['path']} ({how})")
        typer.echo(f"  try: {e['command']}")
        typer.echo(f"       {e['meaning']}")
        for r in e["reasons"]:
            via = f" via {' -> '.join(r['via'])}" if len(r.get("via", [])) > 1 else ""
            tag = "optional " if r["optional"] else ""
            typer.echo(f"  {tag}{r['kind']} -> {r['path']}: {_at(r['site'])} {r['site']['detail']}"
                       f" ({r['count']} site{'s' if r['count'] != 1 else ''}){via}")
        for note in e["notes"]:
            typer.echo(f"  note: {note}")
        if e["bounded"]:
            typer.echo(f"  note: the import graph was cut at {e['reached_modules']} modules")
    _repository(report)


def _repository(report: dict[str, Any]) -> None:
    sections = [
        ("the whole tree is " + report["summary"]["repository_verdict"] + " because",
         [f"{w['path']}: {w['reason']}" + (f", e.g. {_at(w['example'])}: {w['example']['detail']}" if w["example"]
                                            else "") for w in report["summary"]["repository_reasons"]]),
        ("optional GPU use (named, not deciding: on some installations or configurations only)",
         [f"{k['kind']} -> {k['path']}: {k['optional']} site(s)" for k in report["summary"]["kinds"]
          if k["optional"] and k["path"] != "cpu"]),
        ("native code", [f"{n['path']}: {n['detail']}" for n in report["native"]]),
        ("GPU dependencies", [f"{d['spec']} ({_at(d)}{', ' + d['group'] if d['group'] else ''})"
                              for d in report["dependencies"] if d["gpu"]]),
        ("infrastructure", [f"{i['kind']}: {i['detail']} ({_at(i)})" for i in report["infrastructure"]]),
        ("not entry points", [f"{_at(n)}: {n['reason']}" for n in report["not_entries"]]),
        ("declared entry points not in the tree", [f"{u['detail']} ({_at(u)}): {u['reason']}"
                                                   for u in report["unresolved_entries"]]),
        ("not read", [f"{_at(u)}: {u['reason']}" for u in report["unread"]]),
    ]
    for title, lines in sections:
        if lines:
            typer.echo(f"\n{title}:")
            for line in lines[:SHOWN_PER_LIST]:
                typer.echo(f"  {line}")
            if len(lines) > SHOWN_PER_LIST:
                typer.echo(f"  ... {len(lines) - SHOWN_PER_LIST} more (--json lists all)")
