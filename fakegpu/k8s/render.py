"""`fakegpu k8s render`: what a user applies to put fake GPU nodes in a Kubernetes cluster, as files.

- cluster.yaml: the Namespace, the RuntimeClass `fakegpu` and the device plugin's DaemonSet;
- examples/: a Pod asking for GPUs and its twin for `podman kube play`, a 2-node torchrun Job (and, asked for, a
  Kubeflow PyTorchJob);
- node/: the containerd (config versions 2 and 3) and CRI-O drop-ins, and setup.sh, which puts them in place.

Every input is checked here, before anything is made (one parser each: device specs, MIG strategies, resource
names are the device plugin's own checks), and write_tree() puts a whole folder in place or nothing.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fakegpu import __version__
from fakegpu.errors import FakeGPUError, UsageError
from fakegpu.k8s import manifests
from fakegpu.k8s.manifests import Cluster
from fakegpu.k8s.resources import DEFAULT_RESOURCE
from fakegpu.k8s.setup_script import containerd_dropin, crio_dropin, render_setup_script

DEFAULT_NAMESPACE = "fakegpu"
DEFAULT_LABEL = "fakegpu.dev/gpu=true"
DEFAULT_DEVICES = "a100:8"
DEFAULT_RUNTIME_PATH = "/usr/local/libexec/fakegpu/fakegpu-container-runtime"
CLUSTER_FILE = "cluster.yaml"
SETUP_SCRIPT = "node/setup.sh"

# Kubernetes' own rules: a DNS-1123 label (namespaces), a DNS subdomain and a qualified name (label keys).
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED = re.compile(r"^(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
# An image reference as container engines parse one: [host[:port]/]path[:tag][@digest], the path lowercase; the
# first part is a host only when it has a dot or a port, or is localhost.
_PATH_PART = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_HOST = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
                   r"(?::[0-9]+)?$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$")
# What goes into the setup script unquoted-safe and into TOML strings: an absolute path of plain characters.
_SAFE_PATH = re.compile(r"^(/[A-Za-z0-9._+-]+)+$")


class RenderError(UsageError):
    """An input `fakegpu k8s render` refuses; nothing is written."""

    code = "k8s_render_input"


@dataclass(frozen=True)
class NodePaths:
    """Where FakeGPU's runtime keeps its parts on a node, as the container integration (fakegpu_hook) names them;
    the CLI passes them in, since library code leaves fakegpu_hook to the CLI."""

    config_file: str  # the runtime's host config, holding the inventory the plugin advertises
    runtime_front: str  # the file name `fakegpu runtime install` gives the runtime's front


@dataclass(frozen=True)
class RenderOptions:
    namespace: str = DEFAULT_NAMESPACE
    node_label: str = DEFAULT_LABEL
    image: str | None = None  # default: fakegpu/pytorch:<version> (it carries fakegpu[k8s])
    workload_image: str | None = None  # default: fakegpu/pytorch:<version>
    mig_strategy: str = "none"
    resource_name: str = DEFAULT_RESOURCE
    devices: str = DEFAULT_DEVICES
    runtime_path: str = DEFAULT_RUNTIME_PATH
    kubeflow: bool = False
    pip_spec: str | None = None  # what setup.sh installs where fakegpu is missing


def parse_label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    prefix, slash, name = key.rpartition("/")
    problems = []
    if not sep:
        problems.append("it has no '='")
    if slash and not _DNS_SUBDOMAIN.match(prefix):
        problems.append(f"prefix {prefix!r} is not a DNS subdomain (lowercase, dots, at most 253 characters)")
    if not _QUALIFIED.match(name):
        problems.append(f"name {name!r} is not 1-63 letters, digits, '-', '_', '.', starting and ending "
                        "alphanumeric")
    if sep and value and not _QUALIFIED.match(value):
        problems.append(f"value {value!r} is not at most 63 letters, digits, '-', '_', '.', starting and ending "
                        "alphanumeric")
    if problems:
        raise RenderError(f"--node-label {text!r}: {'; '.join(problems)} (e.g. fakegpu.dev/gpu=true)")
    return key, value


def _is_image(image: str) -> bool:
    name, at, digest = image.partition("@")
    if at and not _DIGEST.match(digest):
        return False
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
        if not _TAG.match(tag):
            return False
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        if not _HOST.match(parts.pop(0)):
            return False
    return 0 < len(name) <= 255 and all(_PATH_PART.match(p) for p in parts)


def check_image(image: str, option: str = "--image") -> str:
    if not _is_image(image):
        raise RenderError(f"{option} {image!r} is not an image reference: [registry/]name[:tag][@sha256:digest], "
                          "the name lowercase (e.g. fakegpu/cuda:0.1.0 or registry.example:5000/fakegpu/cuda)")
    return image


def _check(opts: RenderOptions, node: NodePaths) -> tuple[Cluster, str]:
    """The checked cluster description, and the node's inventory spec as the setup script writes it."""
    from fakegpu.devices import DEFAULT_SEED, resolve_devices
    from fakegpu.k8s.resources import resources

    if not _DNS_LABEL.match(opts.namespace):
        raise RenderError(f"--namespace {opts.namespace!r} is not a Kubernetes namespace name (lowercase letters, "
                          "digits and '-', at most 63)")
    key, value = parse_label(opts.node_label)
    default = f"fakegpu/pytorch:{__version__}"
    image = check_image(default if opts.image is None else opts.image)
    workload = check_image(default if opts.workload_image is None else opts.workload_image, "--workload-image")
    if not _SAFE_PATH.match(opts.runtime_path) or posixpath.basename(opts.runtime_path) != node.runtime_front:
        raise RenderError(f"--runtime-path {opts.runtime_path!r}: an absolute path of plain characters ending in "
                          f"/{node.runtime_front}, the front `fakegpu runtime install` writes in that folder")
    # The device plugin's own checks, on the node the setup script makes: what its DaemonSet will serve.
    try:
        inventory = resolve_devices(opts.devices, seed=DEFAULT_SEED)
    except FakeGPUError as exc:
        raise RenderError(f"--devices: {exc.message}") from exc
    try:
        served = resources(inventory, opts.mig_strategy, opts.resource_name)
    except FakeGPUError as exc:
        raise RenderError(exc.message) from exc
    if not served:
        raise RenderError(f"--devices {opts.devices!r}: the node would advertise no GPU")
    first = served[0]
    asked = first.devices[:min(2, len(first.devices))]
    cluster = Cluster(namespace=opts.namespace, label_key=key, label_value=value, image=image,
                      workload_image=workload, mig_strategy=opts.mig_strategy, resource_name=opts.resource_name,
                      example_resource=first.name, gpus_per_pod=len(asked),
                      example_devices=tuple(str(a.gpu) if a.mig is None else f"{a.gpu}:{a.mig}" for a in asked),
                      config_dir=posixpath.dirname(node.config_file))
    return cluster, opts.devices


