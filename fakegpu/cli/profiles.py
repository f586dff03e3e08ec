"""`fakegpu profiles list|show`: browse the GPU catalog."""

from __future__ import annotations

import typer

from fakegpu.cli.output import emit_json, fail
from fakegpu.errors import UnknownProfile, UsageError
from fakegpu.profiles import Profile, load_catalog
from fakegpu.text import human_bytes, table

app = typer.Typer(help="Browse the GPU catalog.", no_args_is_help=True)

ARCHITECTURES = ("maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell")
SEGMENTS = ("consumer", "workstation", "datacenter", "embedded")


def _summary(p: Profile) -> dict:
    return {
        "id": p.id,
        "name": p.name,
        "aliases": p.aliases,
        "architecture": p.architecture,
        "segment": p.segment,
        "compute_capability": p.data["compute_capability"],
        "sm_count": p.sm_count,
        "memory_total_bytes": p.memory_total_bytes,
        "memory_type": p.data["memory"]["type"],
    }


def _check_choice(command: str, label: str, value: str | None, choices: tuple[str, ...], as_json: bool) -> None:
    if value is not None and value.lower() not in choices:
        from fakegpu.profiles.matching import did_you_mean

        err = UsageError(f"unknown {label} {value!r}{did_you_mean(value, choices)}; accepted: {', '.join(choices)}")
        raise fail(command, err, as_json)


@app.command("list")
def list_profiles(
    arch: str | None = typer.Option(None, "--arch", help="Only this architecture, e.g. hopper."),
    segment: str | None = typer.Option(None, "--segment", help="consumer, workstation, datacenter or embedded."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List the profiles (every board FakeGPU can pretend to be)."""
    _check_choice("profiles list", "architecture", arch, ARCHITECTURES, as_json)
    _check_choice("profiles list", "segment", segment, SEGMENTS, as_json)
    profiles = load_catalog().select(architecture=arch, segment=segment)
    if as_json:
        emit_json("profiles list", [_summary(p) for p in profiles])
        return
    rows = [
        (p.id, p.name, p.architecture, p.data["compute_capability"], p.sm_count, human_bytes(p.memory_total_bytes),
         ", ".join(p.aliases))
        for p in profiles
    ]
    typer.echo(table(rows, ["ID", "NAME", "ARCH", "CC", "SMS", "MEMORY", "ALIASES"]))
    typer.echo(f"\n{len(profiles)} profiles")


@app.command("show")
def show_profile(
    name: str = typer.Argument(..., help="Profile id, alias or board name."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show every fact of one profile and where it comes from."""
    try:
        profile = load_catalog().get(name)
    except UnknownProfile as exc:
        raise fail("profiles show", exc, as_json) from exc
    if as_json:
        emit_json("profiles show", profile.to_dict())
        return
    rows = list(_flatten(profile.to_dict()))
    typer.echo(table(rows, ["FIELD", "VALUE"]))


def _flatten(doc: dict, prefix: str = ""):
    for key, value in doc.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _flatten(value, path + ".")
        elif isinstance(value, list):
            yield path, ", ".join(str(v) for v in value)
        else:
            yield path, value
