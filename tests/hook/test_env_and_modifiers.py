"""The container-env parser (the one reader of FAKEGPU_/NVIDIA_ variables), modifiers on in-memory specs, and
settings."""

from __future__ import annotations

import json
import re

import pytest
from fakegpu_hook.contract import DRIVER_CAPABILITIES
from fakegpu_hook.env import RequestError, device_request, resolve_request
from fakegpu_hook.modifiers import AddHook, ModifierList, SetEnv
from fakegpu_hook.oci import Spec, SpecError, read_state
from fakegpu_hook.settings import SettingsError, load_settings

from fakegpu.devices import resolve_devices


@pytest.mark.parametrize(("env", "honour", "expected"), [
    ([], True, None),
    (["FAKEGPU_DEVICES="], True, None),
    (["FAKEGPU_DEVICES=void"], True, None),
    (["FAKEGPU_DEVICES=NONE"], True, None),
    (["FAKEGPU_DEVICES=a100:4"], True, ("a100:4", None, "FAKEGPU_DEVICES")),
    (["FAKEGPU_DEVICES=h100:2,l4", "FAKEGPU_SEED=3"], True, ("h100:2,l4", "3", "FAKEGPU_DEVICES")),
    (["FAKEGPU_DEVICES=a100", "FAKEGPU_DEVICES=t4"], True, ("t4", None, "FAKEGPU_DEVICES")),  # runc: the last
    (["FAKEGPU_DEVICES=a100:1", "FAKEGPU_DEVICES=void"], True, None),  # a later off value turns it off
    (["NVIDIA_VISIBLE_DEVICES=all"], False, None),  # honour_nvidia_env off: only FAKEGPU_DEVICES asks
    (["NVIDIA_VISIBLE_DEVICES=all"], True, ("h100:8", None, "NVIDIA_VISIBLE_DEVICES")),  # the inventory
    (["NVIDIA_VISIBLE_DEVICES=void"], True, None),
    (["NVIDIA_VISIBLE_DEVICES="], True, None),
    (["NVIDIA_VISIBLE_DEVICES= , ,"], True, None),  # no entry at all: as unset
    (["FAKEGPU_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=all"], True, None),  # ours decides when present
    (["FAKEGPU_DEVICES=t4", "NVIDIA_VISIBLE_DEVICES=all"], True, ("t4", None, "FAKEGPU_DEVICES")),
    (["XFAKEGPU_DEVICES=a100"], True, None),
    (["XNVIDIA_VISIBLE_DEVICES=all"], True, None),
])
def test_device_request(env, honour, expected):
    req = device_request(env, honour_nvidia=honour, inventory="h100:8")
    assert (None if req is None else (req.spec, req.seed, req.source)) == expected


@pytest.mark.parametrize(("value", "visible"), [
    ("all", None),
    ("0,2", ("0", "2")),
    (" 2 , 0 ,,", ("2", "0")),  # trimmed, empty entries dropped; the order is select_devices' business
    ("GPU-abc,1", ("GPU-abc", "1")),
    ("none", ()),
    ("0,all", None),
    ("all,none", ()),  # none before all
    ("none,void", None),  # void before both: no request at all
    ("0,void", None),
    ("ALL", ("ALL",)),  # case kept, as NVIDIA's runtime reads it: an entry that names no GPU
])
def test_visible_devices_as_nvidia_container_toolkit_reads_them(value, visible):
    req = device_request([f"NVIDIA_VISIBLE_DEVICES={value}"], inventory="a100:4")
    if "void" in value:
        assert req is None
    else:
        assert req is not None and req.visible == visible and req.spec == "a100:4"


def test_the_last_nvidia_variable_wins():
    env = ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=utility", "NVIDIA_VISIBLE_DEVICES=1",
           "NVIDIA_DRIVER_CAPABILITIES=compute"]
    req = device_request(env, inventory="a100:4")
    assert req.visible == ("1",) and req.capabilities == {"compute"}
    assert device_request([*env, "NVIDIA_VISIBLE_DEVICES=void"], inventory="a100:4") is None


