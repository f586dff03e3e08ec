"""Our hook under NVIDIA's name, as dockerd runs it for `docker run --gpus`: `nvidia-container-runtime-hook
prestart`, OCI state on stdin, in the host's mount namespace. Each case runs in a private mount namespace of its
own (the "host") with a sleeping process in a further one (the "container"), so the hook's setns, its mounts
and its cleanup are real, and all of it vanishes with the processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from fakegpu_hook import front, hook, statedir

from fakegpu.devices import DEFAULT_SEED, resolve_devices
from tests.hook.conftest import DATA, hook_sandbox

needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="mount namespaces need root and unshare(1)")
INVENTORY = "a100:3"
UUIDS = [d.uuid for d in resolve_devices(INVENTORY, seed=DEFAULT_SEED)]

# $1: the hook; $2: the state JSON with PID for the container's pid; $3: the root; $4: the output folder; $5: the
# state root, made a tmpfs holding $4/seed first when there is one (else the hook mounts it). Either way the tmpfs
# comes after the container's namespace, as the hook's own does at a first start, so it has to be carried there.
SCENARIO = r"""
unshare --mount --propagation private sleep 60 &
C=$!
while [ "$(readlink /proc/$C/ns/mnt)" = "$(readlink /proc/self/ns/mnt)" ]; do sleep 0.02; done
if [ -d "$4/seed" ]; then
    mkdir -p "$5" && mount -t tmpfs -o nosuid,nodev,noexec,mode=0700 tmpfs "$5" && cp -a "$4/seed/." "$5/"
