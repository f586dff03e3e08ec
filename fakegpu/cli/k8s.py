"""`fakegpu device-plugin`: the node's fake GPUs as Kubernetes resources, served to the kubelet (or listed);
`fakegpu k8s render`: the manifests and node files a cluster needs for them (fakegpu.k8s.render)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from fakegpu.cli.output import emit_json, fail
from fakegpu.errors import FakeGPUError
from fakegpu.k8s.plugin import DEFAULT_STATE_DIR
from fakegpu.text import table

if TYPE_CHECKING:
    from fakegpu.k8s.render import NodePaths

COMMAND = "device-plugin"


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
    from fakegpu.errors import InvalidDeviceSpec, UsageError
    from fakegpu.k8s.allocation import check_strategies, uses_cdi
    from fakegpu.k8s.resources import resources

    try:
        spec = devices if devices is not None else _host_inventory()
        try:
            inventory = resolve_devices(spec, seed=DEFAULT_SEED)  # the runtime's seed for the host inventory
        except InvalidDeviceSpec as exc:
            if devices is not None:  # the user's typo: a usage error, as everywhere --devices is read
                raise UsageError(f"--devices: {exc.message}") from exc
            raise FakeGPUError(f"the runtime's inventory (setting inventory): {exc.message}") from exc
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


app = typer.Typer(help="Kubernetes: the manifests and node files for fake GPU nodes.", no_args_is_help=True)
RENDER = "k8s render"


def node_paths() -> NodePaths:
    """The runtime's places on a node, from the container integration that defines them."""
    from fakegpu_hook.contract import DEFAULT_CONFIG
    from fakegpu_hook.front import RUNTIME_FRONT

    from fakegpu.k8s.render import NodePaths

    return NodePaths(config_file=DEFAULT_CONFIG, runtime_front=RUNTIME_FRONT)


@app.command("render")
def render(
    out: Path | None = typer.Option(None, "--out", help="Write every file (cluster.yaml, examples/, node/) into "
                                    "this folder, whole or not at all; without it, print cluster.yaml."),
    force: bool = typer.Option(False, "--force", help="With --out: write into a folder that is not empty "
                               "(render's files replaced, others kept)."),
    namespace: str = typer.Option("fakegpu", "--namespace", help="The device plugin's namespace."),
    node_label: str = typer.Option("fakegpu.dev/gpu=true", "--node-label", metavar="KEY=VALUE",
                                   help="The label of fake GPU nodes, which the RuntimeClass and DaemonSet select."),
    image: str | None = typer.Option(None, "--image", help="The device plugin's image, which must carry "
                                     "fakegpu[k8s] (default fakegpu/pytorch:<version>)."),
    workload_image: str | None = typer.Option(None, "--workload-image", help="The training examples' image, "
                                              "with torch (default fakegpu/pytorch:<version>)."),
    mig_strategy: str = typer.Option("none", "--mig-strategy", help="none, single or mixed, as NVIDIA's plugin."),
    resource_name: str = typer.Option("nvidia.com/gpu", "--resource-name", help="The GPU resource's name."),
    devices: str = typer.Option("a100:8", "--devices", metavar="SPEC",
                                help="Each node's fake GPUs, which node/setup.sh writes as the runtime's inventory."),
    runtime_path: str = typer.Option("/usr/local/libexec/fakegpu/fakegpu-container-runtime", "--runtime-path",
                                     help="Where the runtime's front is on the nodes (the engine's handler binary)."),
    kubeflow: bool = typer.Option(False, "--kubeflow", help="Also examples/pytorchjob.yaml, a Kubeflow "
                                  "PyTorchJob (a CRD: not schema-checked)."),
    as_json: bool = typer.Option(False, "--json", help="List the files (and, with --out, write them)."),
) -> None:
    """The manifests and node files that make fake GPU nodes in a Kubernetes cluster: the RuntimeClass, the
    device plugin's DaemonSet, example workloads, and each node's containerd/CRI-O drop-in and setup script."""
    from fakegpu.k8s.render import RenderOptions, write_tree
    from fakegpu.k8s.render import render as render_files

    options = RenderOptions(namespace=namespace, node_label=node_label, image=image, workload_image=workload_image,
                            mig_strategy=mig_strategy, resource_name=resource_name, devices=devices,
                            runtime_path=runtime_path, kubeflow=kubeflow)
    try:
        rendered = render_files(options, node_paths())
        written = write_tree(rendered.files, out, force) if out is not None else None
    except FakeGPUError as exc:
        raise fail(RENDER, exc, as_json) from exc
    if as_json:
        listed = [{"path": rel, "bytes": len(text.encode()),
                   "objects": [f"{o['kind']}/{o['metadata']['name']}" for o in rendered.objects.get(rel, [])]}
                  for rel, text in rendered.files.items()]
        emit_json(RENDER, {"out": None if out is None else str(out), "written": written is not None,
                           "files": listed})
    elif written is None:
        typer.echo(rendered.cluster_yaml, nl=False)
    else:
        for path in written:
            typer.echo(f"wrote {path}")
