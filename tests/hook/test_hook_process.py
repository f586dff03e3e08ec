"""fakegpu-hook as a real process on a fake root, inside a private mount namespace (unshare), so its mounts
can be checked and vanish with it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hook.conftest import DATA, hook_sandbox

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="bind mounts need root and unshare(1)")
HOOK = str(Path(sys.executable).with_name("fakegpu-hook"))


@pytest.fixture
def setup(tmp_path):
    bundle, native = hook_sandbox(tmp_path)
    # The hook never mounts the state root itself (it runs in the container's mount namespace): the runtime, or
    # the user, makes it a nosuid,nodev,noexec filesystem first (statedir.py).
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "nosuid,nodev,noexec,mode=0700", "tmpfs", str(state)], check=True)
    return bundle, native, state


def run_hook(bundle, native, state, env_list, probe):
    config = json.loads((DATA / "bundles" / "gpu" / "config.json").read_text())
    config["process"]["env"] = env_list
    (bundle / "config.json").write_text(json.dumps(config))
    state_json = json.dumps({"ociVersion": "1.0.2", "id": "ctr-1", "pid": 1, "bundle": str(bundle),
                             "status": "creating"})
    args = [HOOK, "--native-dir", str(native / "lib"), "--nvidia-smi", str(native / "bin" / "nvidia-smi"),
            "--state-root", str(state)]
    script = f'{" ".join(args)} && {probe}'
    env = {"PATH": os.environ["PATH"]}
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          input=state_json, capture_output=True, text=True, env=env, timeout=60)


def test_hook_injects_into_the_root(setup):
    bundle, native, state = setup
    root = bundle / "rootfs"
    probe = (f"cat {root}/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 {root}/run/fakegpu/devices.tbl; "
             f"ls -l {root}/dev; grep ' {root}' /proc/self/mountinfo")
    result = run_hook(bundle, native, state, ["FAKEGPU_DEVICES=a100:3"], probe)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "fake nvml" in out and "count=3" in out
    for name in ("nvidia0", "nvidia2", "nvidiactl", "nvidia-uvm"):
        assert name in out
    mounts = [line for line in out.splitlines() if str(root) in line and " - " in line]
    assert len(mounts) == 5  # /run/fakegpu, nvml, nvidia-smi, devices.tbl, catalog.tbl
    assert all("nosuid" in m and "nodev" in m for m in mounts)
    assert sum(" ro," in m for m in mounts) == 4
    assert (state / "ctr-1" / "devices.tbl").is_file() and "seed='0'" in (state / "ctr-1" / "hook.log").read_text()
    # Outside the private namespace nothing stays mounted; the link made for clients stays in the root.
    assert str(root) not in Path("/proc/self/mountinfo").read_text()
    assert os.readlink(root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so") == "libnvidia-ml.so.1"


def test_hook_ignores_loader_variables(setup):
    bundle, native, state = setup
    # The image's LD_PRELOAD lives in config.json; had it reached the hook, ld.so would complain about it.
    result = run_hook(bundle, native, state, ["FAKEGPU_DEVICES=a100", "LD_PRELOAD=/nonexistent/evil.so"], "true")
    assert result.returncode == 0, result.stderr
    assert "evil" not in result.stderr


def test_hook_failure_leaves_nothing_behind(setup):
    bundle, native, state = setup
    root = bundle / "rootfs"
    (root / "run").write_text("a file where /run should be a folder")
    result = run_hook(bundle, native, state, ["FAKEGPU_DEVICES=a100:2"], "echo unreachable")
    assert result.returncode == 1
    assert result.stderr.startswith("fakegpu-hook: ") and "not a directory" in result.stderr
    assert not (state / "ctr-1").exists()


def test_hook_without_request_does_nothing(setup):
    bundle, native, state = setup
    result = run_hook(bundle, native, state, ["FAKEGPU_DEVICES=void"], f"grep -c ' {bundle}' /proc/self/mountinfo")
    assert result.stdout.strip() == "0"


def test_prepared_table_spares_a_second_resolution(setup):
    """With --prepared the hook takes the runtime's table when it matches the container's request."""
    from fakegpu.devices import resolve_devices
    from fakegpu.devices.table import write_table

    bundle, native, state = setup
    (state / "ctr-1" / "state").mkdir(parents=True)
    write_table(state / "ctr-1" / "devices.tbl", resolve_devices("a100:3", seed="0"), "a100:3", "0")
    config = json.loads((DATA / "bundles" / "gpu" / "config.json").read_text())
    config["process"]["env"] = ["FAKEGPU_DEVICES=a100:3"]
    (bundle / "config.json").write_text(json.dumps(config))
    state_json = json.dumps({"id": "ctr-1", "pid": 1, "bundle": str(bundle), "status": "creating"})
    script = (f"{HOOK} --native-dir {native / 'lib'} --nvidia-smi {native / 'bin' / 'nvidia-smi'} "
              f"--state-root {state} --prepared && ls {bundle / 'rootfs' / 'dev'}")
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                            input=state_json, capture_output=True, text=True, env={"PATH": os.environ["PATH"]},
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert "nvidia2" in result.stdout and "nvidia3" not in result.stdout
    assert "(table by the runtime)" in (state / "ctr-1" / "hook.log").read_text()


def _poststop(state, state_json: dict, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HOOK, "--state-root", str(state), *flags], input=json.dumps(state_json),
                          capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, timeout=60)


@pytest.mark.parametrize("how", ["flag", "status"])
def test_poststop_removes_the_containers_folder_and_nothing_else(setup, tmp_path, how):
    """The CDI spec's poststop hook passes --poststop; a hooks.d file runs the same arguments at every stage, so
    there the OCI state's status ("stopped") tells the stage. A link the container left in its shared state/
    folder is removed, never followed; another container's folder stays."""
    bundle, native, state = setup
    result = run_hook(bundle, native, state, ["FAKEGPU_DEVICES=a100:1"], "true")
    assert result.returncode == 0, result.stderr
    outside = tmp_path / "host-file"
    outside.write_text("host data")
    (state / "ctr-1" / "state" / "planted").symlink_to(tmp_path)
    (state / "ctr-2").mkdir()
    # runc's and crun's poststop state: no pid; the bundle may be absent. With the flag the status is not read.
    flags, extra = (["--poststop"], {}) if how == "flag" else ([], {"status": "stopped"})
    result = _poststop(state, {"ociVersion": "1.0.2", "id": "ctr-1", **extra}, *flags)
    assert result.returncode == 0, result.stderr
    assert not (state / "ctr-1").exists() and (state / "ctr-2").is_dir()
    assert outside.read_text() == "host data"
    # a second call (the runtime's own delete came first) finds nothing and is content
    assert _poststop(state, {"id": "ctr-1", "status": "stopped"}, "--poststop").returncode == 0


def test_poststop_refuses_an_id_that_names_no_folder_of_its_own(setup):
    _, _, state = setup
    (state / "keep").mkdir()
    result = _poststop(state / "keep", {"id": "..", "status": "stopped"}, "--poststop")
    assert result.returncode == 1 and "cannot name a folder" in result.stderr
    assert (state / "keep").is_dir()