def ddp_script() -> str:
    """The DDP script the Docker rehearsals run (compose/examples/), read from the checkout at render time."""
    from fakegpu.locations import CHECKOUT

    path = Path(CHECKOUT) / "compose" / "examples" / manifests.DDP_SCRIPT
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FakeGPUError(f"the example training script {path} is not there ({exc.strerror}): it ships with a "
                           "source checkout of FakeGPU") from exc


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # a shared dict is written out each time: no &id001 anchors for a reader to follow


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # A script in a ConfigMap reads as itself in a literal block, not as one escaped line.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


@dataclass(frozen=True)
class Rendered:
    """Files by path under the output folder; objects by file (the Kubernetes objects in each YAML file)."""

    files: dict[str, str]
    objects: dict[str, list[dict[str, Any]]]

    @property
    def cluster_yaml(self) -> str:
        return self.files[CLUSTER_FILE]


def render(opts: RenderOptions, node: NodePaths) -> Rendered:
    cluster, devices = _check(opts, node)
    script = ddp_script()
    objects: dict[str, list[dict[str, Any]]] = {
        CLUSTER_FILE: manifests.cluster_objects(cluster),
        "examples/pod.yaml": [manifests.example_pod(cluster)],
        "examples/pod-podman.yaml": [manifests.podman_pod(cluster)],
        "examples/ddp-job.yaml": manifests.ddp_job(cluster, script),
    }
    if opts.kubeflow:
        objects["examples/pytorchjob.yaml"] = manifests.pytorch_job(cluster, script)
    files = {path: to_yaml(docs) for path, docs in objects.items()}
    files["node/containerd-fakegpu.v2.toml"] = containerd_dropin(opts.runtime_path, 2)
    files["node/containerd-fakegpu.v3.toml"] = containerd_dropin(opts.runtime_path, 3)
    files["node/crio-fakegpu.conf"] = crio_dropin(opts.runtime_path)
    files[SETUP_SCRIPT] = render_setup_script(
        version=__version__, devices=devices, runtime_path=opts.runtime_path, config_file=node.config_file,
        label_key=cluster.label_key,
        label_value=cluster.label_value, pip_spec=opts.pip_spec or f"fakegpu[k8s]=={__version__}")
    return Rendered(files, objects)


def _refuse(out: Path, force: bool) -> None:
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise RenderError(f"--out {out}: exists and is not a folder")
    here = Path.cwd().resolve()
    if out.exists() and (out.resolve() == here or out.resolve() in here.parents):
        raise RenderError(f"--out {out}: the current folder or one above it; name a folder of its own")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise RenderError(f"--out {out}: not empty; --force replaces the files render writes there, keeping others")


def write_tree(files: dict[str, str], out: Path, force: bool = False) -> list[Path]:
    """Put `files` under `out` whole or not at all: they are written into a fresh folder beside it, which then
    takes its place by rename (with --force, over a copy of what was there, so other files stay)."""
    out = Path(out)
    _refuse(out, force)
    staging = out.parent / f".{out.name}.render-{os.getpid()}"
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.is_dir() and any(out.iterdir()):
            shutil.copytree(out, staging, symlinks=True)
        else:
            staging.mkdir()
        for rel, text in files.items():
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink():
                path.unlink()  # never write through a link a previous folder held
            path.write_text(text, encoding="utf-8")
            path.chmod(0o755 if rel.endswith(".sh") else 0o644)
        if out.is_dir() and any(out.iterdir()):
            os.rename(out, old)
            try:
                os.rename(staging, out)
            except OSError:
                os.rename(old, out)
                raise
            shutil.rmtree(old, ignore_errors=True)  # the new folder is in place: a leftover is not a failure
        else:
            os.rename(staging, out)  # onto a missing or empty folder: one rename
    except OSError as exc:
        # Name the user's path, never our staging or backup folder (gone by the time they read it).
        theirs = exc.filename and not str(exc.filename).startswith((str(staging), str(old))) and \
            Path(exc.filename) != out
        where = f"{exc.filename}: " if theirs else ""
        raise FakeGPUError(f"--out {out}: {where}{exc.strerror or exc}; nothing was written") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [out / rel for rel in files]
