"""The GPUs a container sees when it names some of the host's (NVIDIA_VISIBLE_DEVICES's indices and UUIDs).

Under NVIDIA's runtime a container gets the device nodes of the GPUs it names, and NVML inside it lists those
in the host's (PCI) order, numbered from 0: the order they were named in does not matter, naming one twice
changes nothing, and each keeps its UUID, serial, PCI bus id and minor number (/dev/nvidiaN keeps the host's
N). native/container/select.c does the same for the C `create`.
"""

from __future__ import annotations

from fakegpu.devices.device import UUID_PREFIX, Device
from fakegpu.errors import InvalidDeviceSelection, shorten

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


def _position(devices: Sequence[Device], entry: str, spec: str) -> int:
    if entry.isascii() and entry.isdigit():
        index = int(entry) if len(entry) <= _INDEX_DIGITS else len(devices)
        if index < len(devices):
            return index
        reason = f"no GPU has this index (they are 0..{len(devices) - 1})"
    elif entry.startswith(UUID_PREFIX):
        for position, d in enumerate(devices):
            if d.uuid == entry:
                return position
        reason = "no GPU has this UUID (a UUID is matched whole)"
    elif entry.startswith("MIG-") or ":" in entry:
        reason = "MIG devices are not modelled by FakeGPU"
    else:
        reason = "neither a GPU index nor a GPU UUID"
    raise InvalidDeviceSelection(entry, reason, _holds(devices, spec))


def select_devices(devices: Sequence[Device], entries: Sequence[str], spec: str = "") -> list[Device]:
    """The devices `entries` (host indices and UUIDs, already split and trimmed) name, in host order,
    renumbered 0..n-1 with their identities kept; an empty `entries` selects none. Raises
    InvalidDeviceSelection for the first entry that names no device (`spec`, the inventory, is named in it)."""
    chosen = {_position(devices, entry, spec) for entry in entries}
    return [devices[p].renumbered(i) for i, p in enumerate(sorted(chosen))]
