"""`fakegpu analyze-repo`: which FakeGPU path runs each entry point of a repository, with the evidence; `fakegpu
analyze-kernel`: what CUDA kernels need, and whether they run on a board."""

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


SHOWN_KERNELS = 20  # text output: kernels per file (the --json report has them all)
SHOWN_IMAGES = 8  # text output: images listed one by one up to this many, else counted per architecture


def analyze_kernel(
    files: list[Path] = typer.Argument(..., help="CUDA source (.cu, .cuh), PTX (.ptx), cubins, fatbinaries, or "
                                       "programs and shared libraries that embed device code.", show_default=False),
    profile: str = typer.Option(None, "--profile", "-p", help="A catalog board: say whether the code runs there "
                                "and each kernel's theoretical occupancy."),
    block_size: int = typer.Option(None, "--block-size", help="Threads per block for occupancy (default: the "
                                   "kernel's launch bounds, else 256)."),
    dynamic_shared: str = typer.Option("0", "--dynamic-shared", help="Dynamic shared memory per block for "
                                       "occupancy, e.g. 16KiB."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output (schema analyze-kernel)."),
) -> None:
    """What CUDA kernels need: per kernel the real registers, shared memory, stack and constant sizes (cubins and
    the fatbinaries of programs and libraries), PTX facts, source kernels and launches; with --profile, whether
    the code can run on that board and each kernel's theoretical occupancy."""
    from fakegpu.analyze.kernel import analyze_kernels
    from fakegpu.errors import EXIT_FAILURE, UsageError
    from fakegpu.sizes import parse_bytes

    try:
        try:
            dynamic = parse_bytes(dynamic_shared)
        except ValueError as exc:
            raise UsageError(f"--dynamic-shared: {exc}") from exc
        report = analyze_kernels(list(files), profile, block_size, dynamic)
    except FakeGPUError as exc:
        raise fail("analyze-kernel", exc, as_json) from exc
    code = EXIT_FAILURE if report["summary"]["unreadable"] else 0
    if as_json:
        emit_json("analyze-kernel", report, code)
    else:
        _render_kernels(report)
    if code:
        raise typer.Exit(code)


def _image(i: dict[str, Any]) -> str:
    text = i["arch"] or "?"
    if i.get("ptx_version"):
        text += f" (PTX {i['ptx_version']})"
    if i.get("compression"):
        text += f" [{i['compression']}{'' if i['read'] else ', not read'}]"
    elif not i["read"]:
        text += " [not read]"
    return text


def _images(images: list[dict[str, Any]]) -> str:
    """Each image, or for many of them (a library's fatbinaries) a count per architecture."""
    if len(images) <= SHOWN_IMAGES:
        return f"; images: {', '.join(_image(i) for i in images)}" if images else ""
    counts: dict[str, int] = {}
    for i in images:
        counts[i["arch"] or "?"] = counts.get(i["arch"] or "?", 0) + 1
    unread = sum(1 for i in images if not i["read"])
    compressed = {i["compression"] for i in images if i.get("compression")}
    how = f"{', '.join(sorted(compressed))}-compressed, " if compressed else ""
    return (f"; {len(images)} images ({how}{f'{unread} not read' if unread else 'all read'}): "
            + ", ".join(f"{arch} x{n}" for arch, n in counts.items()))


def _kernel_line(k: dict[str, Any]) -> str:
    if k["from"] == "source":
        extra = f" template<{k['template']}>" if k["template"] else ""
        extra += f" __launch_bounds__({', '.join(k['launch_bounds'])})" if k["launch_bounds"] else ""
        extra += f" instantiated {', '.join(k['instantiations'])}" if k["instantiations"] else ""
        return f"{k['name']}  line {k['line']}{extra}"
    if k["from"] == "ptx":
        regs = ", ".join(f"{n} .{c}" for c, n in k["virtual_registers"].items())
        tensor = sorted({t["shape"] or t["op"] for t in k["tensor_core"]})
        flops = k["flops_per_thread"] if k["flops_per_thread"] is not None else f"not static ({k['flops_note']})"
        bounds = "".join(f".{d} {','.join(map(str, v))}, " for d, v in k["directives"].items())
        return (f"{k['name']}  [{k['arch']}] {bounds}params {len(k['params'])}, virtual registers {regs or 'none'}, "
                f"shared "
                f"{k['shared_bytes']}{' + dynamic' if k['dynamic_shared'] else ''}, local {k['local_bytes']}, "
                f"{sum(k['instructions'].values())} instructions"
                + (f", tensor cores {' '.join(tensor)}" if tensor else "") + f", FLOPs/thread {flops}")
    line = (f"{k['name']}  [{k['arch']}] registers {k['registers']}, shared {k['shared_bytes']}, stack "
            f"{k['stack_bytes']}, local {k['local_bytes']}, constant[0] {k['constant0_bytes']}")
    occ = k.get("occupancy")
    if occ and occ.get("launchable"):
        line += (f"; occupancy {occ['occupancy']:.0%} ({occ['blocks_per_sm']} blocks of {occ['threads_per_block']}"
                 f" threads, {occ['warps_per_sm']} warps per SM, limited by {', '.join(occ['limited_by'])})")
    elif occ and occ.get("launchable") is False:
        line += f"; cannot launch: {occ['why']}"
    elif occ:
        line += f"; occupancy unknown: {occ['why']}"
    return line


def _shown_kernels(f: dict[str, Any]) -> list[dict[str, Any]]:
    """The kernels of the image that runs on the profile, else of the newest SASS image, else all."""
    chosen = [k for k in f["kernels"] if k.get("occupancy") is not None]
    if chosen:
        return chosen
    sass = [i["arch"] for i in f["images"] if i["kind"] == "sass" and i["read"]]
    if len(f["images"]) > 1 and sass:
        newest = max(sass, key=lambda a: int(a[3:].rstrip("af")))
        return [k for k in f["kernels"] if k.get("arch") == newest]
    return f["kernels"]


def _render_kernels(report: dict[str, Any]) -> None:
    board = report["profile"]
    for n, f in enumerate(report["files"]):
        if n:
            typer.echo("")
        typer.echo(f"{f['path']}: {f['kind']}, {len(f['kernels'])} kernel(s)" + _images(f["images"]))
        if f.get("on_profile"):
            v = f["on_profile"]
            where = f"{board['id']} (compute capability {board['compute_capability']})"
            typer.echo(f"  on {where}: " + (f"runs ({v['why']})" if v["runs"] else f"CANNOT RUN: {v['why']}"))
        shown = _shown_kernels(f)
        if len(shown) < len(f["kernels"]) and shown:
            typer.echo(f"  kernels of {shown[0].get('arch')} ({len(shown)} of {len(f['kernels'])}; --json lists all):")
        for k in shown[:SHOWN_KERNELS]:
            typer.echo(f"  {_kernel_line(k)}")
        if len(shown) > SHOWN_KERNELS:
            typer.echo(f"  ... {len(shown) - SHOWN_KERNELS} more (--json lists all)")
        for launch in f["launches"]:
            args = f"<{launch['template_args']}>" if launch["template_args"] else ""
            how = f"<<<{launch['config']}>>>" if launch["how"] == "<<<>>>" else f"via {launch['how']}"
            typer.echo(f"  launch {launch['kernel']}{args} {how}  line {launch['line']}")
        for problem in f["problems"][:5]:
            typer.echo(f"  not read: {problem}")
        if len(f["problems"]) > 5:
            typer.echo(f"  ... {len(f['problems']) - 5} more problems (--json lists all)")
