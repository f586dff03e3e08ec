"""`fakegpu runtime install|uninstall`, `fakegpu cdi generate`, `fakegpu hook podman-config`: wire FakeGPU into
container engines. The mechanics live in fakegpu_hook (hook/); these commands parse, call, and render."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import typer

from fakegpu.cli.output import emit_json, fail
from fakegpu.devices import DEFAULT_SEED
from fakegpu.errors import FakeGPUError

# Where `runtime install --gpus` puts nvidia-container-runtime-hook (fakegpu_hook.gpus.DEFAULT_HOOK_DIR; the CLI
# imports fakegpu_hook only inside commands).
DEFAULT_HOOK_DIR = "/usr/local/bin"

runtime_app = typer.Typer(help="Register the FakeGPU runtime with Docker (daemon.json).", no_args_is_help=True)
cdi_app = typer.Typer(help="Container Device Interface specs.", no_args_is_help=True)
hook_app = typer.Typer(help="OCI hook configuration for other engines.", no_args_is_help=True)


def installed_script(name: str) -> str:
    """The console script installed beside the running interpreter, else on PATH."""
    sibling = Path(sys.executable).with_name(name)
    if sibling.exists():
        return str(sibling)
    found = shutil.which(name)
    if not found:
        raise FakeGPUError(f"{name} is not installed (pip install fakegpu puts it beside `fakegpu`)")
    return found


def hook_args() -> list[str]:
    from fakegpu_hook.settings import load_settings

    s = load_settings().resolved()
    args = ["--native-dir", s.native_lib_dir, "--nvidia-smi", s.nvidia_smi, "--state-root", s.state_root,
            "--inventory", s.inventory_spec()]
    return args if s.honour_nvidia_env else [*args, "--ignore-nvidia-env"]


def inventory_listing(spec: str) -> list[str]:
    """The inventory as `nvidia-smi -L` on the host would list it: what NVIDIA_VISIBLE_DEVICES selects from."""
    from fakegpu.devices import resolve_devices

    return [f"GPU {d.index}: {d.profile.name} (UUID: {d.uuid}, bus {d.pci_bus_id})"
            for d in resolve_devices(spec, seed=DEFAULT_SEED)]


def describe_inventory() -> tuple[bool, str]:
    """(usable, one line): the runtime's inventory as its settings give it, or why every start would fail."""
    from fakegpu_hook.settings import SettingsError, config_path, load_settings

    from fakegpu.devices import resolve_devices

    try:
        settings = load_settings()
        spec = settings.inventory_spec()
        count = len(resolve_devices(spec, seed=DEFAULT_SEED))
    except SettingsError as exc:
        return False, str(exc)
    except FakeGPUError as exc:
        return False, f"the inventory in {config_path()}: {exc.message}"
    origin = "setting inventory" if settings.inventory else "no inventory set: one GPU of nvidia_profile"
    return True, f"inventory {spec!r}: {count} GPU{'' if count == 1 else 's'} ({origin}, {config_path()})"


def _current_inventory() -> str:
    from fakegpu_hook.settings import SettingsError, load_settings

    try:
        return load_settings().inventory_spec()
    except SettingsError as exc:
        raise FakeGPUError(str(exc)) from exc


def _host_change(changes: dict[str, str | None], dry_run: bool, as_json: bool, command: str):
    """Set (a value) or remove (None) the host's settings (inventory, driver_version) in the site config;
    returns the ConfigChange."""
    from fakegpu_hook.settings import SettingsError, config_path, update_config

    try:
        return update_config(config_path(), changes, dry_run=dry_run)
    except (SettingsError, OSError) as exc:
        removing = all(v is None for v in changes.values())
        hint = " (uninstall --keep-inventory leaves it alone)" if removing else ""
        raise fail(command, FakeGPUError(f"cannot update the runtime's config: {exc}{hint}"), as_json) from exc


def _config_diff(change) -> str:
    import difflib

    return "".join(difflib.unified_diff(change.before.splitlines(True), change.after.splitlines(True),
                                        change.path, f"{change.path} (new)"))


