"""`fakegpu runtime install|uninstall`, `fakegpu cdi generate`, `fakegpu hook podman-config`: wire FakeGPU into
container engines. The mechanics live in fakegpu_hook (hook/); these commands parse, call, and render."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import typer

from fakegpu.cli.output import emit_json, fail
from fakegpu.devices import DEFAULT_DEVICES
from fakegpu.errors import FakeGPUError, UsageError

runtime_app = typer.Typer(help="Register the FakeGPU runtime with Docker (daemon.json).", no_args_is_help=True)
cdi_app = typer.Typer(help="Container Device Interface specs.", no_args_is_help=True)
hook_app = typer.Typer(help="OCI hook configuration for other engines.", no_args_is_help=True)


def _script(name: str) -> str:
    """The console script installed beside the running interpreter, else on PATH."""
    sibling = Path(sys.executable).with_name(name)
    if sibling.exists():
        return str(sibling)
    found = shutil.which(name)
    if not found:
        raise FakeGPUError(f"{name} is not installed (pip install fakegpu puts it beside `fakegpu`)")
    return found


def _hook_args() -> list[str]:
    from fakegpu_hook.settings import load_settings

    s = load_settings().resolved()
    return ["--native-dir", s.native_lib_dir, "--nvidia-smi", s.nvidia_smi, "--state-root", s.state_root,
            "--nvidia-profile", s.nvidia_profile]


def _daemon_change(command: str, daemon_json: Path, dry_run: bool, as_json: bool, no_reload: bool, edit) -> None:
    from fakegpu_hook import daemon_json as dj

    try:
        change = dj.apply(daemon_json, edit(dj.load(daemon_json)), dry_run=dry_run, reload=not no_reload)
    except (dj.DaemonConfigError, OSError) as exc:
        raise fail(command, FakeGPUError(str(exc)), as_json) from exc
    if as_json:
        emit_json(command, {"path": str(change.path), "changed": change.changed, "written": change.written,
                            "reloaded": change.reloaded, "diff": change.diff})
        return
    if not change.changed:
        typer.echo(f"{change.path}: already up to date")
        return
    typer.echo(change.diff, nl=False)
    if dry_run:
        typer.echo("(dry run: nothing written)")
    else:
        typer.echo(f"wrote {change.path}" + (f"; {change.reloaded}" if change.reloaded else ""))


@runtime_app.command("install")
def install(
    name: str = typer.Option("fakegpu", "--name", help="Runtime name for `docker run --runtime=NAME`."),
    set_default: bool = typer.Option(False, "--set-default", help="Also make it Docker's default runtime."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the change; write nothing."),
    daemon_json: Path = typer.Option(Path("/etc/docker/daemon.json"), "--config", help="daemon.json to edit."),
    no_reload: bool = typer.Option(False, "--no-reload", help="Do not signal dockerd."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    front_dir: Path | None = typer.Option(None, "--front-dir", envvar="FAKEGPU_FRONT_DIR",
                                          help="Where the sh fronts go (default <prefix>/libexec/fakegpu)."),
    python_create: bool = typer.Option(False, "--python-create",
                                       help="Run every `create` in Python, not the C fast path (to compare)."),
) -> None:
    """Write the sh fronts, add the runtime to daemon.json (other keys kept, atomic, backed up), reload dockerd."""
    from fakegpu_hook import daemon_json as dj
    from fakegpu_hook import front

    # dockerd runs the registered path on every runtime call: register the sh front, which execs runc at once
    # for every command but `create` (C, or Python), rather than the Python console script.
    directory = str(front_dir) if front_dir else front.default_front_dir()
    files = front.front_files(directory, create=front.NO_CREATE if python_create else None)
    path = next(p for p in files if p.endswith(front.RUNTIME_FRONT))
    if not dry_run:
        try:
            dj.load(daemon_json)  # a daemon.json we would refuse stops the install before anything is written
        except (dj.DaemonConfigError, OSError) as exc:
            raise fail("runtime install", FakeGPUError(str(exc)), as_json) from exc
        try:
            front.write_fronts(files)
        except OSError as exc:
            raise fail("runtime install", FakeGPUError(f"cannot write the runtime front in {directory}: {exc}"),
                       as_json) from exc
    _daemon_change("runtime install", daemon_json, dry_run, as_json, no_reload,
                   lambda data: dj.with_runtime(data, name, path, set_default))


@runtime_app.command("uninstall")
def uninstall(
    name: str = typer.Option("fakegpu", "--name", help="Runtime name to remove."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the change; write nothing."),
    daemon_json: Path = typer.Option(Path("/etc/docker/daemon.json"), "--config", help="daemon.json to edit."),
    no_reload: bool = typer.Option(False, "--no-reload", help="Do not signal dockerd."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Remove the runtime (and default-runtime if it is ours) from daemon.json and reload dockerd."""
    from fakegpu_hook import daemon_json as dj

    _daemon_change("runtime uninstall", daemon_json, dry_run, as_json, no_reload,
                   lambda data: dj.without_runtime(data, name))


@cdi_app.command("generate")
def cdi_generate(
    spec: str = typer.Option(DEFAULT_DEVICES, "--devices", help="Device spec the CDI devices stand for."),
    output: Path | None = typer.Option(None, "--output", help="Write here (e.g. /etc/cdi/fakegpu.json)."),
) -> None:
    """Print or write a CDI spec (kind fakegpu.dev/gpu, devices 0..N-1 and all) that injects through our hook."""
    from fakegpu_hook.cdi import cdi_spec

    from fakegpu.devices import resolve_devices

    try:
        count = len(resolve_devices(spec))
        doc = cdi_spec(spec, count, _script("fakegpu-hook"), _hook_args())
    except FakeGPUError as exc:
        raise fail("cdi generate", exc, False) from exc
    _emit_file(json.dumps(doc, indent=2) + "\n", output, "cdi generate")


@hook_app.command("podman-config")
def podman_config(
    output: Path | None = typer.Option(None, "--output",
                                       help="Write here (e.g. /usr/share/containers/oci/hooks.d/fakegpu.json)."),
) -> None:
    """Print or write a podman hooks.d file that runs the FakeGPU hook."""
    from fakegpu_hook.cdi import podman_hook

    try:
        doc = podman_hook(_script("fakegpu-hook"), _hook_args())
    except FakeGPUError as exc:
        raise fail("hook podman-config", exc, False) from exc
    _emit_file(json.dumps(doc, indent=2) + "\n", output, "hook podman-config")


def _emit_file(text: str, output: Path | None, command: str) -> None:
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise fail(command, UsageError(f"cannot write {output}: {exc.strerror}"), False) from exc
    typer.echo(f"wrote {output}")
