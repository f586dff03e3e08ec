"""The GPUs a container sees when it names some of the host's (NVIDIA_VISIBLE_DEVICES's indices and UUIDs, and
MIG devices).

Under NVIDIA's runtime a container gets the device nodes of the GPUs it names, and NVML inside it lists those
in the host's (PCI) order, numbered from 0: the order they were named in does not matter, naming one twice
changes nothing, and each keeps its UUID, serial, PCI bus id and minor number (/dev/nvidiaN keeps the host's
N). A MIG device is named by its whole MIG-<uuid> or as GPU:MIG (the host's GPU index and the MIG device's
index under it, as libnvidia-container reads it): the container then sees its parent GPU in MIG mode holding
only the MIG devices it named, each keeping its placement, GPU instance ID and UUID. A MIG-mode GPU named whole
comes with MIG mode on and none of its MIG devices, as nvidia-container-cli gives it (only `all` brings them).
native/container/select.c does the same for the C `create`.
"""

from __future__ import annotations

from fakegpu.devices.device import UUID_PREFIX, Device
from fakegpu.devices.mig import MIG_UUID_PREFIX
from fakegpu.errors import InvalidDeviceSelection, shorten
from fakegpu.profiles.matching import did_you_mean

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on the container runtime's path
    from collections.abc import Sequence

# The first few GPUs are named in an error; a 64-GPU inventory would make a line containerd cuts short.
_LISTED = 8
# More digits than any index can have: int() of a huge string costs time (and raises past 4300 digits).
_INDEX_DIGITS = 6


def _holds(devices: Sequence[Device], spec: str) -> str:
    listed = ", ".join(f"{d.index} {d.uuid}" for d in devices[:_LISTED])
    more = f", and {len(devices) - _LISTED} more" if len(devices) > _LISTED else ""
    gpus = "1 GPU" if len(devices) == 1 else f"{len(devices)} GPUs"
    return f"the host's inventory {shorten(spec)} holds {gpus}: {listed}{more}"


def _index(text: str) -> int | None:
    """A decimal index, or None; past _INDEX_DIGITS digits it is larger than any count."""
    if not (text.isascii() and text.isdigit()):
        return None
    return int(text) if len(text) <= _INDEX_DIGITS else 10**_INDEX_DIGITS


def _no_gpu_index(devices: Sequence[Device]) -> str:
    return f"no GPU has this index (they are 0..{len(devices) - 1})" if devices else "the inventory holds no GPU"


def _target(devices: Sequence[Device], entry: str, spec: str) -> tuple[int, int | None]:
    """(host position of the GPU, index of the MIG device under it, or None for the GPU named whole)."""
    gpu_text, colon, mig_text = entry.partition(":")
    index = _index(entry)
    if index is not None:
        if index < len(devices):
            return index, None
        reason = _no_gpu_index(devices)
    elif entry.startswith(UUID_PREFIX):
        for position, d in enumerate(devices):
            if d.uuid == entry:
                return position, None
        reason = "no GPU has this UUID (a UUID is matched whole)" + did_you_mean(entry, [d.uuid for d in devices],
                                                                                  quote=False)
    elif entry.startswith(MIG_UUID_PREFIX):
        for position, d in enumerate(devices):
            for m in d.mig or ():
                if m.uuid == entry:
                    return position, m.index
        migs = [m.uuid for d in devices for m in d.mig or ()]
        reason = "no MIG device has this UUID (a UUID is matched whole)" + did_you_mean(entry, migs, quote=False)
    elif colon and _index(gpu_text) is not None and _index(mig_text) is not None:
        gpu, mig = _index(gpu_text), _index(mig_text)
        assert gpu is not None and mig is not None
        if gpu >= len(devices):
            reason = _no_gpu_index(devices)
        elif devices[gpu].mig is None:
            reason = f"GPU {gpu} is not in MIG mode"
        elif mig < len(devices[gpu].mig or ()):
            return gpu, mig
        else:  # a spec's layout is never empty: a MIG-mode GPU of the inventory has a MIG device
            reason = f"GPU {gpu} has MIG devices {gpu}:0..{gpu}:{len(devices[gpu].mig or ()) - 1}"
    else:
        reason = "neither a GPU index, a GPU UUID nor a MIG device"
    raise InvalidDeviceSelection(entry, reason, _holds(devices, spec))


def _seen(device: Device, index: int, migs: set[int]) -> Device:
    """The GPU as the container sees it: renumbered, and in MIG mode with only the MIG devices it named
    (numbered from 0 under it, as NVML in the container numbers them)."""
    seen = device.renumbered(index)
    if device.mig is None:
        return seen
    kept = [m for m in device.mig if m.index in migs]
    return seen.with_mig(tuple(m.renumbered(i) for i, m in enumerate(kept)))


def select_devices(devices: Sequence[Device], entries: Sequence[str], spec: str = "") -> list[Device]:
    """The devices `entries` (host indices, GPU and MIG UUIDs, GPU:MIG; already split and trimmed) name, in host
    order, renumbered 0..n-1 with their identities kept; an empty `entries` selects none. Raises
    InvalidDeviceSelection for the first entry that names no device (`spec`, the inventory, is named in it)."""
    chosen: dict[int, set[int]] = {}
    for entry in entries:
        position, mig = _target(devices, entry, spec)
        named = chosen.setdefault(position, set())
        if mig is not None:
            named.add(mig)
    return [_seen(devices[p], i, chosen[p]) for i, p in enumerate(sorted(chosen))]
