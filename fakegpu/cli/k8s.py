"""`fakegpu device-plugin`: the node's fake GPUs as Kubernetes resources, served to the kubelet (or listed)."""

from __future__ import annotations

import os
import signal

import typer

from fakegpu.cli.output import emit_json, fail
from fakegpu.errors import FakeGPUError
from fakegpu.text import table

COMMAND = "device-plugin"
DEFAULT_STATE_DIR = "/run/fakegpu/device-plugin"


def _host_inventory() -> str:
    """The node's GPUs as the runtime sees them (its site config), which NVIDIA_VISIBLE_DEVICES selects from."""
    from fakegpu_hook.settings import load_settings

    return load_settings().inventory_spec()


def _cdi_spec(spec: str, inventory: list, folder: str) -> tuple[str, str]:
    """(path, text): the spec `fakegpu cdi generate` writes for these GPUs."""
    import json

    from fakegpu_hook.cdi import CDI_KIND, cdi_spec

    from fakegpu.cli.container import hook_args, installed_script

    doc = cdi_spec(spec, inventory, installed_script("fakegpu-hook"), hook_args())
    return os.path.join(folder, CDI_KIND.replace("/", "-") + ".json"), json.dumps(doc, indent=2) + "\n"


def device_plugin(
    devices: str | None = typer.Option(None, "--devices", help="The node's GPUs as a device spec (default: the "
                                       "runtime's inventory, `fakegpu runtime install --devices`)."),
    mig_strategy: str = typer.Option("none", "--mig-strategy", help="none, single or mixed, as NVIDIA's plugin."),
    resource_name: str = typer.Option("nvidia.com/gpu", "--resource-name", help="The GPU resource's name; mixed "
                                      "MIG resources take its domain (nvidia.com/mig-3g.40gb)."),
    list_strategy: str = typer.Option("envvar", "--device-list-strategy", help="How Allocate passes the devices, a "
                                      "comma list: envvar (NVIDIA_VISIBLE_DEVICES, for the fakegpu RuntimeClass), "
                                      "cdi-cri (CDI device names: containerd 1.7+, CRI-O), cdi-annotations."),
    cdi_dir: str = typer.Option("/var/run/cdi", "--cdi-dir", help="With a cdi-* strategy: where the plugin writes "
                                "FakeGPU's CDI spec for the node's GPUs."),
    plugin_dir: str = typer.Option("/var/lib/kubelet/device-plugins", "--plugin-dir",
                                   help="The kubelet's device-plugins folder (kubelet.sock is there)."),
    state_dir: str | None = typer.Option(None, "--state-dir", help="The node's fault board folder, whose lost GPUs "
                                         f"turn Unhealthy (default: $FAKEGPU_STATE_DIR, else {DEFAULT_STATE_DIR})."),
    list_only: bool = typer.Option(False, "--list", help="Print the resources and devices and exit; serve nothing."),
    as_json: bool = typer.Option(False, "--json", help="With --list: machine-readable output."),
) -> None:
    """Kubernetes device plugin: advertise the node's fake GPUs (or MIG devices) to the kubelet, keep their
    health, and give each container its devices through FakeGPU's runtime."""
    from fakegpu.devices import DEFAULT_SEED, resolve_devices
    from fakegpu.errors import InvalidDeviceSpec
    from fakegpu.k8s.allocation import check_strategies, uses_cdi
    from fakegpu.k8s.resources import resources

    try:
        spec = devices or _host_inventory()
        try:
            inventory = resolve_devices(spec, seed=DEFAULT_SEED)  # the runtime's seed for the host inventory
        except InvalidDeviceSpec as exc:
            where = "--devices" if devices else "the runtime's inventory (setting inventory)"
            raise FakeGPUError(f"{where}: {exc.message}") from exc
        served = resources(inventory, mig_strategy, resource_name)
        strategies = check_strategies(list_strategy)
    except FakeGPUError as exc:
        raise fail(COMMAND, exc, as_json) from exc

    if list_only:
        rows = [{"resource": r.name, "socket": r.socket_name,
                 "devices": [{"id": a.id, "gpu": a.gpu, "mig": a.mig, "numa": a.numa, "profile": a.profile}
                             for a in r.devices]} for r in served]
        if as_json:
            emit_json(COMMAND, {"inventory": spec, "mig_strategy": mig_strategy, "resources": rows})
            return
        lines = [[r.name, str(len(r.devices)), a.id, str(a.gpu) + ("" if a.mig is None else f":{a.mig}"), a.profile]
                 for r in served for a in r.devices]
        typer.echo(table(lines, ["RESOURCE", "COUNT", "DEVICE", "GPU", "PROFILE"]))
        return

    from fakegpu.k8s.plugin import DevicePlugin

    board = state_dir or os.environ.get("FAKEGPU_STATE_DIR") or DEFAULT_STATE_DIR
    try:
        cdi = _cdi_spec(spec, inventory, cdi_dir) if uses_cdi(strategies) else None
        os.makedirs(board, mode=0o755, exist_ok=True)
        plugin = DevicePlugin(inventory, served, plugin_dir, strategies, board, cdi)
    except (FakeGPUError, OSError) as exc:
        raise fail(COMMAND, exc if isinstance(exc, FakeGPUError) else FakeGPUError(str(exc)), False) from exc
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: plugin.stop())
    typer.echo(f"fakegpu device-plugin: {len(inventory)} GPUs ({spec}); lose one with: FAKEGPU_STATE_DIR={board} "
               f"FAKEGPU_DEVICES='{spec}' fakegpu fault inject --xid 79 --device N", err=True)
    try:
        plugin.run()
    except FakeGPUError as exc:
        raise fail(COMMAND, exc, False) from exc
    finally:
        plugin.stop()
