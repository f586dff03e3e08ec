"""MIG layouts in the device spec: placement, instance IDs and UUIDs, and errors that say what fits."""

from __future__ import annotations

import pytest

from fakegpu.devices import resolve_devices
from fakegpu.devices.mig import MigBoard, mig_uuid, place, remaining_capacity
from fakegpu.devices.table import render_table
from fakegpu.errors import InvalidDeviceSpec
from fakegpu.profiles import load_catalog
from fakegpu.profiles.table import parse_table


def layout(spec: str) -> list[tuple[str, int, int]]:
    (device,) = resolve_devices(spec)
    assert device.mig is not None
    return [(m.profile.name, m.gi_id, m.start) for m in device.mig]


def test_mixed_layout_places_and_numbers_as_real_drivers() -> None:
    # GPU instance IDs follow the memory-slice tree: 3g at slice 0 is 1, a 2g at 4 is 5, a 1g at 6 is 13.
    assert layout("a100:mig=3g.40gb+2g.20gb+1g.10gb") == [("3g.40gb", 1, 0), ("2g.20gb", 5, 4), ("1g.10gb", 13, 6)]
    assert layout("a100:mig=1g.10gb*7") == [("1g.10gb", 7 + i, i) for i in range(7)]
    assert layout("a100:mig=7g.80gb") == [("7g.80gb", 0, 0)]


def test_search_finds_the_arrangement_greedy_placement_misses() -> None:
    # 3g.40gb at slice 0 leaves no room for two 2g.20gb; at slice 4 it does.
    assert layout("a100:mig=3g.40gb+2g.20gb+2g.20gb") == [("3g.40gb", 2, 4), ("2g.20gb", 3, 0), ("2g.20gb", 4, 2)]


def test_profile_ids_prefixes_and_pins_are_accepted() -> None:
    assert layout("a100:mig=9+MIG 2g.20gb+19") == layout("a100:mig=3g.40gb+2g.20gb+1g.10gb")
    assert layout("a100:mig=3g.40gb@4") == [("3g.40gb", 2, 4)]
    assert ("1g.10gb+me", 10, 3) in layout("a100:mig=1g.10gb+me@3+1g.10gb*6")


def test_memory_and_sms_are_the_profiles() -> None:
    (device,) = resolve_devices("a100:mig=3g.40gb+1g.10gb")
    sizes = {m.profile.name: (m.profile.memory_bytes >> 20, m.profile.sm_count) for m in device.mig}
    assert sizes == {"3g.40gb": (40192, 42), "1g.10gb": (9728, 14)}
    assert device.to_dict()["mig"][0]["uuid"].startswith("MIG-")


def test_uuids_are_stable_and_distinct() -> None:
    a = resolve_devices("a100:2:mig=1g.10gb*7")
    uuids = [m.uuid for d in a for m in d.mig]
    assert len(set(uuids)) == 14
    assert uuids == [m.uuid for d in resolve_devices("a100:2:mig=1g.10gb*7") for m in d.mig]
    assert a[0].mig[0].uuid == mig_uuid(a[0].uuid, 7)
    assert a[0].mig[0].uuid != mig_uuid(a[1].uuid, 7)


def test_mig_off_is_none_and_table_pins_the_placement() -> None:
    devices = resolve_devices("h100,a100:mig=3g.40gb+2g.20gb+2g.20gb")
    assert devices[0].mig is None
    _, records = parse_table(render_table(devices, "x", "0"))
    assert "mig.layout" not in records[0]
    assert records[1]["mig.layout"] == "3g.40gb@4+2g.20gb@0+2g.20gb@2"


@pytest.mark.parametrize(("spec", "words"), [
    ("a100:mig=3g.40gb+3g.40gb+1g.10gb", ["does not fit", "9 of 8 memory slices", "after 3g.40gb+3g.40gb",
                                           "no further instance"]),
    ("a100:mig=4g.40gb+2g.20gb+2g.20gb", ["does not fit", "after 4g.40gb+2g.20gb", "1g.10gb", "1g.20gb"]),
    ("a100:mig=1g.10gb*8", ["8 x 1g.10gb", "at most 7"]),
    ("a100:mig=3g.4gb", ["no MIG profile", "did you mean 3g.40gb", "it offers 1g.10gb"]),
    ("a100:mig=3g.40gb@2", ["starts at memory slice 0, 4"]),
    ("t4:mig=1g.5gb", ["does not support MIG", "a100-sxm4-80gb"]),
    ("a100:mig=", ["empty"]),
])
def test_bad_layouts_say_what_fits(spec: str, words: list[str]) -> None:
    with pytest.raises(InvalidDeviceSpec) as e:
        resolve_devices(spec)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_every_catalog_mig_table_places_its_own_maximum() -> None:
    # Each profile alone, repeated to its instance count, fits the board it is listed for.
    boards = [(p, MigBoard.of(p)) for p in load_catalog()]
    boards = [(p, b) for p, b in boards if b is not None]
    assert boards
    for profile, board in boards:
        for gip in board.profiles:
            assert place([gip] * gip.instances, board) is not None, (profile.id, gip.name)


def remaining(spec: str) -> dict[str, int]:
    (device,) = resolve_devices(spec)
    board = MigBoard.of(device.profile)  # a board of its own: counting must not rest on object identity
    assert board is not None
    return {p.name: remaining_capacity(device.mig or (), board, p) for p in board.profiles}


def test_remaining_capacity_is_what_still_fits() -> None:
    # 3g.40gb on slices 0-3: 2g.20gb starts at 0, 2 or 4 only, and no one-slice profile starts at slice 7.
    assert remaining("a100:mig=3g.40gb") == {"1g.10gb": 3, "1g.10gb+me": 1, "1g.20gb": 2, "2g.20gb": 1,
                                             "3g.40gb": 1, "4g.40gb": 0, "7g.80gb": 0}
    # The board's own instance limit: one 1g.10gb+me at most.
    assert remaining("a100:mig=1g.10gb+me")["1g.10gb+me"] == 0
    assert set(remaining("a100:mig=1g.10gb*7").values()) == {0}