def _daemon_change(command: str, daemon_json: Path, dry_run: bool, as_json: bool, no_reload: bool, edit,
                   config=None, inventory: list[str] | None = None, gpus: dict | None = None) -> None:
    """Apply the daemon.json edit and report it, with the site config's change (`config`), the inventory
    now in force (`inventory`) and the NVIDIA-named hook's change (`gpus`) when the command touched them."""
    from fakegpu_hook import daemon_json as dj

    try:
        change = dj.apply(daemon_json, edit(dj.load(daemon_json)), dry_run=dry_run, reload=not no_reload)
    except (dj.DaemonConfigError, OSError) as exc:
        raise fail(command, FakeGPUError(str(exc)), as_json) from exc
    if as_json:
        data = {"path": str(change.path), "changed": change.changed, "written": change.written,
                "reloaded": change.reloaded, "diff": change.diff}
        if config is not None:
            data["config"] = {"path": config.path, "changed": config.changed, "written": config.written,
                              "diff": _config_diff(config)}
        if inventory is not None:
            data["inventory"] = inventory
        if gpus is not None:
            data["gpus_hook"] = gpus
        emit_json(command, data)
        return
    if config is not None and config.changed:
        typer.echo(_config_diff(config), nl=False)
        if not dry_run:
            typer.echo(f"wrote {config.path}" if config.after else f"removed {config.path} (no setting left)")
    if not change.changed:
        typer.echo(f"{change.path}: already up to date")
    else:
        typer.echo(change.diff, nl=False)
        if not dry_run:
            typer.echo(f"wrote {change.path}" + (f"; {change.reloaded}" if change.reloaded else ""))
    if dry_run and (change.changed or (config is not None and config.changed)):
        typer.echo("(dry run: nothing written)")
    if inventory:
        typer.echo("the host's fake GPUs (NVIDIA_VISIBLE_DEVICES selects from these):")
        typer.echo("".join(f"  {line}\n" for line in inventory), nl=False)
    if gpus is not None and (line := _gpus_hook_line(gpus, dry_run)):
        typer.echo(line)


def _gpus_hook_line(gpus: dict, dry_run: bool) -> str:
    """What the command did to nvidia-container-runtime-hook; '' for an uninstall on a host that never had it."""
    from fakegpu_hook.gpus import RESTART_NOTE

    path, changed = gpus["path"], gpus["changed"]
    if gpus["action"] == "install":
        if not changed:
            return f"{path}: already up to date (docker run --gpus uses it once dockerd has been restarted after it " \
                   "was first written)"
        return f"{'would write' if dry_run else 'wrote'} {path} (docker run --gpus); {RESTART_NOTE}"
    if not changed:
        from fakegpu_hook.front import NVIDIA_HOOK

        theirs = os.path.join(gpus["hook_dir"], NVIDIA_HOOK)
        return f"left {theirs} alone: not written by fakegpu" if os.path.lexists(theirs) else ""
    return (f"{'would remove' if dry_run else 'removed'} {path}; {RESTART_NOTE} (until then docker run --gpus fails: "
            "dockerd still has its NVIDIA driver but no hook)")


