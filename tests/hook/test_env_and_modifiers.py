"""The container-env parser (the one reader of FAKEGPU_/NVIDIA_ variables), modifiers on in-memory specs, and
settings."""

from __future__ import annotations

import json

import pytest
from fakegpu_hook.env import device_request
from fakegpu_hook.modifiers import AddHook, ModifierList, SetEnv
from fakegpu_hook.oci import Spec, SpecError, read_state
from fakegpu_hook.settings import SettingsError, load_settings


@pytest.mark.parametrize(("env", "honour", "expected"), [
    ([], False, None),
    (["FAKEGPU_DEVICES="], False, None),
    (["FAKEGPU_DEVICES=void"], False, None),
    (["FAKEGPU_DEVICES=NONE"], False, None),
    (["FAKEGPU_DEVICES=a100:4"], False, ("a100:4", None, "FAKEGPU_DEVICES")),
    (["FAKEGPU_DEVICES=h100:2,l4", "FAKEGPU_SEED=3"], False, ("h100:2,l4", "3", "FAKEGPU_DEVICES")),
    (["FAKEGPU_DEVICES=a100", "FAKEGPU_DEVICES=t4"], False, ("t4", None, "FAKEGPU_DEVICES")),  # runc: the last
    (["NVIDIA_VISIBLE_DEVICES=all"], False, None),
    (["NVIDIA_VISIBLE_DEVICES=all"], True, ("a100:1", None, "NVIDIA_VISIBLE_DEVICES")),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=0,1,2"], True, ("a100:3", None, "NVIDIA_VISIBLE_DEVICES")),
    (["FAKEGPU_DEVICES=a100:1", "FAKEGPU_DEVICES=void"], False, None),  # a later off value turns it off
    (["NVIDIA_VISIBLE_DEVICES=0,1,2"], True, ("a100:3", None, "NVIDIA_VISIBLE_DEVICES")),
    (["NVIDIA_VISIBLE_DEVICES=void"], True, None),
    (["NVIDIA_VISIBLE_DEVICES="], True, None),
    (["FAKEGPU_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=all"], True, None),  # ours decides when present
    (["FAKEGPU_DEVICES=t4", "NVIDIA_VISIBLE_DEVICES=all"], True, ("t4", None, "FAKEGPU_DEVICES")),
    (["XFAKEGPU_DEVICES=a100"], False, None),
])
def test_device_request(env, honour, expected):
    req = device_request(env, honour_nvidia=honour)
    assert (None if req is None else (req.spec, req.seed, req.source)) == expected


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
