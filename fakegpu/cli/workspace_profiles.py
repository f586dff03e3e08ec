"""`fakegpu workspace-profiles list|show|validate`: the CUDA context and cuBLAS workspace figures per software stack
(fakegpu/profiles/workspace_profiles.py), with a user's own files first."""

from __future__ import annotations

import textwrap
from pathlib import Path

import typer

from fakegpu.cli.output import emit_json, fail
from fakegpu.errors import FakeGPUError, UsageError
from fakegpu.text import table

app = typer.Typer(help="CUDA context and cuBLAS workspace sizes per software stack (torch, CUDA, GPU).",
                  no_args_is_help=True)

FILE_HELP = "A workspace-profiles file of your own (YAML or JSON); its entries come before the built-in ones. Repeat."


def _size(value: object) -> str:
    """Exact, in the largest binary unit that divides it: the figures are whole KiB or MiB."""
    if isinstance(value, bool) or not isinstance(value, int):
        return str(value).lower() if isinstance(value, bool) else str(value)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value and value % scale == 0:
            return f"{value // scale} {unit}"
    return f"{value} B"


def _short(where: str) -> str:
    """A user's file:line by its name only (--json has the whole path)."""
    return Path(where).name if where != "built-in" else where


def _load(files: list[Path]):
    from fakegpu.profiles import workspace_profiles

    return workspace_profiles.load(files)


@app.command("list")
def list_entries(
    files: list[Path] = typer.Option([], "--file", help=FILE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List every entry: what stacks it matches and the figures it gives, user files' first."""
    try:
        profiles = _load(files)
    except FakeGPUError as exc:
        raise fail("workspace-profiles list", exc, as_json) from exc
    entries = sorted(profiles.entries, key=lambda e: (not e.user, e.order))
    if as_json:
        emit_json("workspace-profiles list", [e.to_dict() for e in entries])
        return
    rows = [(e.name, _short(e.where), ", ".join(f"{k} {v}" for k, v in e.match.items()) or "every stack",
             ", ".join(f"{k}={_size(f.value)}" for k, f in e.figures.items())) for e in entries]
    typer.echo(table(rows, ["NAME", "FROM", "MATCH", "FIGURES"]))
    typer.echo(f"\n{len(entries)} entries; a figure comes from the most specific matching entry that gives it "
               "(a user's file first). `fakegpu workspace-profiles show` picks them for a stack.")


def _compute_capability(profile: str | None, text: str | None):
    """(compute capability, architecture, the profile's id) of the GPU asked for; (None, None, None): the default."""
    if profile is not None and text is not None:
        raise UsageError("--profile and --compute-capability both name the GPU; give one")
    if profile is not None:
        from fakegpu.profiles import load_catalog

        p = load_catalog().get(profile)
        return p.compute_capability, p.architecture, p.id
    if text is not None:
        parts = text.strip().split(".")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise UsageError(f"--compute-capability: {text!r} is not MAJOR.MINOR, e.g. 9.0")
        return (int(parts[0]), int(parts[1])), None, None
    return None, None, None


@app.command("show")
def show(
    torch: str | None = typer.Option(None, "--torch", help="torch version, e.g. 2.15.0+cu132 (default: the "
                                     "profiles' default stack)."),
    cuda: str | None = typer.Option(None, "--cuda", help="CUDA version, e.g. 12.8 (default: torch's +cuXYZ tag, "
                                    "else the default stack)."),
    profile: str | None = typer.Option(None, "--profile", "-p", help="The GPU, by catalog profile (h100, a100)."),
    compute_capability: str | None = typer.Option(None, "--compute-capability", help="The GPU, by compute "
                                                  "capability (9.0), when no profile names it."),
    files: list[Path] = typer.Option([], "--file", help=FILE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """The figures one stack gets, each with the entry it came from, why, and its source."""
    try:
        cc, arch, pid = _compute_capability(profile, compute_capability)
        over = _load(files).overheads(cc, torch=torch, cuda=cuda, architecture=arch)
    except FakeGPUError as exc:
        raise fail("workspace-profiles show", exc, as_json) from exc
    if as_json:
        emit_json("workspace-profiles show", over.to_dict())
        return
    s = over.stack
    origins = dict(s.origins)
    arch = f", {s.architecture}" if s.architecture else ""
    gpu_from = f"profile {pid}" if pid else origins.get("compute_capability", "named")
    typer.echo(f"stack: torch {s.torch} ({origins.get('torch', 'named')})\n"
               f"       CUDA {s.cuda} ({origins.get('cuda', 'named')})\n"
               f"       compute capability {s.shown('compute_capability')}{arch} ({gpu_from})\n")
    rows = [(name, _size(a.figure.value), a.entry.name, _short(a.entry.where), a.why)
            for name, a in over.applied.items()]
    typer.echo(table(rows, ["FIGURE", "VALUE", "ENTRY", "FROM", "WHY"]))
    typer.echo(f"\nnon-PyTorch memory once kernels and cuBLAS ran (nvidia-smi beyond memory_reserved): "
               f"{_size(over.non_pytorch_bytes())}, {_size(over.non_pytorch_bytes(cudnn=True))} with cuDNN")
    typer.echo("\nwhere each figure comes from:")
    for name, a in over.applied.items():
        typer.echo(textwrap.fill(f"{name} ({a.figure.basis}): {a.figure.text}", width=116, initial_indent="  ",
                                 subsequent_indent="      "))


@app.command("validate")
def validate(
    files: list[Path] = typer.Argument(None, help="Workspace-profiles files to check (default: the built-in one)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Check files against the schema and the rules it cannot say; errors name file:line and key. Exit 2 on one."""
    from fakegpu.profiles import workspace_profiles

    checked, problems = [], []
    if not files:
        problems = workspace_profiles.check_builtin()
        checked.append({"file": str(workspace_profiles.DATA), "entries": len(workspace_profiles.builtin().entries)})
    for path in files or []:
        try:
            entries, _ = workspace_profiles.read_file(path)
            checked.append({"file": str(path), "entries": len(entries)})
        except workspace_profiles.WorkspaceProfileError as exc:
            problems.extend(exc.problems)
    if problems:
        raise fail("workspace-profiles validate", workspace_profiles.WorkspaceProfileError(problems), as_json)
    if as_json:
        emit_json("workspace-profiles validate", {"files": checked})
        return
    for c in checked:
        typer.echo(f"{c['file']}: ok, {c['entries']} {'entry' if c['entries'] == 1 else 'entries'}")
