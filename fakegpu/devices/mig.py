"""MIG layouts: a board split into GPU instances, each with one compute instance, as `nvidia-smi mig -cgi ... -C`
leaves it.

    layout := item ("+" item)*
    item   := profile ["@" start] ["*" N]    profile: a GPU instance profile name of the board ('3g.40gb',
                                             '1g.10gb+me') or its -lgip ID ('9'); start: pin the placement's
                                             first memory slice (as `-cgi 9:4` does); N: that many of them

The spec grammar (fakegpu.devices.spec) takes a layout after a device part: 'a100:2:mig=3g.40gb+2g.20gb+1g.10gb'.
Placement is a depth-first search in layout order over each profile's start slots (lowest first), so a layout
that fits in any arrangement is placed, and one that does not is refused naming what still fits. GPU instance
IDs follow the board's memory-slice tree as real drivers number them: the whole board is 0, halves 1-2, quarters
3-6, eighths 7-14 (on a 4-slice board: 0, 1-2, 3-6). native/common/fg_mig.c is the C twin (a differential test
compares the two).
"""

from __future__ import annotations

# The hook imports this at every container start: no typing, dataclasses or hashlib at import time.
from fakegpu.devices.identity import digest, uuid_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from fakegpu.profiles import Profile

MIG_UUID_PREFIX = "MIG-"
MIB = 1 << 20


class MigLayoutError(ValueError):
    """A layout that names no profile of the board, asks for too many of one, or does not fit."""


class MigProfile:
    """One GPU instance profile of a board (a row of `nvidia-smi mig -lgip`)."""

    __slots__ = ("compute_slices", "copy_engines", "decoders", "encoders", "id", "instances", "jpeg",
                 "memory_mib", "name", "nvml_profile", "ofa", "p2p", "size", "sm_count", "starts")

    def __init__(self, data: dict[str, Any]) -> None:
        self.name: str = data["name"]
        self.id: int = data["id"]
        self.nvml_profile: int = data["nvml_profile"]
        self.compute_slices: int = data["compute_slices"]
        self.instances: int = data["instances"]
        self.memory_mib: int = data["memory_mib"]
        self.sm_count: int = data["sm_count"]
        self.copy_engines: int = data["copy_engines"]
        self.decoders: int = data["decoders"]
        self.encoders: int = data["encoders"]
        self.jpeg: int = data["jpeg"]
        self.ofa: int = data["ofa"]
        self.p2p: bool = bool(data.get("p2p", False))
        self.starts: tuple[int, ...] = tuple(data["placements"]["starts"])
        self.size: int = data["placements"]["size"]

    def __repr__(self) -> str:
        return f"MigProfile({self.name!r}, id={self.id})"

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB


class MigInstance:
    """A GPU instance with its one compute instance: what NVML hands out as a MIG device handle."""

    __slots__ = ("ci_id", "gi_id", "index", "profile", "start", "uuid")

    def __init__(self, index: int, profile: MigProfile, start: int, gi_id: int, uuid: str, ci_id: int = 0) -> None:
        self.index = index  # the MIG device index under its parent (nvmlDeviceGetMigDeviceHandleByIndex)
        self.profile = profile
        self.start = start
        self.gi_id = gi_id
        self.ci_id = ci_id
        self.uuid = uuid

    def __repr__(self) -> str:
        return f"MigInstance({self.profile.name!r}, gi={self.gi_id}, start={self.start}, uuid={self.uuid!r})"

    def renumbered(self, index: int) -> MigInstance:
        """This MIG device under another index: the same instance (placement, IDs, UUID), as a container that
        sees some of its parent's MIG devices numbers them."""
        return MigInstance(index, self.profile, self.start, self.gi_id, self.uuid, self.ci_id)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "profile": self.profile.name, "profile_id": self.profile.id,
                "gpu_instance_id": self.gi_id, "compute_instance_id": self.ci_id,
                "placement": {"start": self.start, "size": self.profile.size}, "uuid": self.uuid,
                "memory_total_bytes": self.profile.memory_bytes, "sm_count": self.profile.sm_count}


