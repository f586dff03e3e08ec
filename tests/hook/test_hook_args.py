"""The hook's own argument parser and its reading of a table the runtime prepared."""

from __future__ import annotations

import pytest
from fakegpu_hook.hook import UsageError_, _parse_args, prepared_table

from fakegpu.devices import resolve_devices
from fakegpu.devices.table import write_table


def test_parse_args_values_and_flags():
    args = _parse_args(["--native-dir", "/n", "--nvidia-smi=/s", "--state-root", "/r", "--prepared",
                        "--inventory", "h100:8"])
    assert (args.native_dir, args.nvidia_smi, args.state_root, args.inventory) == ("/n", "/s", "/r", "h100:8")
    assert args.prepared and args.honour_nvidia_env and not args.join_mount_ns
    assert not _parse_args(["--ignore-nvidia-env"]).honour_nvidia_env
    # Hook files written before inventories still pass these.
    old = _parse_args(["--honour-nvidia-env", "--nvidia-profile", "h100"])
    assert old.honour_nvidia_env and (old.inventory, old.nvidia_profile) == ("", "h100")
    for bad in (["--bogus"], ["--state-root"], ["positional"]):
        with pytest.raises(UsageError_):
            _parse_args(bad)


def test_prepared_table_is_used_only_for_the_same_request(tmp_path):
    table = tmp_path / "devices.tbl"
    assert prepared_table(str(table), "a100:2", None) is None  # none written
    write_table(table, resolve_devices("h100:2,l4", seed="0"), "h100:2,l4", "0")
    assert prepared_table(str(table), "h100:2,l4", None) == ([0, 1, 2], "0")
    assert prepared_table(str(table), "h100:2,l4", "0") == ([0, 1, 2], "0")
    assert prepared_table(str(table), "h100:2,l4", None, ("1",)) is None  # another selection
    assert prepared_table(str(table), "h100:2,l4", "7") is None  # another seed
    assert prepared_table(str(table), "a100:3", None) is None  # another spec
    table.write_text("garbage\n")
    assert prepared_table(str(table), "h100:2,l4", None) is None


def test_a_prepared_selection_gives_the_hosts_minor_numbers(tmp_path):
    from fakegpu.devices import select_devices

    table = tmp_path / "devices.tbl"
    picked = select_devices(resolve_devices("a100:4", seed="0"), ["3", "1"])
    write_table(table, picked, "a100:4", "0", ("3", "1"))
    assert prepared_table(str(table), "a100:4", None, ("3", "1")) == ([1, 3], "0")
    assert prepared_table(str(table), "a100:4", None) is None  # a table of a selection is not the whole
    write_table(table, [], "a100:4", "0", ())
    assert prepared_table(str(table), "a100:4", None, ()) == ([], "0")