fi
printf '%s' "$2" | sed "s/PID/$C/" | "$1" prestart 2>"$4/stderr"
echo $? > "$4/rc"
grep " $3" /proc/$C/mountinfo | cut -d' ' -f5 > "$4/container-mounts"
grep " $3" /proc/self/mountinfo | cut -d' ' -f5 > "$4/host-mounts"
cat "/proc/$C/root$3/run/fakegpu/devices.tbl" > "$4/table" 2>/dev/null
ls "/proc/$C/root$3/dev" > "$4/dev"
mkdir "$4/state" && cp -a "$5/." "$4/state/"
kill $C
"""


class Outcome:
    def __init__(self, out: Path) -> None:
        self.rc = int((out / "rc").read_text())
        self.stderr = (out / "stderr").read_text()
        self.container_mounts = (out / "container-mounts").read_text().split()
        self.host_mounts = (out / "host-mounts").read_text().split()
        self.table = (out / "table").read_text()
        self.dev = (out / "dev").read_text().split()
        self.state = out / "state"  # the state root as the hook left it on the "host"


@pytest.fixture
def setup(tmp_path):
    bundle, native = hook_sandbox(tmp_path)
    files = front.nvidia_hook_file(str(tmp_path / "hooks"))
    front.write_fronts(files)
    # As dockerd runs it: in its own environment (the settings come from there), interpreter variables included.
    env = {"PATH": os.environ["PATH"], "FAKEGPU_CONFIG": str(tmp_path / "no-config.json"),
           "FAKEGPU_INVENTORY": INVENTORY, "FAKEGPU_STATE_ROOT": str(tmp_path / "state"),
           "FAKEGPU_NATIVE_DIR": str(native / "lib"), "FAKEGPU_NVIDIA_SMI": str(native / "bin" / "nvidia-smi"),
           "PYTHONPATH": "/nonexistent/evil", "PYTHONSTARTUP": "/nonexistent/evil.py"}
    return bundle, next(iter(files)), env, tmp_path


def run_prestart(setup, env_list: list[str], container_id: str = "ctr-1",
                 seed: dict[str, str] | None = None) -> Outcome:
    """seed: {path in the state root: content} there before the hook runs."""
    bundle, hook_path, env, tmp_path = setup
    config = json.loads((DATA / "bundles" / "gpu" / "config.json").read_text())
    config["process"]["env"] = env_list
    (bundle / "config.json").write_text(json.dumps(config))
    state = json.dumps({"ociVersion": "1.0.2", "id": container_id, "pid": 0, "bundle": str(bundle),
                        "status": "creating"}).replace('"pid": 0', '"pid": PID')
    out = tmp_path / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    for name, text in (seed or {}).items():
        (out / "seed" / name).parent.mkdir(parents=True, exist_ok=True)
        (out / "seed" / name).write_text(text)
    subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", SCENARIO, "sh", hook_path, state,
                    str(bundle / "rootfs"), str(out), env["FAKEGPU_STATE_ROOT"]], env=env, check=True, timeout=120)
    return Outcome(out)


@needs_root
def test_prestart_joins_the_container_and_selects_from_the_inventory(setup):
    bundle = setup[0]
    root = bundle / "rootfs"
    # dockerd appends its variables after the image's: the last occurrence is what the container sees.
    result = run_prestart(setup, ["NVIDIA_VISIBLE_DEVICES=all", "PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0,2"])
    assert result.rc == 0, result.stderr
    assert result.host_mounts == []  # everything went into the container's namespace
    assert sorted(result.container_mounts) == sorted(
        f"{root}{p}" for p in ("/run/fakegpu", "/usr/lib/x86_64-linux-gnu/fakegpu", "/usr/bin/nvidia-smi",
                               "/run/fakegpu/devices.tbl", "/run/fakegpu/catalog.tbl"))
    # Read through the container's namespace: the tmpfs the hook mounted on the "host" after that namespace was
    # made was carried into it.
    assert "count=2" in result.table and UUIDS[0] in result.table and UUIDS[2] in result.table
    assert UUIDS[1] not in result.table
    assert {"nvidia0", "nvidia2", "nvidiactl", "nvidia-uvm"} <= set(result.dev) and "nvidia1" not in result.dev
    host_dir = result.state / "ctr-1"
    log = (host_dir / "hook.log").read_text()
    assert "NVIDIA_VISIBLE_DEVICES='0,2' of the inventory 'a100:3'" in log
    assert (host_dir / statedir.OWNER_NAME).read_text().split()[0].isdigit()
    assert "evil" not in result.stderr and "evil" not in log.partition("\n")[2]


@needs_root
def test_capabilities_come_from_the_variable(setup):
    result = run_prestart(setup, ["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=utility"])
    assert result.rc == 0, result.stderr
    assert "nvidia1" in result.dev and "nvidia-uvm" not in result.dev and UUIDS[1] in result.table


@needs_root
@pytest.mark.parametrize(("env", "message"), [
    (["NVIDIA_VISIBLE_DEVICES=0,3"], "NVIDIA_VISIBLE_DEVICES: device '3': no GPU has this index (they are 0..2)"),
    (["NVIDIA_VISIBLE_DEVICES=GPU-nope"], "NVIDIA_VISIBLE_DEVICES: "),
    (["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=gpu"],
     "NVIDIA_DRIVER_CAPABILITIES: unknown capability 'gpu'"),
])
def test_bad_requests_fail_with_one_line_and_leave_nothing(setup, env, message):
    result = run_prestart(setup, env)
    assert result.rc == 1
    assert result.stderr.startswith("fakegpu-hook: " + message), result.stderr
    assert result.stderr.count("\n") == 1
    assert result.container_mounts == [] and result.host_mounts == []
    assert not (result.state / "ctr-1").exists() and result.state.is_dir()


@needs_root
def test_failure_inside_the_container_unmounts_and_removes_the_host_folder(setup):
    """A folder where a library link goes fails the start after the first mounts: they are undone in the
    container's namespace, and the host folder is removed from the hook's own."""
    bundle = setup[0]
    (bundle / "rootfs" / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").mkdir()
    result = run_prestart(setup, ["NVIDIA_VISIBLE_DEVICES=0"])
    assert result.rc == 1 and result.stderr.startswith("fakegpu-hook: "), result.stderr
    assert result.stderr.count("\n") == 1
    assert result.container_mounts == [] and result.host_mounts == []
    assert not (result.state / "ctr-1").exists() and result.state.is_dir()


@needs_root
def test_no_request_does_nothing(setup):
    result = run_prestart(setup, ["PATH=/bin"])  # `--gpus 0`: dockerd adds the hook but no variable
    assert result.rc == 0, result.stderr
    assert result.container_mounts == [] and result.table == ""


@needs_root
def test_a_container_our_runtime_prepared_is_left_to_it(setup):
    result = run_prestart(setup, ["NVIDIA_VISIBLE_DEVICES=all"],
                          seed={"ctr-1/devices.tbl": "written by the runtime at create\n"})
    assert result.rc == 0, result.stderr
    assert result.container_mounts == []
    assert (result.state / "ctr-1" / "devices.tbl").read_text() == "written by the runtime at create\n"


@needs_root
def test_each_start_sweeps_the_folders_of_stopped_containers(setup):
    # Under plain runc nothing of ours runs at delete: an owner file whose process is gone marks a stopped
    # container; a folder without one is our runtime's, which deletes it itself.
    result = run_prestart(setup, ["NVIDIA_VISIBLE_DEVICES=0"], "second",
                          seed={"first/owner": "999999999 1\n", "first/devices.tbl": "",
                                "runtime-made/devices.tbl": ""})
    assert result.rc == 0, result.stderr
    assert sorted(p.name for p in result.state.iterdir()) == ["runtime-made", "second"]
    assert "removed " in (result.state / "second" / "hook.log").read_text()


@pytest.mark.parametrize("argv", [["poststart"], ["poststop"]])
def test_other_stages_do_nothing(argv):
    assert hook.nvidia_main(argv) == 0


@pytest.mark.parametrize("argv", [[], ["prestart", "--debug"], ["create"]])
def test_other_calls_are_refused(argv, capsys):
    assert hook.nvidia_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("fakegpu-hook (as nvidia-container-runtime-hook): expected the one argument 'prestart'")


def test_sweep_keeps_live_and_unowned_folders(tmp_path):
    for name in ("live", "gone", "reused", "unowned", "keep"):
        (tmp_path / name).mkdir()
    statedir.record_owner(str(tmp_path / "live"), os.getpid())
    (tmp_path / "gone" / statedir.OWNER_NAME).write_text("999999999 1\n")
    (tmp_path / "reused" / statedir.OWNER_NAME).write_text(f"{os.getpid()} 1\n")  # same pid, another process
    (tmp_path / "keep" / statedir.OWNER_NAME).write_text("999999999 1\n")
    removed = statedir.sweep_exited(str(tmp_path), keep="keep")
    assert sorted(os.path.basename(p) for p in removed) == ["gone", "reused"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep", "live", "unowned"]