class MigBoard:
    """A board's MIG facts: its slices and GPU instance profiles, from the catalog."""

    __slots__ = ("compute_slices", "memory_slices", "profiles")

    def __init__(self, compute_slices: int, memory_slices: int, profiles: Sequence[MigProfile]) -> None:
        self.compute_slices = compute_slices
        self.memory_slices = memory_slices
        self.profiles = tuple(profiles)

    @classmethod
    def of(cls, profile: Profile) -> MigBoard | None:
        """The board's MIG facts, or None when it has no MIG or the catalog holds no profile table for it."""
        mig = profile.data.get("mig") or {}
        if not mig.get("supported") or not mig.get("gpu_instance_profiles"):
            return None
        return cls(mig["slices"]["compute"], mig["slices"]["memory"],
                   [MigProfile(p) for p in mig["gpu_instance_profiles"]])

    def find(self, name: str) -> MigProfile | None:
        key = name.strip().lower()
        if key.startswith("mig "):
            key = key[4:].strip()
        for p in self.profiles:
            if p.name == key or str(p.id) == key:
                return p
        return None

    def names(self) -> list[str]:
        return [p.name for p in self.profiles]

    def gpu_instance_id(self, start: int, size: int) -> int:
        """The GPU instance ID real drivers give a placement: its node in the memory-slice tree."""
        return self.memory_slices // size - 1 + start // size


def parse_layout(text: str, board: MigBoard, board_name: str) -> list[MigProfile]:
    """The profiles a layout names, in order; MigLayoutError naming the bad item and the board's profiles."""
    return [p for p, _ in parse_pinned(text, board, board_name)]


def parse_pinned(text: str, board: MigBoard, board_name: str) -> list[tuple[MigProfile, int | None]]:
    """(profile, pinned start or None) per instance a layout names, in order."""
    from fakegpu.profiles.matching import did_you_mean

    if not text.strip():
        raise MigLayoutError(f"the MIG layout is empty; {board_name} offers {', '.join(board.names())}")
    items: list[str] = []
    for raw in text.split("+"):
        item = raw.strip()
        # '1g.10gb+me' is one profile name that holds a '+': join a suffix back to the item before it.
        suffix = item.split("@")[0].split("*")[0].strip()
        if items and suffix in ("me", "gfx", "me.all") and board.find(f"{items[-1]}+{suffix}"):
            items[-1] = f"{items[-1]}+{item}"
            continue
        items.append(item)
    out: list[tuple[MigProfile, int | None]] = []
    for item in items:
        rest, star, count_text = item.partition("*")
        name, at, start_text = rest.partition("@")
        count = 1
        if star:
            if count_text.strip() not in "12345678" or not count_text.strip():
                raise MigLayoutError(f"{item!r}: the count after '*' must be 1..8")
            count = int(count_text)
        profile = board.find(name)
        if profile is None:
            hint = did_you_mean(name, board.names(), limit=2, quote=False)
            raise MigLayoutError(f"{name.strip()!r} is no MIG profile of {board_name}{hint}; it offers "
                                 f"{', '.join(board.names())}")
        start: int | None = None
        if at:
            pin_text = start_text.strip()
            if len(pin_text) != 1 or not pin_text.isdigit() or int(pin_text) not in profile.starts:
                raise MigLayoutError(f"{item!r}: {profile.name} starts at memory slice "
                                     f"{', '.join(map(str, profile.starts))} on {board_name}")
            if count > 1:
                raise MigLayoutError(f"{item!r}: a pinned placement ('@') is one instance; drop '*{count}'")
            start = int(start_text)
        out.extend([(profile, start)] * count)
    return out


