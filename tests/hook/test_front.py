"""The sh fronts `fakegpu runtime install` registers: same subcommand rule as the Python runtime, runc exec'd
with no Python for everything but create, the delete cleanup done in sh, configuration read or deferred."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from fakegpu_hook import front
from fakegpu_hook.runtime import find_command

from tests.hook.conftest import MOCK_BIN


@pytest.fixture
def fronts(tmp_path):
    """Fronts whose 'python' is a stand-in that records its arguments, so a test sees which path ran."""
    fake_python = tmp_path / "python"
    fake_python.write_text('#!/bin/sh\nprintf "PYTHON" >> "$MOCK_RUNC_LOG"\n'
                           'for a in "$@"; do printf "\\t%s" "$a" >> "$MOCK_RUNC_LOG"; done\n'
                           'printf "\\n" >> "$MOCK_RUNC_LOG"\n')
    fake_python.chmod(0o755)
    files = front.front_files(str(tmp_path / "front"), python=str(fake_python), pypath=["/nowhere"])
    front.write_fronts(files)
    return tmp_path / "front"


@pytest.fixture
def env(tmp_path):
    return {"PATH": f"{MOCK_BIN}:/usr/bin:/bin", "MOCK_RUNC_LOG": str(tmp_path / "calls.log"),
            "FAKEGPU_CONFIG": str(tmp_path / "config.json"), "FAKEGPU_STATE_ROOT": str(tmp_path / "state")}


def call(fronts: Path, args: list[str], env: dict[str, str]) -> list[list[str]]:
    result = subprocess.run([str(fronts / front.RUNTIME_FRONT), *args], capture_output=True, text=True, env=env,
                            timeout=30)
    assert result.returncode == 0, result.stderr
    log = Path(env["MOCK_RUNC_LOG"])
    calls = [line.split("\t") for line in log.read_text().splitlines()]
    log.unlink()
    return calls


ARGVS = [
    ["create", "--bundle", "/b", "id"],
    ["--root", "/run/docker/runtime-runc/moby", "--log", "/l.json", "--log-format", "json", "create", "id"],
    ["--root=/r", "--log-format=json", "--systemd-cgroup", "create", "--bundle", "/b", "id"],
    ["-root", "create", "start", "id"],          # a value that looks like a command is a value
    ["--rootless", "false", "--debug", "create", "id"],
    ["--cgroup-manager", "systemd", "create", "id"],
    ["--criu", "/usr/sbin/criu", "start", "id"],
    ["--log", "create", "state", "id"],
    ["--", "create", "id"],
    ["start", "create"],
    ["state", "id"],
    ["kill", "id", "9"],
    ["--version"],
    ["features"],
    [],
]


@pytest.mark.parametrize("argv", ARGVS, ids=[" ".join(a) or "(none)" for a in ARGVS])
def test_the_front_and_the_python_runtime_find_the_same_command(argv, fronts, env):
    _, command = find_command(argv)
    calls = call(fronts, argv, env)
    assert len(calls) == 1
    if command == "create":
        assert calls[0][:4] == ["PYTHON", "-I", "-S", "-c"] and calls[0][5:] == argv
        assert "fakegpu_hook.runtime" in calls[0][4] and "/nowhere" in calls[0][4]
    else:
        assert calls[0] == [str(MOCK_BIN / "runc"), *argv]


def test_delete_removes_the_state_folder_in_sh(fronts, env):
    state = Path(env["FAKEGPU_STATE_ROOT"])
    (state / "ctr-1").mkdir(parents=True)
    (state / "ctr-1" / "devices.tbl").write_text("x")
    (state / "keep").mkdir()
    outside = state.parent / "outside"
    outside.mkdir()
    (state / "ctr-1" / "link").symlink_to(outside)
    assert call(fronts, ["--root", "/r", "delete", "--force", "ctr-1"], env) == [
        [str(MOCK_BIN / "runc"), "--root", "/r", "delete", "--force", "ctr-1"]]
    assert not (state / "ctr-1").exists() and (state / "keep").is_dir() and outside.is_dir()
    for bad in ("..", ".", "../keep", "-f"):
        call(fronts, ["delete", bad], env)
    assert (state / "keep").is_dir() and state.is_dir()


def test_environment_and_config_choose_the_low_level_runtime(fronts, env, tmp_path):
    crun = tmp_path / "bin" / "crun"
    crun.parent.mkdir()
    crun.write_bytes((MOCK_BIN / "runc").read_bytes())
    crun.chmod(0o755)
    assert call(fronts, ["start", "x"], {**env, "FAKEGPU_LOW_LEVEL_RUNTIME": str(crun)})[0][0] == str(crun)
    config = Path(env["FAKEGPU_CONFIG"])
    config.write_text(json.dumps({"low_level_runtime": str(crun), "nvidia_profile": "h100"}, indent=2))
    assert call(fronts, ["start", "x"], env)[0][0] == str(crun)
    # A value sh cannot read safely (an escape) goes to Python, which reads JSON properly.
    config.write_text(json.dumps({"low_level_runtime": str(crun) + '"x'}))
    assert call(fronts, ["start", "x"], env)[0][0] == "PYTHON"
    # A config that sets neither key leaves the pass-through in sh.
    config.write_text(json.dumps({"nvidia_profile": "h100"}))
    assert call(fronts, ["start", "x"], env)[0][0] == str(MOCK_BIN / "runc")


def test_state_root_from_the_config(fronts, env, tmp_path):
    other = tmp_path / "other-root"
    (other / "c1").mkdir(parents=True)
    Path(env["FAKEGPU_CONFIG"]).write_text(json.dumps({"state_root": str(other)}))
    env = {k: v for k, v in env.items() if k != "FAKEGPU_STATE_ROOT"}
    call(fronts, ["delete", "c1"], env)
    assert not (other / "c1").exists()


def test_fronts_are_rewritten_only_when_changed(tmp_path):
    files = front.front_files(str(tmp_path / "f"), python="/usr/bin/python3", pypath=["/a b/'q'"])
    assert sorted(front.write_fronts(files)) == sorted(files)
    assert front.write_fronts(files) == []
    for path, text in files.items():
        assert os.access(path, os.X_OK) and Path(path).read_text() == text
        assert subprocess.run(["sh", "-n", path]).returncode == 0
    hook = Path(tmp_path / "f" / front.HOOK_FRONT).read_text()
    assert "fakegpu_hook.hook" in hook and "-I -S" in hook
    assert front.remove_fronts(str(tmp_path / "f")) and not (tmp_path / "f").exists()


def test_real_front_runs_the_python_runtime_isolated(tmp_path, bundle):
    """With the real interpreter: create rewrites config.json, and the hook it adds is the sibling hook front."""
    files = front.front_files(str(tmp_path / "front"))
    front.write_fronts(files)
    b = bundle("gpu")
    env = {"PATH": f"{MOCK_BIN}:/usr/bin:/bin", "MOCK_RUNC_LOG": str(tmp_path / "calls.log"),
           "FAKEGPU_CONFIG": str(tmp_path / "none.json"), "PYTHONPATH": "/evil", "FAKEGPU_NATIVE_DIR": "/opt/x",
           "FAKEGPU_STATE_ROOT": str(tmp_path / "state"), "FAKEGPU_INJECTION": "hook"}
    result = subprocess.run([str(tmp_path / "front" / front.RUNTIME_FRONT), "create", "--bundle", str(b), "ctr-1"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    hook = json.loads((b / "config.json").read_text())["hooks"]["createContainer"][0]
    assert hook["path"] == str(tmp_path / "front" / front.HOOK_FRONT)


def test_create_goes_to_the_c_binary_when_built_else_to_python(tmp_path, env):
    """The C fast path gets create with everything it needs to hand over to Python; an unbuilt (or unset)
    binary means Python directly."""
    fake_python = tmp_path / "python"
    fake_python.write_text('#!/bin/sh\nprintf "PYTHON\\n" >> "$MOCK_RUNC_LOG"\n')
    fake_python.chmod(0o755)
    create = tmp_path / "fakegpu-create"
    create.write_text('#!/bin/sh\nprintf "CREATE" >> "$MOCK_RUNC_LOG"\n'
                      'for a in "$@"; do printf "\\t%s" "$a" >> "$MOCK_RUNC_LOG"; done\n'
                      'printf "\\n" >> "$MOCK_RUNC_LOG"\n')
    create.chmod(0o755)
    argv = ["--root", "/r", "create", "--bundle", "/b", "id"]
    paths = front.CreatePaths(str(create), "/native lib", "/cat.tbl")
    for name, create_paths, expected in [
        ("built", paths, "CREATE"),
        ("unbuilt", front.CreatePaths(str(tmp_path / "missing"), "/n", "/c"), "PYTHON"),
        ("none", front.NO_CREATE, "PYTHON"),
    ]:
        files = front.front_files(str(tmp_path / name), python=str(fake_python), pypath=["/nowhere"],
                                  create=create_paths)
        front.write_fronts(files)
        calls = call(tmp_path / name, argv, env)
        assert [c[0] for c in calls] == [expected]
        if expected == "CREATE":
            c = calls[0]
            assert c[c.index("--") + 1:] == argv
            assert c[1:c.index("--")] == ["--python", str(fake_python), "--pycode", c[4], "--native-default",
                                          "/native lib", "--catalog", "/cat.tbl"]
            assert "fakegpu_hook.runtime" in c[4]
    # Other commands never reach it.
    assert call(tmp_path / "built", ["start", "id"], env)[0][0] == str(MOCK_BIN / "runc")


def test_installed_front_points_at_this_checkouts_binary():
    paths = front.CreatePaths.of_checkout()
    assert paths.binary.endswith("native/build/bin/fakegpu-create")
    assert paths.catalog.endswith("fakegpu/data/catalog.tbl") and os.path.isfile(paths.catalog)
    text = front.render_runtime_front("/usr/bin/python3", "/f/fakegpu-container-runtime", ["/p"], paths)
    assert f"CREATE={paths.binary}" in text and subprocess.run(["sh", "-n", "-c", text]).returncode == 0
