"""The compiled device table the C shims read: round trip, atomic write, and the catalog table."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakegpu.devices import resolve_devices
from fakegpu.devices.table import render_table, write_table
from fakegpu.locations import COMPILED_CATALOG_TABLE
from fakegpu.profiles import load_catalog
from fakegpu.profiles.table import parse_table, render_catalog_table


def test_table_round_trips_identity_and_profile_facts(tmp_path: Path) -> None:
    devices = resolve_devices("a100:2,h100", seed="7")
    path = tmp_path / "devices.tbl"
    write_table(path, devices, "a100:2,h100", "7")
    header, rows = parse_table(path.read_text())
    assert header == {"format": "1", "count": "3", "spec": "a100:2,h100", "seed": "7"}
    for device, row in zip(devices, rows, strict=True):
        assert row["uuid"] == device.uuid
        assert row["name"] == device.profile.name
        assert int(row["memory.total_bytes"]) == device.profile.memory_total_bytes
        assert int(row["sm_limits.max_threads_per_sm"]) == device.profile.data["sm_limits"]["max_threads_per_sm"]
        assert row["memory.ecc"] in ("0", "1")
        assert "aliases" not in row and "source.specs" not in row
    assert list(tmp_path.iterdir()) == [path], "no temporary file left behind"


def test_failed_write_leaves_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "devices.tbl"
    with pytest.raises(OSError):
        write_table(missing, resolve_devices("t4"), "t4", "0")
    assert list(tmp_path.iterdir()) == []


def test_values_with_tabs_are_refused() -> None:
    with pytest.raises(ValueError):
        render_table(resolve_devices("t4"), "t4\tx", "0")


@pytest.mark.parametrize("text", [
    "",
    "device\tindex=0\n",
    "fakegpu-device-table\tformat=2\tcount=0\n",
    "fakegpu-device-table\tformat=1\tcount=2\ndevice\tindex=0\n",
    "fakegpu-device-table\tformat=1\tcount=1\ndevice\tindex\n",
    "fakegpu-device-table\tformat=1\tcount=0\nbogus\tx=1\n",
])
def test_corrupt_tables_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        parse_table(text)


def test_packaged_catalog_table_lists_every_profile_with_aliases() -> None:
    text = Path(COMPILED_CATALOG_TABLE).read_text()
    assert text == render_catalog_table(load_catalog())
    _, rows = parse_table(text)
    assert len(rows) == len(load_catalog())
    a100 = next(r for r in rows if r["id"] == "a100-sxm4-80gb")
    assert "a100" in a100["aliases"].split(",")
