"""The container engine's side of a Kubernetes node: the runtime handler `fakegpu` that a RuntimeClass names,
as containerd and CRI-O configure it. Text, because the engines read TOML and these are drop-in snippets."""

from __future__ import annotations

import json

RUNTIME_HANDLER = "fakegpu"


def _toml_string(value: str) -> str:
    # A TOML basic string: JSON's escaping is a subset TOML accepts.
    return json.dumps(value)


def containerd_runtime(runtime_path: str, config_version: int = 2, handler: str = RUNTIME_HANDLER) -> str:
    """The CRI plugin's runtime entry: runc's shim (io.containerd.runc.v2) running our runtime instead of runc.
    Config version 2 is containerd 1.5-1.7's; version 3 is containerd 2.x's, where the CRI runtime plugin moved."""
    if config_version == 2:
        table = f'plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{handler}'
    elif config_version == 3:
        table = f'plugins."io.containerd.cri.v1.runtime".containerd.runtimes.{handler}'
    else:
        raise ValueError(f"containerd config version {config_version}: 2 (containerd 1.x) or 3 (2.x)")
    return (f"[{table}]\n"
            f'  runtime_type = "io.containerd.runc.v2"\n'
            f"[{table}.options]\n"
            f"  BinaryName = {_toml_string(runtime_path)}\n")


def crio_runtime(runtime_path: str, handler: str = RUNTIME_HANDLER) -> str:
    """A CRI-O drop-in (/etc/crio/crio.conf.d/): an OCI runtime handler running our runtime."""
    return (f"[crio.runtime.runtimes.{handler}]\n"
            f"runtime_path = {_toml_string(runtime_path)}\n"
            f'runtime_type = "oci"\n'
            f'runtime_root = "/run/fakegpu-runc"\n')