@pytest.mark.parametrize(("env", "capabilities"), [
    ([], {"utility", "compute"}),  # nvidia-container-toolkit's default when unset
    (["NVIDIA_DRIVER_CAPABILITIES="], {"utility", "compute"}),  # empty: the default too
    (["NVIDIA_DRIVER_CAPABILITIES=utility"], {"utility"}),
    (["NVIDIA_DRIVER_CAPABILITIES=compute, utility"], {"utility", "compute"}),
    (["NVIDIA_DRIVER_CAPABILITIES=video"], {"video"}),
    (["NVIDIA_DRIVER_CAPABILITIES=utility,all"], set(DRIVER_CAPABILITIES)),
    (["CUDA_VERSION=9.0"], set(DRIVER_CAPABILITIES)),  # a legacy image that leaves it unset: all
    (["CUDA_VERSION=9.0", "NVIDIA_DRIVER_CAPABILITIES=utility"], {"utility"}),
    (["CUDA_VERSION=12.4", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"], {"utility", "compute"}),
])
def test_driver_capabilities(env, capabilities):
    req = device_request(["NVIDIA_VISIBLE_DEVICES=all", *env])
    assert set(req.capabilities) == capabilities


def test_fakegpu_devices_gets_every_library_whatever_nvidia_capabilities_say():
    req = device_request(["FAKEGPU_DEVICES=a100", "NVIDIA_DRIVER_CAPABILITIES=bogus"])
    assert req.visible is None and set(req.capabilities) == set(DRIVER_CAPABILITIES)


@pytest.mark.parametrize(("env", "expected"), [
    (["CUDA_VERSION=9.0"], ("a100:1", None)),  # legacy CUDA image, NVIDIA_VISIBLE_DEVICES unset: all
    (["CUDA_VERSION=12.4", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"], None),  # a current CUDA image sets it itself
    (["CUDA_VERSION="], None),
    (["CUDA_VERSION=9.0", "NVIDIA_VISIBLE_DEVICES=void"], None),
])
def test_legacy_cuda_images(env, expected):
    req = device_request(env)
    assert (None if req is None else (req.spec, req.visible)) == expected


@pytest.mark.parametrize(("env", "message"), [
    (["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,gpu"], "unknown capability 'gpu'"),
    (["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=Utility"], "unknown capability 'Utility'"),
    (["NVIDIA_VISIBLE_DEVICES=" + "0," * 3000], "NVIDIA_VISIBLE_DEVICES is 6000 bytes long; at most 4096"),
    (["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=" + "x" * 300], "at most 256"),
])
def test_bad_nvidia_variables_are_refused_by_name(env, message):
    with pytest.raises(RequestError, match=re.escape(message)) as info:
        device_request(env)
    assert len(str(info.value)) < 300  # never the value itself


INVENTORY = resolve_devices("a100:4", seed="0")


@pytest.mark.parametrize(("value", "host"), [
    ("all", [0, 1, 2, 3]),
    ("0,2", [0, 2]),
    ("2,0", [0, 2]),  # host order, whatever order they are named in
    ("2,2,0,02", [0, 2]),  # named twice: once
    (f"{INVENTORY[3].uuid},1", [1, 3]),  # UUIDs and indices mixed
    (INVENTORY[2].uuid, [2]),
    ("none", []),
])
def test_selection_keeps_the_hosts_identities(value, host):
    req = device_request([f"NVIDIA_VISIBLE_DEVICES={value}"], inventory="a100:4")
    got = resolve_request(req, "0")
    assert [d.index for d in got] == list(range(len(host)))  # renumbered from 0, as NVML in the container
    for d, h in zip(got, host, strict=True):
        assert (d.uuid, d.serial, d.pci_bus_id, d.minor_number) == (
            INVENTORY[h].uuid, INVENTORY[h].serial, INVENTORY[h].pci_bus_id, h)


def test_a_container_seed_gives_the_inventory_other_identities():
    req = device_request(["NVIDIA_VISIBLE_DEVICES=1", "FAKEGPU_SEED=node-1"], inventory="a100:4")
    assert resolve_request(req, "node-1")[0].uuid == resolve_devices("a100:4", seed="node-1")[1].uuid


@pytest.mark.parametrize(("value", "reason"), [
    ("4", "no GPU has this index (they are 0..3)"),
    ("0,9", "device '9'"),
    ("99999999999999999999", "no GPU has this index"),
    ("GPU-00000000-0000-0000-0000-000000000000", "no GPU has this UUID"),
    (INVENTORY[1].uuid[:20], "no GPU has this UUID (a UUID is matched whole)"),  # prefixes are not enough
    (INVENTORY[1].uuid.upper(), "no GPU has this UUID"),
    ("MIG-0c1c0d9c-dd6b-5d85-9d0d-2e3e4b7e7d0e", "no MIG device has this UUID"),
    ("0:1", "GPU 0 is not in MIG mode"),
    ("ALL", "neither a GPU index, a GPU UUID nor a MIG device"),
    ("-1", "neither a GPU index, a GPU UUID nor a MIG device"),
])
def test_an_entry_that_names_no_gpu_is_refused_naming_it_and_the_inventory(value, reason):
    req = device_request([f"NVIDIA_VISIBLE_DEVICES={value}"], inventory="a100:4")
    with pytest.raises(RequestError) as info:
        resolve_request(req, "0")
    message = str(info.value)
    assert message.startswith("NVIDIA_VISIBLE_DEVICES: device ") and reason in message
    assert "the host's inventory 'a100:4' holds 4 GPUs: 0 " + INVENTORY[0].uuid in message
    assert "Accepted: all, none, void" in message


def test_a_big_inventory_is_named_in_short():
    req = device_request(["NVIDIA_VISIBLE_DEVICES=64"], inventory="a100:64")
    with pytest.raises(RequestError, match=r"holds 64 GPUs: .*, and 56 more\.") as info:
        resolve_request(req, "0")
    assert len(str(info.value)) < 700


def test_a_bad_inventory_is_named_as_the_hosts():
    req = device_request(["NVIDIA_VISIBLE_DEVICES=all"], inventory="a10O:8")
    with pytest.raises(RequestError, match=r"^the inventory \(setting inventory\): invalid device spec.*a100"):
        resolve_request(req, "0")


def test_modifier_list_in_memory():
    spec = Spec({"process": {"env": ["A=1"]}})
    ModifierList([AddHook("/h", ["--x"]), SetEnv("FAKEGPU_DEVICE_TABLE", "/t"), SetEnv("A", "2")]).modify(spec)
    assert spec.data["hooks"]["createContainer"] == [
        {"path": "/h", "args": ["/h", "--x"], "env": list(AddHook.ENV), "timeout": 30}]
    assert spec.data["process"]["env"] == ["A=1", "FAKEGPU_DEVICE_TABLE=/t"]


def test_spec_load_is_strict(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(SpecError, match="not a JSON object"):
        Spec.load(tmp_path / "config.json")
    with pytest.raises(SpecError, match="cannot read"):
        Spec.load(tmp_path / "missing.json")
    with pytest.raises(SpecError, match=r"process\.env"):
        _ = Spec({"process": {"env": "A=1"}}).env


def test_flush_is_atomic_and_keeps_mode(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{}")
    path.chmod(0o600)
    spec = Spec.load(path)
    spec.data["x"] = 1
    spec.flush()
    assert json.loads(path.read_text()) == {"x": 1}
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


@pytest.mark.parametrize(("text", "message"), [("nope", "not JSON"), ("{}", "no 'id'"),
                                               ('{"id": "../x", "bundle": "/b"}', "cannot name a folder")])
def test_read_state_rejects(text, message):
    with pytest.raises(SpecError, match=message):
        read_state(text)


def test_settings_file_then_env(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"low_level_runtime": "crun", "honour_nvidia_env": True}))
    s = load_settings({"FAKEGPU_CONFIG": str(cfg), "FAKEGPU_LOW_LEVEL_RUNTIME": "/usr/bin/runc"})
    assert s.low_level_runtime == "/usr/bin/runc" and s.honour_nvidia_env is True
    assert load_settings({"FAKEGPU_CONFIG": str(tmp_path / "none")}).low_level_runtime == "runc"
    cfg.write_text(json.dumps({"typo": 1}))
    with pytest.raises(SettingsError, match="unknown keys"):
        load_settings({"FAKEGPU_CONFIG": str(cfg)})
    with pytest.raises(SettingsError, match="hook_stage"):
        load_settings({"FAKEGPU_CONFIG": str(tmp_path / "none"), "FAKEGPU_HOOK_STAGE": "poststop"})
