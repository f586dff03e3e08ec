"""fakegpu-container-runtime as a real process on fake bundles with a mock runc (nvidia-container-toolkit style)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hook.conftest import DATA, HOOK_PATH, MOCK_BIN, NATIVE_DIR, run_runtime, runc_calls

DOCKER_GLOBAL = ["--root", "/var/run/docker/runtime-runc/moby", "--log", "LOG", "--log-format", "json"]


def create_args(bundle: Path, log: Path) -> list[str]:
    glob = [str(log) if a == "LOG" else a for a in DOCKER_GLOBAL]
    return [*glob, "create", "--bundle", str(bundle), "--pid-file", str(bundle / "init.pid"), "ctr-1"]


def test_gpu_bundle_gets_the_hook_golden(bundle, runtime_env, tmp_path):
    b = bundle("gpu")
    result = run_runtime(create_args(b, tmp_path / "log.json"), runtime_env)
    assert result.returncode == 0, result.stderr
    got = json.loads((b / "config.json").read_text())
    expected = json.loads((DATA / "bundles" / "gpu" / "expected.json").read_text())
    expected["hooks"]["createContainer"][0]["args"][6] = runtime_env["FAKEGPU_STATE_ROOT"]
    assert got == expected
    hook = got["hooks"]["createContainer"][0]
    assert hook["path"] == HOOK_PATH and NATIVE_DIR in hook["args"]
    assert not any(e.startswith(("LD_", "PYTHON")) for e in hook["env"])
    calls = runc_calls(runtime_env)
    assert len(calls) == 1 and calls[0][0].endswith("runc") and calls[0][1:] == create_args(b, tmp_path / "log.json")


@pytest.mark.parametrize("case", ["plain", "void", "nvidia"])
def test_bundle_that_asks_for_nothing_is_byte_identical(case, bundle, runtime_env, tmp_path):
    b = bundle(case)
    before = (b / "config.json").read_bytes()
    result = run_runtime(create_args(b, tmp_path / "log.json"), runtime_env)
    assert result.returncode == 0, result.stderr
    assert (b / "config.json").read_bytes() == before
    assert len(runc_calls(runtime_env)) == 1


def test_nvidia_env_honoured_on_request(bundle, runtime_env, tmp_path):
    b = bundle("nvidia")
    env = {**runtime_env, "FAKEGPU_HONOUR_NVIDIA_ENV": "1"}
    assert run_runtime(create_args(b, tmp_path / "log.json"), env).returncode == 0
    hook = json.loads((b / "config.json").read_text())["hooks"]["createContainer"][0]
    assert "--honour-nvidia-env" in hook["args"]


def test_bad_spec_fails_naming_the_part_and_leaves_config(bundle, runtime_env, tmp_path):
    b = bundle("bad-spec")
    before = (b / "config.json").read_bytes()
    log = tmp_path / "log.json"
    result = run_runtime(create_args(b, log), runtime_env)
    assert result.returncode != 0
    assert "bogus-board" in result.stderr and "FAKEGPU_DEVICES" in result.stderr
    # containerd reports the last JSON error line of --log, as it does for runc's own errors.
    last = json.loads(log.read_text().splitlines()[-1])
    assert last["level"] == "error" and "bogus-board" in last["msg"]
    assert (b / "config.json").read_bytes() == before
    assert runc_calls(runtime_env) == []


@pytest.mark.parametrize("args", [["start", "ctr-1"], ["--root", "/x", "state", "ctr-1"], ["kill", "ctr-1", "9"],
                                  ["--version"], ["--log-format=json", "delete", "--force", "ctr-1"]])
def test_other_commands_pass_through_unchanged(args, runtime_env):
    result = run_runtime(args, runtime_env)
    assert result.returncode == 0, result.stderr
    assert runc_calls(runtime_env) == [[str(MOCK_BIN / "runc"), *args]]


def test_bundle_defaults_to_cwd(bundle, runtime_env):
    b = bundle("gpu")
    assert run_runtime(["create", "ctr-1"], runtime_env, cwd=b).returncode == 0
    assert "createContainer" in json.loads((b / "config.json").read_text())["hooks"]


def test_delete_removes_the_container_state_folder(runtime_env):
    folder = Path(runtime_env["FAKEGPU_STATE_ROOT"]) / "ctr-1"
    folder.mkdir(parents=True)
    (folder / "devices.tbl").write_text("x")
    assert run_runtime(["delete", "ctr-1"], runtime_env).returncode == 0
    assert not folder.exists()


def test_prestart_stage_joins_the_mount_namespace(bundle, runtime_env, tmp_path):
    b = bundle("gpu")
    env = {**runtime_env, "FAKEGPU_HOOK_STAGE": "prestart"}
    assert run_runtime(create_args(b, tmp_path / "l"), env).returncode == 0
    hooks = json.loads((b / "config.json").read_text())["hooks"]
    assert hooks["prestart"][0]["path"] == "/usr/bin/docker-proxy-hook"
    assert "--join-mount-ns" in hooks["prestart"][1]["args"]


def test_invalid_config_json_fails_clearly(bundle, runtime_env, tmp_path):
    b = bundle("gpu")
    (b / "config.json").write_text("{not json")
    result = run_runtime(create_args(b, tmp_path / "l"), runtime_env)
    assert result.returncode == 1 and "not valid JSON" in result.stderr


def test_missing_low_level_runtime(runtime_env):
    result = run_runtime(["start", "x"], {**runtime_env, "FAKEGPU_LOW_LEVEL_RUNTIME": "no-such-runc"})
    assert result.returncode == 127 and "no-such-runc" in result.stderr


def test_retried_create_adds_the_hook_once(bundle, runtime_env, tmp_path):
    b = bundle("gpu")
    for _ in range(2):
        assert run_runtime(create_args(b, tmp_path / "l"), runtime_env).returncode == 0
    assert len(json.loads((b / "config.json").read_text())["hooks"]["createContainer"]) == 1
