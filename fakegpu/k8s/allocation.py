"""What the plugin answers the kubelet about a resource's devices: Allocate's container edits and
GetPreferredAllocation's choice. Plain data in, plain data out; plugin.py turns them into messages.

Allocate's device list strategies, as NVIDIA's plugin names them:
- `envvar` sets NVIDIA_VISIBLE_DEVICES to the devices' UUIDs: FakeGPU's runtime (the `fakegpu` RuntimeClass's
  handler) selects exactly those from the node's inventory, GPUs and MIG devices alike, as
  nvidia-container-runtime does on a real node.
- `cdi-cri` returns CDI device names (fakegpu.dev/gpu=<UUID>), which containerd 1.7+ and CRI-O resolve against
  FakeGPU's CDI spec with no RuntimeClass; `cdi-annotations` passes the same names in a CDI annotation, for
  runtimes that read annotations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fakegpu.errors import UsageError
from fakegpu.k8s.topology import best_set, pair_worth

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fakegpu.devices import Device
    from fakegpu.k8s.resources import Advertised, Resource

DEVICE_LIST_STRATEGIES = ("envvar", "cdi-cri", "cdi-annotations")
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
CDI_KIND = "fakegpu.dev/gpu"  # hook/fakegpu_hook/cdi.py's; library code does not import the container integration
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"


class AllocationError(UsageError):
    """A request naming devices the resource does not have, or asking for more than it offers."""

    code = "device_plugin_allocation"


@dataclass
class ContainerEdits:
    envs: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: list[str] = field(default_factory=list)


def check_strategies(value: str) -> tuple[str, ...]:
    """A comma list of device list strategies."""
    from fakegpu.profiles.matching import did_you_mean

    chosen = tuple(dict.fromkeys(s.strip() for s in value.split(",") if s.strip()))
    for strategy in chosen or ("",):
        if strategy not in DEVICE_LIST_STRATEGIES:
            raise UsageError(f"device list strategy {strategy!r} is not offered; accepted: "
                             f"{', '.join(DEVICE_LIST_STRATEGIES)}, or a comma list of them"
                             + did_you_mean(strategy, DEVICE_LIST_STRATEGIES, quote=False))
    return chosen


def uses_cdi(strategies: Sequence[str]) -> bool:
    return any(s.startswith("cdi-") for s in strategies)


def cdi_annotation_key(resource: Resource) -> str:
    """One key per resource: a container given devices of two resources gets two annotations, not one the
    kubelet would keep only the last of. Kubernetes limits the name part to 63 characters."""
    name = "fakegpu_" + resource.name.replace("/", "_")
    return CDI_ANNOTATION_PREFIX + name[:63].rstrip("-_.")


def _known(resource: Resource, ids: Sequence[str], what: str) -> list[Advertised]:
    by_id = {a.id: a for a in resource.devices}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise AllocationError(f"{what}: {resource.name} has no device {', '.join(unknown)}")
    if len(set(ids)) != len(ids):
        raise AllocationError(f"{what}: a device is named twice in {', '.join(ids)}")
    return [by_id[i] for i in ids]


def allocate(resource: Resource, ids: Sequence[str], strategies: Sequence[str] = ("envvar",)) -> ContainerEdits:
    """The edits that give one container the devices `ids` of `resource`, by each of `strategies`."""
    _known(resource, ids, "Allocate")
    edits = ContainerEdits()
    names = [f"{CDI_KIND}={i}" for i in ids]
    if "envvar" in strategies:
        edits.envs[VISIBLE_DEVICES] = ",".join(ids)
    if "cdi-cri" in strategies:
        edits.cdi_devices = names
    if "cdi-annotations" in strategies:
        edits.annotations[cdi_annotation_key(resource)] = ",".join(names)
    return edits


def preferred(resource: Resource, inventory: Sequence[Device], available: Sequence[str], must: Sequence[str],
              size: int) -> list[str]:
    """`size` of the `available` devices, with all of `must`, that go best together: one NVLink domain or one
    board's slices before a PCIe path, a PCIe switch before a socket, a socket before the host's interconnect."""
    if size < 0 or size > len(available):
        raise AllocationError(f"GetPreferredAllocation: {size} devices asked of {len(available)} available")
    avail = _known(resource, available, "GetPreferredAllocation (available)")
    needed = _known(resource, must, "GetPreferredAllocation (must include)")
    if any(n not in avail for n in needed):
        raise AllocationError("GetPreferredAllocation: a must-include device is not among the available ones")
    if len(needed) > size:
        raise AllocationError(f"GetPreferredAllocation: {len(needed)} must-include devices exceed the size {size}")
    gpus = {d.index: d for d in inventory}
    worth = {(i, j): pair_worth(gpus[avail[i].gpu], gpus[avail[j].gpu], avail[i].mig, avail[j].mig)
             for i in range(len(avail)) for j in range(i + 1, len(avail))}
    # Ties go to the lower GPU (and MIG) index, as a person reading nvidia-smi would pick.
    order = sorted(range(len(avail)), key=lambda k: (avail[k].gpu, avail[k].mig if avail[k].mig is not None else -1))
    chosen = best_set(order, [avail.index(n) for n in needed], size, worth)
    return [avail[k].id for k in chosen]
