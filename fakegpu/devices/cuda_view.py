"""The devices a CUDA process enumerates: CUDA_VISIBLE_DEVICES applied to the board list, MIG slices expanded.

CUDA's rules, as the driver applies them: unset means every device; set and empty means none; otherwise a comma
list of GPU indices, GPU-<uuid> and MIG-<uuid> entries (a unique prefix of a UUID is enough), and enumeration
stops at the first entry that names nothing or repeats one. A board in MIG mode is never a CUDA device itself:
selected (by index, by UUID, or by default) it contributes its MIG devices, each a device with the slice's
memory and SMs named '<board> MIG 3g.40gb'; a MIG-<uuid> entry selects that one slice. native/common/fg_visible.c
is the C twin.
"""

from __future__ import annotations

from fakegpu.devices.device import Device
from fakegpu.devices.mig import MigInstance
from fakegpu.profiles import Profile

MIB = 1 << 20


def mig_profile(board: Profile, mig: MigInstance, memory_slices: int) -> Profile:
    """The profile a MIG device shows CUDA: the board's, with the slice's name, memory, SMs and L2 share."""
    data = dict(board.data)
    gip = mig.profile
    cores_per_sm = data["cuda_cores"] // data["sm_count"]
    data["name"] = f"{board.name} MIG {gip.name}"
    data["memory"] = {**data["memory"], "total_bytes": gip.memory_mib * MIB, "cuda_total_bytes": gip.memory_mib * MIB}
    data["sm_count"] = gip.sm_count
    data["cuda_cores"] = cores_per_sm * gip.sm_count
    data["l2_cache_bytes"] = data["l2_cache_bytes"] * gip.size // memory_slices
    data["mig"] = {"supported": False}
    return Profile(data)


def _expand(device: Device) -> list[tuple[Device, MigInstance | None]]:
    if device.mig is None:
        return [(device, None)]
    return [(device, m) for m in device.mig]


def _pick(devices: list[Device], entry: str) -> list[tuple[Device, MigInstance | None]] | None:
    if entry.isdigit() and len(entry) <= 3:
        i = int(entry)
        return _expand(devices[i]) if i < len(devices) else None
    if entry.isdigit():
        return None
    key = entry.lower()
    if key.startswith("gpu-"):
        found = [d for d in devices if d.uuid.lower().startswith(key)]
        return _expand(found[0]) if len(found) == 1 else None
    if key.startswith("mig-"):
        slices = [(d, m) for d in devices for m in d.mig or () if m.uuid.lower().startswith(key)]
        return slices if len(slices) == 1 else None
    return None


def cuda_devices(devices: list[Device], visible: str | None) -> list[Device]:
    """The CUDA devices of a process whose CUDA_VISIBLE_DEVICES is `visible` (None: unset), numbered 0..n-1."""
    return [d for d, _ in cuda_view(devices, visible)]


def cuda_view(devices: list[Device], visible: str | None) -> list[tuple[Device, int]]:
    """(CUDA device, index of the board it lives on in `devices`) per CUDA device: NVML and nvidia-smi count a
    process's memory under that board."""
    from fakegpu.devices.mig import MigBoard

    chosen: list[tuple[Device, MigInstance | None]] = []
    if visible is None:
        for d in devices:
            chosen.extend(_expand(d))
    else:
        for raw in visible.split(","):
            picked = _pick(devices, raw.strip())
            if picked is None or any(p in chosen for p in picked):
                break
            chosen.extend(picked)
    out: list[tuple[Device, int]] = []
    for device, mig in chosen:
        if mig is None:
            out.append((device if device.index == len(out) else device.renumbered(len(out)), device.index))
            continue
        board = MigBoard.of(device.profile)
        assert board is not None  # a device with MIG instances has a MIG table
        profile = mig_profile(device.profile, mig, board.memory_slices)
        out.append((Device(len(out), profile, mig.uuid, device.serial, device.pci_domain, device.pci_bus,
                           device.pci_device, device.pci_function, device.minor_number), device.index))
    return out
