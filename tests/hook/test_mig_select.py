"""NVIDIA_VISIBLE_DEVICES naming MIG devices (MIG-<uuid>, GPU:MIG) and MIG-mode GPUs, through the runtime's
request reader: what the container's table holds, and the errors."""

from __future__ import annotations

import re

import pytest
from fakegpu_hook.env import RequestError, device_request, resolve_request

from fakegpu.devices import resolve_devices
from fakegpu.devices.table import device_fields

SPEC = "a100:1:mig=3g.40gb+2g.20gb+1g.10gb,h100,a100:mig=1g.10gb*7"
HOST = resolve_devices(SPEC, seed="0")
# GPU 0's MIG devices in NVML order (by GPU instance ID): 3g.40gb@0 (GI 1), 2g.20gb@4 (GI 5), 1g.10gb@6 (GI 13).
G0 = HOST[0].mig
TWO = G0[1]


def _seen(value: str) -> list:
    return resolve_request(device_request([f"NVIDIA_VISIBLE_DEVICES={value}"], inventory=SPEC), "0")


def test_the_host_layout_is_what_the_tests_assume():
    assert [(m.profile.name, m.start, m.gi_id) for m in G0] == [("3g.40gb", 0, 1), ("2g.20gb", 4, 5),
                                                               ("1g.10gb", 6, 13)]


@pytest.mark.parametrize("value", [TWO.uuid, "0:1", f" 0:1 ,{TWO.uuid}", "0:01"])
def test_one_mig_device_brings_its_parent_with_that_instance_only(value):
    (gpu,) = _seen(value)
    assert (gpu.index, gpu.uuid, gpu.minor_number) == (0, HOST[0].uuid, 0)
    (mig,) = gpu.mig
    # Renumbered under its parent; placement, GPU instance ID and UUID the host's.
    assert (mig.index, mig.profile.name, mig.start, mig.gi_id, mig.uuid) == (0, "2g.20gb", 4, 5, TWO.uuid)
    assert device_fields(gpu)["mig.layout"] == "2g.20gb@4"


def test_a_mig_device_of_a_later_gpu_keeps_the_boards_identity():
    (gpu,) = _seen(HOST[2].mig[6].uuid)
    assert (gpu.index, gpu.uuid, gpu.minor_number, gpu.pci_bus_id) == (0, HOST[2].uuid, 2, HOST[2].pci_bus_id)
    assert device_fields(gpu)["mig.layout"] == f"1g.10gb@{HOST[2].mig[6].start}"


def test_a_mig_mode_gpu_named_whole_has_mig_mode_on_and_no_mig_device():
    for value in ("0", HOST[0].uuid):
        (gpu,) = _seen(value)
        assert gpu.mig == ()
        assert device_fields(gpu)["mig.layout"] == ""


def test_entries_give_the_union_in_host_order():
    got = _seen(f"2:3,1,0:2,{G0[0].uuid},0")
    assert [d.uuid for d in got] == [HOST[0].uuid, HOST[1].uuid, HOST[2].uuid]
    assert [m.uuid for m in got[0].mig] == [G0[0].uuid, G0[2].uuid]
    assert [m.index for m in got[0].mig] == [0, 1]
    assert got[1].mig is None
    assert [m.uuid for m in got[2].mig] == [HOST[2].mig[3].uuid]


def test_all_keeps_every_instance():
    got = _seen("all")
    assert [d.mig_layout for d in got] == [d.mig_layout for d in HOST]
    assert [m.uuid for m in got[0].mig] == [m.uuid for m in G0]


@pytest.mark.parametrize(("value", "reason"), [
    ("0:3", "GPU 0 has MIG devices 0:0..0:2"),
    ("2:7", "GPU 2 has MIG devices 2:0..2:6"),
    ("1:0", "GPU 1 is not in MIG mode"),
    ("3:0", "no GPU has this index (they are 0..2)"),
    ("0:9999999999", "GPU 0 has MIG devices 0:0..0:2"),
    ("0:", "neither a GPU index, a GPU UUID nor a MIG device"),
    (":1", "neither a GPU index, a GPU UUID nor a MIG device"),
    ("0:1:2", "neither a GPU index, a GPU UUID nor a MIG device"),
    ("0:-1", "neither a GPU index, a GPU UUID nor a MIG device"),
    (TWO.uuid.upper(), "no MIG device has this UUID (a UUID is matched whole)"),
    (TWO.uuid[:20], "no MIG device has this UUID"),  # a prefix is not enough
    ("MIG-", "no MIG device has this UUID"),
])
def test_a_bad_mig_entry_is_refused_naming_why(value, reason):
    with pytest.raises(RequestError) as info:
        _seen(value)
    message = str(info.value)
    assert message.startswith(f"NVIDIA_VISIBLE_DEVICES: device '{value}': {reason}")
    assert f"holds 3 GPUs: 0 {HOST[0].uuid}" in message


def test_a_mistyped_mig_uuid_is_answered_with_the_close_one():
    typo = TWO.uuid[:-1] + ("0" if TWO.uuid[-1] != "0" else "1")
    with pytest.raises(RequestError, match=f"did you mean {TWO.uuid}"):
        _seen(typo)
    with pytest.raises(RequestError) as info:
        _seen("MIG-00000000-0000-0000-0000-000000000000")
    assert "did you mean" not in str(info.value)
    with pytest.raises(RequestError, match=f"did you mean {TWO.uuid}"):
        _seen(TWO.uuid.upper())  # matched exactly, as GPU UUIDs are


def test_a_gpu_with_one_mig_device_names_the_one_range():
    spec = "a100:mig=1g.10gb"
    with pytest.raises(RequestError, match=re.escape("GPU 0 has MIG devices 0:0..0:0")):
        resolve_request(device_request(["NVIDIA_VISIBLE_DEVICES=0:1"], inventory=spec), "0")


def test_a_mistyped_gpu_uuid_gets_the_same_kind_of_hint():
    with pytest.raises(RequestError, match=f"no GPU has this UUID .*did you mean {HOST[1].uuid}"):
        _seen(HOST[1].uuid.upper())
