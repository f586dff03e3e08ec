"""The hook's own argument parser and its reading of a table the runtime prepared."""

from __future__ import annotations

import pytest
from fakegpu_hook.hook import UsageError_, _parse_args, prepared_table

from fakegpu.devices import resolve_devices
from fakegpu.devices.table import write_table


def test_parse_args_values_and_flags():
    args = _parse_args(["--native-dir", "/n", "--nvidia-smi=/s", "--state-root", "/r", "--prepared",
                        "--honour-nvidia-env"])
    assert (args.native_dir, args.nvidia_smi, args.state_root, args.nvidia_profile) == ("/n", "/s", "/r", "a100")
    assert args.prepared and args.honour_nvidia_env and not args.join_mount_ns
    for bad in (["--bogus"], ["--state-root"], ["positional"]):
        with pytest.raises(UsageError_):
            _parse_args(bad)


def test_prepared_table_is_used_only_for_the_same_request(tmp_path):
    table = tmp_path / "devices.tbl"
    assert prepared_table(str(table), "a100:2", None) is None  # none written
    write_table(table, resolve_devices("h100:2,l4", seed="0"), "h100:2,l4", "0")
    assert prepared_table(str(table), "h100:2,l4", None) == (3, "0")
    assert prepared_table(str(table), "h100:2,l4", "0") == (3, "0")
    assert prepared_table(str(table), "h100:2,l4", "7") is None  # another seed
    assert prepared_table(str(table), "a100:3", None) is None  # another spec
    table.write_text("garbage\n")
    assert prepared_table(str(table), "h100:2,l4", None) is None
