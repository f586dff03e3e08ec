"""THE device-spec grammar: forms accepted, errors that name the bad part, stable identities."""

from __future__ import annotations

import re

import pytest

from fakegpu.devices import MAX_DEVICES, parse_spec, resolve_devices
from fakegpu.errors import InvalidDeviceSpec

UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.mark.parametrize(("spec", "expected"), [
    ("a100:4", ["a100-sxm4-80gb"] * 4),
    ("t4", ["tesla-t4"]),
    ("a100:2,h100", ["a100-sxm4-80gb"] * 2 + ["h100-sxm5-80gb"]),
    ("a100-sxm4-80gb:2,l4:1", ["a100-sxm4-80gb"] * 2 + ["l4-24gb"]),
    (" a100 : 2 , h100 ", ["a100-sxm4-80gb"] * 2 + ["h100-sxm5-80gb"]),
    ("NVIDIA A100-SXM4-80GB:1", ["a100-sxm4-80gb"]),
    ("A100:1", ["a100-sxm4-80gb"]),
])
def test_accepted_forms_resolve_in_order(spec: str, expected: list[str]) -> None:
    devices = resolve_devices(spec)
    assert [d.profile.id for d in devices] == expected
    assert [d.index for d in devices] == list(range(len(expected)))


@pytest.mark.parametrize(("spec", "part", "reason"), [
    ("", "", "empty"),
    ("   ", "   ", "empty"),
    ("a100,,h100", "", "part 2 is empty"),
    ("a100,", "", "part 2 is empty"),
    ("a100:0", "a100:0", "outside 1..64"),
    ("a100:65", "a100:65", "outside 1..64"),
    ("a100:-1", "a100:-1", "not a whole number"),
    ("a100:two", "a100:two", "not a whole number"),
    ("a100:", "a100:", "not a whole number"),
    (":4", ":4", "no profile name"),
    ("a100:40,h100:40", "h100:40", "at most 64"),
    ("$(reboot)", "$(reboot)", "not a profile name"),
    ("a100;rm -rf /", "a100;rm -rf /", "not a profile name"),
    ("zz-9000", "zz-9000", "unknown profile"),
])
def test_bad_specs_name_the_part(spec: str, part: str, reason: str) -> None:
    with pytest.raises(InvalidDeviceSpec) as err:
        parse_spec(spec)
    assert err.value.part.strip() == part.strip()
    assert reason in err.value.reason
    assert "Accepted:" in str(err.value)


def test_typo_suggests_the_closest_profile() -> None:
    with pytest.raises(InvalidDeviceSpec) as err:
        parse_spec("a10O:2")
    assert err.value.suggestions[0] == "a100"
    assert "a100" in str(err.value)


def test_identities_are_stable_and_unique() -> None:
    first = resolve_devices("a100:2,h100", seed="0")
    again = resolve_devices("a100:2,h100", seed="0")
    assert [d.uuid for d in first] == [d.uuid for d in again]
    assert all(UUID.match(d.uuid) for d in first)
    assert len({d.uuid for d in first}) == 3
    assert len({d.serial for d in first}) == 3
    assert len({d.pci_bus_id for d in first}) == 3
    assert [d.minor_number for d in first] == [0, 1, 2]
    assert first[0].pci_bus_id == "00000000:18:00.0"
    assert all(len(d.serial) == 13 and d.serial.isdigit() for d in first)


def test_seed_changes_identities_and_env_sets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    base = resolve_devices("a100:2", seed="0")
    other = resolve_devices("a100:2", seed="node-1")
    assert {d.uuid for d in base}.isdisjoint(d.uuid for d in other)
    monkeypatch.setenv("FAKEGPU_SEED", "node-1")
    assert [d.uuid for d in resolve_devices("a100:2")] == [d.uuid for d in other]


def test_sixty_four_devices_get_distinct_pci_addresses() -> None:
    devices = resolve_devices(f"a100:{MAX_DEVICES}")
    assert len({d.pci_bus_id for d in devices}) == MAX_DEVICES
    assert devices[8].pci_bus_id.startswith("00000001:")
