"""What a node advertises to the kubelet: resources (nvidia.com/gpu, nvidia.com/mig-3g.40gb, ...) and their
devices, under one of the MIG strategies NVIDIA's device plugin offers.

- none: every GPU as the GPU resource, in MIG mode or not (a container given a MIG-mode GPU whole sees it with
  no MIG devices, as on a real node).
- single: every MIG device as the GPU resource; all GPUs must be in MIG mode with slices of one profile (a node
  with none in MIG mode advertises its GPUs, as under none).
- mixed: each MIG profile as a resource of its own (<domain>/mig-<profile>, a profile's "+" becoming "."), GPUs
  not in MIG mode as the GPU resource.

Device IDs are the UUIDs NVML gives (GPU-..., MIG-...): what NVIDIA_VISIBLE_DEVICES takes back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fakegpu.errors import UsageError
from fakegpu.k8s.topology import socket_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fakegpu.devices import Device

MIG_STRATEGIES = ("none", "single", "mixed")
DEFAULT_RESOURCE = "nvidia.com/gpu"
# Kubernetes' extended resource names: a DNS subdomain, "/", a qualified name of at most 63 characters.
_DOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME = re.compile(r"^(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class StrategyError(UsageError):
    """A MIG strategy the node's devices do not allow, or a resource name Kubernetes would refuse."""

    code = "device_plugin_strategy"


@dataclass(frozen=True)
class Advertised:
    """One device of a resource: a GPU, or a MIG device of GPU `gpu`."""

    id: str
    gpu: int  # the GPU's index in the node's inventory (its fault board numbering)
    mig: int | None  # the MIG device's index under its GPU
    numa: int
    profile: str  # the board's catalog id, or the MIG profile's name


@dataclass(frozen=True)
class Resource:
    name: str
    devices: tuple[Advertised, ...]

    @property
    def socket_name(self) -> str:
        """The plugin's socket in the kubelet's device-plugins folder, one per resource."""
        return "fakegpu-" + self.name.replace("/", "_") + ".sock"


def check_resource_name(name: str) -> str:
    domain, sep, rest = name.partition("/")
    if not sep or not _DOMAIN.match(domain) or not _NAME.match(rest):
        raise StrategyError(f"resource name {name!r} is not an extended resource name Kubernetes accepts: "
                            "<domain>/<name>, e.g. nvidia.com/gpu or fakegpu.dev/gpu")
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        raise StrategyError(f"resource name {name!r}: the kubernetes.io domain is Kubernetes' own; "
                            "use a vendor domain such as nvidia.com")
    return name


def mig_resource_name(domain: str, profile: str) -> str:
    return f"{domain}/mig-{profile.replace('+', '.')}"


def _gpu(d: Device) -> Advertised:
    return Advertised(d.uuid, d.index, None, socket_of(d), d.profile.id)


def _migs(d: Device) -> list[Advertised]:
    return [Advertised(m.uuid, d.index, m.index, socket_of(d), m.profile.name) for m in d.mig or ()]


def _named(groups: dict[str, list[Advertised]]) -> list[Resource]:
    return [Resource(name, tuple(devs)) for name, devs in groups.items() if devs]


def resources(devices: Sequence[Device], strategy: str = "none",
              resource_name: str = DEFAULT_RESOURCE) -> list[Resource]:
    """The node's resources under `strategy`, each with its devices in inventory order."""
    from fakegpu.profiles.matching import did_you_mean

    if strategy not in MIG_STRATEGIES:
        raise StrategyError(f"unknown MIG strategy {strategy!r}; accepted: {', '.join(MIG_STRATEGIES)}"
                            + did_you_mean(strategy, MIG_STRATEGIES, quote=False))
    check_resource_name(resource_name)
    mig_mode = [d for d in devices if d.mig is not None]
    if strategy == "none" or (strategy == "single" and not mig_mode):
        return _named({resource_name: [_gpu(d) for d in devices]})
    if strategy == "single":
        whole = [d.index for d in devices if d.mig is None]
        if whole:
            raise StrategyError(f"MIG strategy single needs every GPU in MIG mode; "
                                f"{'GPU' if len(whole) == 1 else 'GPUs'} {', '.join(map(str, whole))} "
                                f"{'is' if len(whole) == 1 else 'are'} not "
                                "(use --mig-strategy mixed, or give those GPUs a MIG layout)")
        slices = [a for d in devices for a in _migs(d)]
        kinds = sorted({a.profile for a in slices})
        if len(kinds) > 1:
            counts = ", ".join(f"{sum(a.profile == k for a in slices)} x {k}" for k in kinds)
            raise StrategyError(f"MIG strategy single needs MIG devices of one profile; this node has {counts} "
                                "(use --mig-strategy mixed)")
        return _named({resource_name: slices})
    domain = resource_name.partition("/")[0]
    groups: dict[str, list[Advertised]] = {resource_name: [_gpu(d) for d in devices if d.mig is None]}
    for d in mig_mode:
        for a in _migs(d):
            groups.setdefault(check_resource_name(mig_resource_name(domain, a.profile)), []).append(a)
    return _named(groups)