def place(profiles: Sequence[MigProfile], board: MigBoard,
          pins: Sequence[int | None] | None = None) -> list[int] | None:
    """A start slot per profile (the pinned one where `pins` gives one) so that no two overlap, or None when
    none exists."""
    starts: list[int] = []
    used = [False] * board.memory_slices

    def search(i: int, compute: int) -> bool:
        if i == len(profiles):
            return True
        p = profiles[i]
        if compute + p.compute_slices > board.compute_slices:
            return False
        pin = pins[i] if pins is not None and i < len(pins) else None
        for s in p.starts if pin is None else (pin,):
            if s + p.size > board.memory_slices or any(used[s:s + p.size]):
                continue
            used[s:s + p.size] = [True] * p.size
            starts.append(s)
            if search(i + 1, compute + p.compute_slices):
                return True
            starts.pop()
            used[s:s + p.size] = [False] * p.size
        return False

    return starts if search(0, 0) else None


def _fits_beside(placed: Sequence[MigProfile], board: MigBoard) -> list[str]:
    return [p.name for p in board.profiles
            if _count(placed, p) < p.instances and place([*placed, p], board) is not None]


def _count(profiles: Sequence[MigProfile], profile: MigProfile) -> int:
    return sum(1 for p in profiles if p is profile)


def check_layout(profiles: Sequence[MigProfile], board: MigBoard, board_name: str,
                 pins: Sequence[int | None] | None = None) -> list[int]:
    """The starts of a layout that fits; MigLayoutError saying why not and what fits."""
    for p in board.profiles:
        n = _count(profiles, p)
        if n > p.instances:
            raise MigLayoutError(f"{n} x {p.name} asked; {board_name} holds at most {p.instances}")
    starts = place(profiles, board, pins)
    if starts is not None:
        return starts
    prefix: list[MigProfile] = []
    for p in profiles:
        if place([*prefix, p], board, pins) is None:
            break
        prefix.append(p)
    mem = sum(p.size for p in profiles)
    compute = sum(p.compute_slices for p in profiles)
    beside = _fits_beside(prefix, board)
    what = "+".join(p.name for p in prefix) or "nothing"
    raise MigLayoutError(
        f"the layout does not fit {board_name} ({compute} of {board.compute_slices} compute slices, {mem} of "
        f"{board.memory_slices} memory slices asked); after {what} there is room for "
        f"{', '.join(beside) if beside else 'no further instance'}")


def remaining_capacity(mig: Sequence[MigInstance], board: MigBoard, profile: MigProfile) -> int:
    """How many more GPU instances of `profile` fit beside the placed ones, as
    nvmlDeviceGetGpuInstanceRemainingCapacity counts them (the free column of `nvidia-smi mig -lgip`)."""
    placed = [m.profile for m in mig]
    pins: list[int | None] = [m.start for m in mig]
    # By ID, not identity: the instances may come from another MigBoard of the same catalog profile.
    have = sum(1 for p in placed if p.id == profile.id)
    n = 0
    while have + n < profile.instances and \
            place([*placed, *[profile] * (n + 1)], board, [*pins, *[None] * (n + 1)]) is not None:
        n += 1
    return n


def placed_layout(mig: Sequence[MigInstance]) -> str:
    """Instances as a layout with every placement pinned ('3g.40gb@0+2g.20gb@4'): what the device table holds, so
    every reader arrives at the same placement."""
    return "+".join(f"{m.profile.name}@{m.start}" for m in mig)


def mig_uuid(parent_uuid: str, gi_id: int, ci_id: int = 0) -> str:
    """MIG-<uuid>, derived from the parent's UUID and the instance IDs (stable across runs and hosts)."""
    return uuid_text(MIG_UUID_PREFIX, digest(f"fakegpu-mig:{parent_uuid}:{gi_id}:{ci_id}"))


def instances(profiles: Sequence[MigProfile], starts: Sequence[int], board: MigBoard,
              parent_uuid: str) -> tuple[MigInstance, ...]:
    """The MIG devices of a placed layout, numbered as NVML numbers them: by GPU instance ID."""
    placed = sorted(((board.gpu_instance_id(s, p.size), p, s) for p, s in zip(profiles, starts, strict=True)),
                    key=lambda t: t[0])
    return tuple(MigInstance(i, p, s, gi, mig_uuid(parent_uuid, gi)) for i, (gi, p, s) in enumerate(placed))