def _gpus_install(hook_dir: Path, dry_run: bool, as_json: bool, command: str, write: bool) -> dict:
    """Check (write=False) or install (write=True) the NVIDIA-named hook; refusals stop the command."""
    from fakegpu_hook.gpus import GpusHookError, install_gpus_hook

    try:
        path, changed = install_gpus_hook(str(hook_dir), dry_run=dry_run or not write)
    except GpusHookError as exc:
        raise fail(command, FakeGPUError(str(exc)), as_json) from exc
    return {"action": "install", "path": path, "hook_dir": str(hook_dir), "changed": changed,
            "written": changed and write and not dry_run, "restart_dockerd": changed}


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
    devices: str | None = typer.Option(
        None, "--devices", metavar="SPEC",
        help="The host's fake GPUs (e.g. a100:8), kept in the runtime's config ($FAKEGPU_CONFIG or "
             "/etc/fakegpu/config.json): what NVIDIA_VISIBLE_DEVICES=all|<indices>|<UUIDs> selects from."),
    gpus: bool = typer.Option(False, "--gpus",
                              help="Also serve `docker run --gpus` and compose's `driver: nvidia`: install our hook "
                                   "as nvidia-container-runtime-hook (refused where NVIDIA's toolkit is installed); "
                                   "dockerd must be restarted to see it."),
    hook_dir: Path = typer.Option(Path(DEFAULT_HOOK_DIR), "--hook-dir", envvar="FAKEGPU_HOOK_DIR",
                                  help="Where --gpus puts nvidia-container-runtime-hook: a folder on dockerd's PATH."),
    driver: str | None = typer.Option(
        None, "--driver", metavar="VERSION",
        help="The host's driver (e.g. 550.127.08; default 580.95.05), kept in the runtime's config: what NVML, "
             "nvidia-smi, cuDriverGetVersion, /proc/driver/nvidia and the libraries' names say in containers."),
) -> None:
    """Write the sh fronts, add the runtime to daemon.json (other keys kept, atomic, backed up), reload dockerd;
    with --devices and --driver, set the host's inventory and driver first; with --gpus, install the hook
    dockerd runs for --gpus."""
    from fakegpu_hook import daemon_json as dj
    from fakegpu_hook import front

    from fakegpu.driver import driver_version_problem, is_driver_version

    command = "runtime install"
    if driver is not None and not is_driver_version(driver):
        raise fail(command, FakeGPUError(f"--driver: {driver_version_problem(driver)}"), as_json)
    host = {k: v for k, v in (("inventory", devices), ("driver_version", driver)) if v is not None}
    try:  # the one parser: a bad spec stops the install before anything is written
        inventory = inventory_listing(devices if devices is not None else _current_inventory())
    except FakeGPUError as exc:
        if devices is not None:
            raise fail(command, exc, as_json) from exc
        inventory = None  # the config's own inventory is bad: doctor says so; install may still fix the rest
    # dockerd runs the registered path on every runtime call: register the sh front, which execs runc at once
    # for every command but `create` (C, or Python), rather than the Python console script.
    directory = str(front_dir) if front_dir else front.default_front_dir()
    files = front.front_files(directory, create=front.NO_CREATE if python_create else None)
    path = next(p for p in files if p.endswith(front.RUNTIME_FRONT))
    if not dry_run:
        try:
            dj.load(daemon_json)  # a daemon.json we would refuse stops the install before anything is written
        except (dj.DaemonConfigError, OSError) as exc:
            raise fail(command, FakeGPUError(str(exc)), as_json) from exc
    # A site config we would refuse stops it too (dry run: nothing written either way).
    config = _host_change(host, True, as_json, command) if host else None
    # So does NVIDIA's toolkit, for --gpus.
    hook = _gpus_install(hook_dir, dry_run, as_json, command, write=False) if gpus else None
    if not dry_run:
        try:
            front.write_fronts(files)
        except OSError as exc:
            raise fail(command, FakeGPUError(f"cannot write the runtime front in {directory}: {exc}"),
                       as_json) from exc
        if host:
            config = _host_change(host, False, as_json, command)
        if gpus:
            hook = _gpus_install(hook_dir, False, as_json, command, write=True)
    _daemon_change(command, daemon_json, dry_run, as_json, no_reload,
                   lambda data: dj.with_runtime(data, name, path, set_default), config, inventory, hook)


