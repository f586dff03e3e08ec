"""The one parser of the device-spec grammar (FAKEGPU_DEVICES).

    spec  := part ("," part)*
    part  := name [":" count] [":mig=" layout]
             name: profile id, alias or board name; count: 1..64 (default 1);
             layout: the MIG GPU instances of each of these boards (grammar in fakegpu.devices.mig)

Parts keep their order, so 'a100-sxm4-80gb:2,l4:1' gives indices 0-1 on A100 and 2 on L4. Whether an
environment asks for devices at all (unset, empty, 'void', 'none') is the caller's question, not the grammar's.
"""

from __future__ import annotations

import os
import re

from fakegpu.devices.device import Device
from fakegpu.devices.mig import MigBoard, MigLayoutError, MigProfile, check_layout, instances, parse_pinned
from fakegpu.errors import InvalidDeviceSpec, InvalidSeed
from fakegpu.profiles import Catalog, Profile, load_catalog

MAX_DEVICES = 64
# Input bounds, checked before any other work (the container runtime parses these as root at every start).
# native/common/fg_devices.h holds the same numbers (FG_MAX_SPEC_LENGTH, FG_MAX_SEED_LENGTH); a test compares.
MAX_SPEC_LENGTH = 1024  # bytes of UTF-8
MAX_SEED_LENGTH = 128
# What a command that is given no device spec (and finds no FAKEGPU_DEVICES) fakes: one A100.
DEFAULT_DEVICES = "a100:1"
DEFAULT_SEED = "0"
# A MIG layout once parsed: the GPU instance profiles and the start each is placed at.
Layout = tuple[list[MigProfile], list[int]]
_COUNT = re.compile(r"^[0-9]+$")
# Board names contain spaces and dashes but never ':' or ','; anything else odd is garbage, not a typo.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]*$")


def parse_spec(spec: str, catalog: Catalog | None = None) -> list[tuple[Profile, int, Layout | None]]:
    """Split a spec into ordered (profile, count, MIG layout or None) parts, or raise InvalidDeviceSpec naming the
    bad part."""
    size = len(spec.encode("utf-8", "surrogatepass"))
    if size > MAX_SPEC_LENGTH:
        raise InvalidDeviceSpec(spec, spec.split(",", 1)[0], f"the spec is {size} bytes long; at most "
                                f"{MAX_SPEC_LENGTH}")
    catalog = catalog or load_catalog()
    if not spec or not spec.strip():
        raise InvalidDeviceSpec(spec, spec, "the spec is empty")
    parts: list[tuple[Profile, int, Layout | None]] = []
    total = 0
    for position, raw in enumerate(spec.split(","), start=1):
        part = raw.strip()
        if not part:
            raise InvalidDeviceSpec(spec, raw, f"part {position} is empty (stray comma?)")
        name, *fields = (f.strip() for f in part.split(":"))
        if not name:
            raise InvalidDeviceSpec(spec, part, "no profile name before ':'")
        if not _NAME.match(name):
            raise InvalidDeviceSpec(spec, part, f"{name!r} is not a profile name")
        profile = catalog.find(name)
        if profile is None:
            raise InvalidDeviceSpec(spec, part, f"unknown profile {name!r}", catalog.suggest(name))
        layout_text = fields.pop() if fields and fields[-1].lower().startswith("mig=") else None
        if len(fields) > 1:
            raise InvalidDeviceSpec(spec, part, "a part is NAME[:COUNT][:mig=LAYOUT]")
        count = 1
        if fields:
            count_text = fields[0]
            if not _COUNT.match(count_text):
                raise InvalidDeviceSpec(spec, part, f"count {count_text!r} is not a whole number")
            count = int(count_text)
            if not 1 <= count <= MAX_DEVICES:
                raise InvalidDeviceSpec(spec, part, f"count {count} is outside 1..{MAX_DEVICES}")
        total += count
        if total > MAX_DEVICES:
            raise InvalidDeviceSpec(spec, part, f"the spec asks for {total} devices; at most {MAX_DEVICES} in all")
        layout = _layout(spec, part, profile, layout_text[4:]) if layout_text is not None else None
        parts.append((profile, count, layout))
    return parts


def _layout(spec: str, part: str, profile: Profile, text: str) -> Layout:
    board = MigBoard.of(profile)
    if board is None:
        why = ("does not support MIG" if not profile.data["mig"]["supported"]
               else "supports MIG, but the catalog holds no MIG profile table for it")
        raise InvalidDeviceSpec(spec, part, f"{profile.name} ({profile.id}) {why}; boards with MIG tables: "
                                f"{', '.join(_mig_boards())}")
    try:
        pinned = parse_pinned(text, board, profile.name)
        profiles, pins = [p for p, _ in pinned], [s for _, s in pinned]
        return profiles, check_layout(profiles, board, profile.name, pins)
    except MigLayoutError as e:
        raise InvalidDeviceSpec(spec, part, str(e)) from None


def _mig_boards() -> list[str]:
    return [p.id for p in load_catalog() if MigBoard.of(p) is not None]


def effective_seed(seed: str | None = None) -> str:
    """The seed given, else FAKEGPU_SEED, else DEFAULT_SEED."""
    return seed if seed is not None else (os.environ.get("FAKEGPU_SEED") or DEFAULT_SEED)


def check_seed(seed: str) -> None:
    """Raise InvalidSeed for a seed past MAX_SEED_LENGTH (the C shims hash at most that many bytes of it)."""
    size = len(seed.encode("utf-8", "surrogatepass"))
    if size > MAX_SEED_LENGTH:
        raise InvalidSeed(seed, f"it is {size} bytes long; at most {MAX_SEED_LENGTH}")


def resolve_devices(spec: str, seed: str | None = None, catalog: Catalog | None = None) -> list[Device]:
    """The ordered devices a spec describes, with identities from `effective_seed(seed)`."""
    seed = effective_seed(seed)
    check_seed(seed)
    devices: list[Device] = []
    for profile, count, layout in parse_spec(spec, catalog):
        for _ in range(count):
            device = Device.create(len(devices), profile, seed)
            if layout is not None:
                board = MigBoard.of(profile)
                assert board is not None  # parse_spec checked it
                device = device.with_mig(instances(*layout, board, device.uuid))
            devices.append(device)
    return devices