@runtime_app.command("uninstall")
def uninstall(
    name: str = typer.Option("fakegpu", "--name", help="Runtime name to remove."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the change; write nothing."),
    daemon_json: Path = typer.Option(Path("/etc/docker/daemon.json"), "--config", help="daemon.json to edit."),
    no_reload: bool = typer.Option(False, "--no-reload", help="Do not signal dockerd."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    keep_inventory: bool = typer.Option(False, "--keep-inventory",
                                        help="Leave the inventory and driver (--devices, --driver) in the "
                                             "runtime's config."),
    hook_dir: Path = typer.Option(Path(DEFAULT_HOOK_DIR), "--hook-dir", envvar="FAKEGPU_HOOK_DIR",
                                  help="Where install --gpus put nvidia-container-runtime-hook."),
) -> None:
    """Remove the runtime (and default-runtime if it is ours) from daemon.json and reload dockerd, the
    inventory and driver install --devices/--driver set from the runtime's config (removing the file if
    nothing else is in it),
    and the nvidia-container-runtime-hook install --gpus wrote (only a file of ours)."""
    from fakegpu_hook import daemon_json as dj
    from fakegpu_hook.gpus import GpusHookError, uninstall_gpus_hook

    command = "runtime uninstall"
    try:
        dj.load(daemon_json)  # a daemon.json we would refuse stops the uninstall before anything changes
    except (dj.DaemonConfigError, OSError) as exc:
        raise fail(command, FakeGPUError(str(exc)), as_json) from exc
    config = None if keep_inventory else _host_change({"inventory": None, "driver_version": None}, dry_run,
                                                      as_json, command)
    try:
        removed = uninstall_gpus_hook(str(hook_dir), dry_run=dry_run)
    except GpusHookError as exc:
        raise fail(command, FakeGPUError(str(exc)), as_json) from exc
    hook = {"action": "uninstall", "path": removed, "hook_dir": str(hook_dir), "changed": removed is not None,
            "written": removed is not None and not dry_run, "restart_dockerd": removed is not None}
    _daemon_change(command, daemon_json, dry_run, as_json, no_reload, lambda data: dj.without_runtime(data, name),
                   config, gpus=hook)


@cdi_app.command("generate")
def cdi_generate(
    spec: str | None = typer.Option(None, "--devices", help="The GPUs the CDI devices stand for (default: the "
                                    "runtime's inventory, as the device plugin advertises it)."),
    output: Path | None = typer.Option(None, "--output", help="Write here (e.g. /etc/cdi/fakegpu.json)."),
) -> None:
    """Print or write a CDI spec (kind fakegpu.dev/gpu: each GPU by index and UUID, each MIG device by GPU:MIG and
    UUID, and all) that injects through our hook."""
    from fakegpu_hook.cdi import cdi_spec

    from fakegpu.devices import resolve_devices

    try:
        spec = spec if spec is not None else _current_inventory()
        devices = resolve_devices(spec, seed=DEFAULT_SEED)  # the runtime's seed: UUIDs as the inventory has them
        doc = cdi_spec(spec, devices, installed_script("fakegpu-hook"), hook_args())
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
        doc = podman_hook(installed_script("fakegpu-hook"), hook_args())
    except FakeGPUError as exc:
        raise fail("hook podman-config", exc, False) from exc
    _emit_file(json.dumps(doc, indent=2) + "\n", output, "hook podman-config")


def _emit_file(text: str, output: Path | None, command: str) -> None:
    if output is None:
        typer.echo(text, nl=False)
        return
    from fakegpu.atomic_file import write_atomic

    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        # a reader (podman, a CDI-aware runtime) sees the old file or the new one, and a failed write leaves the
        # old one and no temporary behind
        write_atomic(output, text)
    except OSError as exc:
        # A path that cannot be written is a failure (exit 1), as devices --table, validate --out and k8s render
        # --out report it; mkdir names the part of the path in the way, which is not a folder.
        other = exc.filename is not None and Path(exc.filename) != output
        where = f"{exc.filename}: " if other else ""
        reason = "not a folder" if other and isinstance(exc, FileExistsError) else exc.strerror or str(exc)
        raise fail(command, FakeGPUError(f"cannot write {output}: {where}{reason}; nothing was written"),
                   False) from exc
    typer.echo(f"wrote {output}")
