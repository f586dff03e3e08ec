"""fakegpu-container-runtime as a real process on fake bundles with a mock runc (nvidia-container-toolkit style)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fakegpu.devices import resolve_devices
from tests.conftest import REPO
from tests.hook.conftest import DATA, HOOK_PATH, MOCK_BIN, NATIVE_DIR, run_runtime, runc_calls

DOCKER_GLOBAL = ["--root", "/var/run/docker/runtime-runc/moby", "--log", "LOG", "--log-format", "json"]


def create_args(bundle: Path, log: Path) -> list[str]:
    glob = [str(log) if a == "LOG" else a for a in DOCKER_GLOBAL]
    return [*glob, "create", "--bundle", str(bundle), "--pid-file", str(bundle / "init.pid"), "ctr-1"]


HOOK = {"FAKEGPU_INJECTION": "hook"}


def test_gpu_bundle_gets_the_hook_golden(bundle, runtime_env, tmp_path):
    runtime_env = {**runtime_env, **HOOK}
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
    # The runtime resolved the devices once and left the table where the hook (--prepared) reads it.
    table = (Path(runtime_env["FAKEGPU_STATE_ROOT"]) / "ctr-1" / "devices.tbl").read_text()
    assert "\tcount=" in table and table.count("\ndevice\t") >= 1


@pytest.mark.parametrize(("case", "env"), [("void", {}), ("plain", {"FAKEGPU_HONOUR_NVIDIA_ENV": "0"}),
                                         ("nvidia", {"FAKEGPU_HONOUR_NVIDIA_ENV": "off"})])
def test_bundle_that_asks_for_nothing_is_byte_identical(case, env, bundle, runtime_env, tmp_path):
    b = bundle(case)
    before = (b / "config.json").read_bytes()
    result = run_runtime(create_args(b, tmp_path / "log.json"), {**runtime_env, **env})
    assert result.returncode == 0, result.stderr
    assert (b / "config.json").read_bytes() == before
    assert len(runc_calls(runtime_env)) == 1


def _table(env: dict[str, str]) -> list[dict[str, str]]:
    lines = (Path(env["FAKEGPU_STATE_ROOT"]) / "ctr-1" / "devices.tbl").read_text().splitlines()
    return [dict(f.partition("=")[::2] for f in line.split("\t")[1:]) for line in lines if not line.startswith("#")]


def test_nvidia_visible_devices_selects_from_the_inventory(bundle, runtime_env, tmp_path):
    b = bundle("nvidia")  # NVIDIA_VISIBLE_DEVICES=0,1,2
    env = {**runtime_env, "FAKEGPU_INVENTORY": "h100:4"}
    result = run_runtime(create_args(b, tmp_path / "log.json"), env)
    assert result.returncode == 0, result.stderr
    header, *devices = _table(env)
    assert (header["spec"], header["visible"], header["count"]) == ("h100:4", "0,1,2", "3")
    inventory = resolve_devices("h100:4", seed="0")
    assert [(d["index"], d["uuid"], d["minor_number"]) for d in devices] == [
        (str(i), inventory[i].uuid, str(i)) for i in range(3)]
    nodes = [d["path"] for d in json.loads((b / "config.json").read_text())["linux"]["devices"]]
    assert nodes == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidia1",
                     "/dev/nvidia2"]


def test_nvidia_visible_devices_with_the_hook(bundle, runtime_env, tmp_path):
    b = bundle("nvidia")
    env = {**runtime_env, **HOOK, "FAKEGPU_INVENTORY": "h100:4"}
    assert run_runtime(create_args(b, tmp_path / "log.json"), env).returncode == 0
    args = json.loads((b / "config.json").read_text())["hooks"]["createContainer"][0]["args"]
    assert args[args.index("--inventory") + 1] == "h100:4" and "--ignore-nvidia-env" not in args
    assert _table(env)[0]["visible"] == "0,1,2"


def test_an_inventory_too_small_for_the_request_fails_the_create(bundle, runtime_env, tmp_path):
    b = bundle("nvidia")
    before = (b / "config.json").read_bytes()
    log = tmp_path / "log.json"
    result = run_runtime(create_args(b, log), {**runtime_env, "FAKEGPU_INVENTORY": "a100:2"})
    assert result.returncode == 1
    assert "NVIDIA_VISIBLE_DEVICES: device '2': no GPU has this index (they are 0..1)" in result.stderr
    assert "inventory 'a100:2' holds 2 GPUs" in json.loads(log.read_text().splitlines()[-1])["msg"]
    assert (b / "config.json").read_bytes() == before
    assert runc_calls(runtime_env) == [] and not (Path(runtime_env["FAKEGPU_STATE_ROOT"]) / "ctr-1").exists()


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
    assert run_runtime(["create", "ctr-1"], {**runtime_env, **HOOK}, cwd=b).returncode == 0
    assert "createContainer" in json.loads((b / "config.json").read_text())["hooks"]


def test_delete_removes_the_container_state_folder(runtime_env):
    folder = Path(runtime_env["FAKEGPU_STATE_ROOT"]) / "ctr-1"
    folder.mkdir(parents=True)
    (folder / "devices.tbl").write_text("x")
    assert run_runtime(["delete", "ctr-1"], runtime_env).returncode == 0
    assert not folder.exists()


def test_prestart_stage_joins_the_mount_namespace(bundle, runtime_env, tmp_path):
    b = bundle("gpu")
    env = {**runtime_env, **HOOK, "FAKEGPU_HOOK_STAGE": "prestart"}
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
    runtime_env = {**runtime_env, **HOOK}
    b = bundle("gpu")
    for _ in range(2):
        assert run_runtime(create_args(b, tmp_path / "l"), runtime_env).returncode == 0
    assert len(json.loads((b / "config.json").read_text())["hooks"]["createContainer"]) == 1


# Injection "runtime" (the default): the runtime prepares the root and hands runc mounts and device nodes.

@pytest.fixture
def native(tmp_path):
    lib, bin_ = tmp_path / "native" / "lib", tmp_path / "native" / "bin"
    lib.mkdir(parents=True)
    bin_.mkdir()
    (lib / "libnvidia-ml.so.1").write_text("nvml")
    (lib / "libnvidia-ml.so").symlink_to("libnvidia-ml.so.1")
    (lib / "catalog.tbl").write_text("catalog")
    (bin_ / "nvidia-smi").write_text("#!/bin/sh\n")
    return lib


def test_runtime_injection_adds_mounts_and_devices(bundle, runtime_env, tmp_path, native):
    env = {**runtime_env, "FAKEGPU_NATIVE_DIR": str(native)}
    b = bundle("gpu")
    original = json.loads((b / "config.json").read_text())
    result = run_runtime(create_args(b, tmp_path / "log.json"), env)
    assert result.returncode == 0, result.stderr
    got = json.loads((b / "config.json").read_text())
    state = Path(env["FAKEGPU_STATE_ROOT"]) / "ctr-1"
    lib = "/usr/lib/x86_64-linux-gnu"
    added = got["mounts"][len(original["mounts"]):]
    assert got["mounts"][:len(original["mounts"])] == original["mounts"]
    assert [(m["destination"], m["source"]) for m in added] == [
        ("/run/fakegpu", str(state / "state")),  # the container's share; the table and log stay host-only
        (f"{lib}/fakegpu", str(native)),  # the whole native lib folder, once; sonames link into it
        ("/usr/bin/nvidia-smi", str(native.parent / "bin" / "nvidia-smi")),
        ("/run/fakegpu/devices.tbl", str(state / "devices.tbl")),
        ("/run/fakegpu/catalog.tbl", str(REPO / "fakegpu" / "data" / "catalog.tbl")),
    ]
    assert added[0]["options"] == ["bind", "rw", "nosuid", "nodev", "noexec"]
    assert all(m["options"] == ["bind", "ro", "nosuid", "nodev"] and m["type"] == "bind" for m in added[1:])
    devices = got["linux"]["devices"]
    assert [d["path"] for d in devices] == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                            "/dev/nvidia0", "/dev/nvidia1"]
    assert devices[3] == {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0, "fileMode": 0o666,
                          "uid": 0, "gid": 0}
    assert got["hooks"] == original["hooks"]  # no hook: nothing of ours runs inside runc
    assert "FAKEGPU_DEVICE_TABLE=/run/fakegpu/devices.tbl" in got["process"]["env"]
    # Mount targets and the development link exist in the root, made from the host before runc runs.
    root = b / "rootfs"
    # As a real driver installs it: the soname links to the file named after the driver version.
    driver = json.loads((REPO / "fakegpu" / "data" / "native_versions.json").read_text())["driver_version"]
    assert os.readlink(root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1") == f"libnvidia-ml.so.{driver}"
    assert os.readlink(root / f"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{driver}") == "fakegpu/libnvidia-ml.so.1"
    assert os.readlink(root / "usr/lib/x86_64-linux-gnu/catalog.tbl") == "fakegpu/catalog.tbl"
    assert (root / "usr/lib/x86_64-linux-gnu/fakegpu").is_dir()
    assert os.readlink(root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so") == "libnvidia-ml.so.1"
    assert (root / "usr/bin/nvidia-smi").is_file() and (root / "run/fakegpu").is_dir()
    assert "count=2" in (state / "devices.tbl").read_text()
    assert f"\tdriver={driver}\n" in (state / "devices.tbl").read_text()
    log = (state / "inject.log").read_text()
    assert "2 devices from FAKEGPU_DEVICES='a100:2'" in log and "made by runc" in log
    # A retried create on the same bundle adds nothing twice.
    assert run_runtime(create_args(b, tmp_path / "log.json"), env).returncode == 0
    again = json.loads((b / "config.json").read_text())
    assert again["mounts"] == got["mounts"] and again["linux"]["devices"] == devices


def test_runtime_injection_never_follows_a_link_out_of_the_root(bundle, runtime_env, tmp_path, native):
    outside = tmp_path / "host"
    outside.mkdir()
    b = bundle("gpu")
    (b / "rootfs" / "usr" / "bin").mkdir(parents=True)
    (b / "rootfs" / "usr" / "bin" / "nvidia-smi").symlink_to(outside / "smi")
    (b / "rootfs" / "run").symlink_to(outside)
    result = run_runtime(create_args(b, tmp_path / "l"), {**runtime_env, "FAKEGPU_NATIVE_DIR": str(native)})
    assert result.returncode == 0, result.stderr
    assert list(outside.iterdir()) == []
    assert (b / "rootfs" / "usr" / "bin" / "nvidia-smi").is_file()  # the image's link replaced, not followed
    assert (b / "rootfs" / str(outside).lstrip("/") / "fakegpu").is_dir()  # /run followed inside the root


def test_runtime_injection_failure_leaves_config_and_state_alone(bundle, runtime_env, tmp_path):
    b = bundle("gpu")
    (b / "rootfs" / "run").write_text("a file where a folder belongs")
    before = (b / "config.json").read_bytes()
    result = run_runtime(create_args(b, tmp_path / "l"), runtime_env)
    assert result.returncode == 1
    assert "cannot prepare the container root" in result.stderr and "not a directory" in result.stderr
    assert (b / "config.json").read_bytes() == before
    assert not (Path(runtime_env["FAKEGPU_STATE_ROOT"]) / "ctr-1").exists()
    assert runc_calls(runtime_env) == []


def test_user_namespace_falls_back_to_the_hook(bundle, runtime_env, tmp_path):
    b = bundle("gpu")
    config = json.loads((b / "config.json").read_text())
    config["linux"].setdefault("namespaces", []).append({"type": "user"})
    (b / "config.json").write_text(json.dumps(config))
    assert run_runtime(create_args(b, tmp_path / "l"), runtime_env).returncode == 0
    got = json.loads((b / "config.json").read_text())
    assert got["hooks"]["createContainer"][0]["path"] == HOOK_PATH and "devices" not in got["linux"]


def test_unknown_injection_is_refused(bundle, runtime_env, tmp_path):
    result = run_runtime(create_args(bundle("gpu"), tmp_path / "l"), {**runtime_env, "FAKEGPU_INJECTION": "magic"})
    assert result.returncode == 1 and "injection 'magic'" in result.stderr


def test_the_last_of_a_repeated_variable_wins_as_under_cri(bundle, runtime_env, tmp_path, native):
    # containerd's CRI writes the image's ENV, then the pod's env: the pod asked for two GPUs, and runc gives
    # the container's process the later value, so the runtime must read that one too.
    env = {**runtime_env, "FAKEGPU_NATIVE_DIR": str(native)}
    b = bundle("gpu")
    data = json.loads((b / "config.json").read_text())
    others = [e for e in data["process"]["env"] if not e.startswith("FAKEGPU_DEVICES=")]
    data["process"]["env"] = ["FAKEGPU_DEVICES=a100:1", *others, "FAKEGPU_DEVICES=h100:2"]
    (b / "config.json").write_text(json.dumps(data, indent=2))
    result = run_runtime(create_args(b, tmp_path / "log.json"), env)
    assert result.returncode == 0, result.stderr
    table = (Path(env["FAKEGPU_STATE_ROOT"]) / "ctr-1" / "devices.tbl").read_text()
    assert "\tcount=2\tspec=h100:2\t" in table
    devices = json.loads((b / "config.json").read_text())["linux"]["devices"]
    assert [d["path"] for d in devices][-2:] == ["/dev/nvidia0", "/dev/nvidia1"]


def _with_env(b: Path, *entries: str) -> None:
    data = json.loads((b / "config.json").read_text())
    data["process"]["env"].extend(entries)
    (b / "config.json").write_text(json.dumps(data, indent=2))


@pytest.mark.parametrize(("entries", "setting", "want"), [
    ((), None, None), (("FAKEGPU_DRIVER_VERSION=550.127.08",), None, "550.127.08"),
    ((), "535.104.05", "535.104.05"), (("FAKEGPU_DRIVER_VERSION=570.86.15",), "535.104.05", "570.86.15")])
def test_one_driver_names_the_table_and_the_libraries(entries, setting, want, bundle, runtime_env, tmp_path,
                                                      native):
    # The container's own choice, else the host's setting, else the default: the table tells every process in the
    # container (docker exec ones too), and the driver's library file is named after it as a real driver's is.
    want = want or json.loads((REPO / "fakegpu" / "data" / "native_versions.json").read_text())["driver_version"]
    env = {**runtime_env, "FAKEGPU_NATIVE_DIR": str(native)}
    if setting:
        config = tmp_path / "config.json"
        config.write_text(json.dumps({"driver_version": setting}))
        env["FAKEGPU_CONFIG"] = str(config)
    b = bundle("gpu")
    _with_env(b, *entries)
    result = run_runtime(create_args(b, tmp_path / "log.json"), env)
    assert result.returncode == 0, result.stderr
    header = (Path(env["FAKEGPU_STATE_ROOT"]) / "ctr-1" / "devices.tbl").read_text().splitlines()[1]
    assert header.endswith(f"\tdriver={want}")
    lib = b / "rootfs" / "usr/lib/x86_64-linux-gnu"
    assert os.readlink(lib / "libnvidia-ml.so.1") == f"libnvidia-ml.so.{want}"
    assert os.readlink(lib / f"libnvidia-ml.so.{want}") == "fakegpu/libnvidia-ml.so.1"


@pytest.mark.parametrize("value", ["latest", "58", "580.95.05.1", "5" * 100_000])
def test_a_driver_that_is_not_a_version_fails_the_create_clearly(value, bundle, runtime_env, tmp_path):
    b = bundle("gpu")
    _with_env(b, f"FAKEGPU_DRIVER_VERSION={value}")
    before = (b / "config.json").read_bytes()
    result = run_runtime(create_args(b, tmp_path / "log.json"), runtime_env)
    assert result.returncode != 0
    assert "FAKEGPU_DRIVER_VERSION" in result.stderr and "expected one like 580.95.05" in result.stderr
    assert len(result.stderr) < 600  # a huge value is never echoed whole
    assert (b / "config.json").read_bytes() == before
    assert not (Path(runtime_env["FAKEGPU_STATE_ROOT"]) / "ctr-1").exists()
    assert runc_calls(runtime_env) == []


def test_a_driver_setting_that_is_not_a_version_is_refused(bundle, runtime_env, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"driver_version": "r580"}))
    result = run_runtime(create_args(bundle("gpu"), tmp_path / "log.json"),
                         {**runtime_env, "FAKEGPU_CONFIG": str(config)})
    assert result.returncode != 0 and "driver_version: 'r580' is not a driver version" in result.stderr


PROCFS = REPO / "native" / "build" / "bin" / "fakegpu-procfs"


@pytest.fixture
def native_with_procfs(native):
    assert PROCFS.exists(), f"{PROCFS} missing: run `make native`"
    (native.parent / "bin" / "fakegpu-procfs").symlink_to(PROCFS)
    return native


def _container_pid(b: Path) -> int:
    return int((b / "init.pid").read_text())


def _kill(pid: int) -> None:
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_the_container_gets_proc_driver_nvidia_after_runc_creates_it(bundle, runtime_env, tmp_path,
                                                                     native_with_procfs):
    # runc refuses mounts under /proc in config.json: the runtime attaches the tree to the container's mount
    # namespace once runc has made it (the mock runc leaves a process in a namespace of its own, as runc does).
    import subprocess

    env = {**runtime_env, "FAKEGPU_NATIVE_DIR": str(native_with_procfs), "MOCK_RUNC_SPAWN": "ns"}
    b = bundle("gpu")
    _with_env(b, "FAKEGPU_DRIVER_VERSION=550.127.08")
    result = run_runtime(create_args(b, tmp_path / "log.json"), env)
    pid = _container_pid(b)
    try:
        assert result.returncode == 0, result.stderr
        seen = subprocess.run(["nsenter", "-m", "-t", str(pid), "sh", "-c",
                               "cat /proc/driver/nvidia/version; ls /proc/driver/nvidia/gpus"],
                              capture_output=True, text=True, timeout=30)
        assert "Kernel Module  550.127.08  " in seen.stdout, seen.stdout + seen.stderr
        assert seen.stdout.split()[-2:] == ["0000:18:00.0", "0000:2a:00.0"]
        log = (Path(env["FAKEGPU_STATE_ROOT"]) / "ctr-1" / "inject.log").read_text()
        assert "/proc/driver/nvidia: mounted over the container's /proc/driver" in log
        assert not os.path.exists("/proc/driver/nvidia")  # the host's own /proc/driver is untouched
    finally:
        _kill(pid)


def test_a_create_whose_tree_cannot_be_mounted_is_undone(bundle, runtime_env, tmp_path, native_with_procfs):
    # A "container" that shares the runtime's mount namespace: mounting there would cover the host's
    # /proc/driver, so it is refused, and the container runc made is deleted again.
    env = {**runtime_env, "FAKEGPU_NATIVE_DIR": str(native_with_procfs), "MOCK_RUNC_SPAWN": "host"}
    b = bundle("gpu")
    result = run_runtime(create_args(b, tmp_path / "log.json"), env)
    _kill(_container_pid(b))
    assert result.returncode == 1
    assert "cannot mount /proc/driver/nvidia into the container: process" in result.stderr
    assert "refusing to mount over the host's /proc/driver" in result.stderr
    calls = runc_calls(env)
    assert [c[c.index("delete"):] for c in calls if "delete" in c] == [["delete", "--force", "ctr-1"]]
    assert not (Path(env["FAKEGPU_STATE_ROOT"]) / "ctr-1").exists()
    assert not os.path.exists("/proc/driver/nvidia")


def test_without_a_pid_file_the_container_starts_without_the_tree(bundle, runtime_env, tmp_path,
                                                                  native_with_procfs):
    env = {**runtime_env, "FAKEGPU_NATIVE_DIR": str(native_with_procfs)}
    b = bundle("gpu")
    args = [a for a in create_args(b, tmp_path / "log.json") if a not in ("--pid-file", str(b / "init.pid"))]
    assert run_runtime(args, env).returncode == 0
    log = (Path(env["FAKEGPU_STATE_ROOT"]) / "ctr-1" / "inject.log").read_text()
    assert "/proc/driver/nvidia: not mounted: runc was given no --pid-file" in log


PLAN = json.dumps({"faults": [{"xid": 79, "device": 1, "at": "20s"}, {"memory_pressure": "1GiB", "device": 0}]})


def test_a_fault_plan_in_the_container_env_goes_on_its_board(bundle, runtime_env, tmp_path, native):
    """FAKEGPU_FAULTS in a container: its faults on the container's own board at create, in its numbering, each
    `at` from the create; the C fast path leaves such a container to Python, so both entries agree."""
    import time

    from fakegpu.faults import board

    env = {**runtime_env, "FAKEGPU_NATIVE_DIR": str(native)}
    b = bundle("gpu")
    _with_env(b, f"FAKEGPU_FAULTS={PLAN}")
    before = time.time_ns()
    result = run_runtime(create_args(b, tmp_path / "log.json"), env)
    assert result.returncode == 0, result.stderr
    state = Path(env["FAKEGPU_STATE_ROOT"]) / "ctr-1" / "state"
    lost, pressure = board.read(str(state))
    assert (lost.device, lost.code, lost.lost) == (1, 79, True)
    assert before + 20 * 10**9 <= lost.fire_ns <= time.time_ns() + 20 * 10**9
    assert (pressure.kind, pressure.device, pressure.code) == (board.KIND_MEMORY_PRESSURE, 0, 1024)
    assert runc_calls(env)  # and the container was created


@pytest.mark.parametrize(("value", "message"), [
    ('{"faults": [{"xid": 79, "device": 5}]}', "fault on GPU 5: the run has GPUs 0..1"),
    ('{"faults": [{"xid": 80, "device": 0}]}', "faults[0].xid: 80 is not accepted"),
    ("/etc/shadow", "FAKEGPU_FAULTS (the container's fault plan): give the plan itself"),
    ("faults: [" + "x" * (1 << 20) + "]", "characters; a plan is at most 65536"),  # refused before it is parsed
    ("faults: [{xid: 79, device: [", "FAKEGPU_FAULTS:1:"),  # garbage: the parser's line and column
])
def test_a_bad_fault_plan_fails_the_create_and_leaves_nothing(value, message, bundle, runtime_env, tmp_path, native):
    env = {**runtime_env, "FAKEGPU_NATIVE_DIR": str(native)}
    b = bundle("gpu")
    _with_env(b, f"FAKEGPU_FAULTS={value}")
    before = (b / "config.json").read_bytes()
    result = run_runtime(create_args(b, tmp_path / "log.json"), env)
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert (b / "config.json").read_bytes() == before
    assert runc_calls(env) == [] and not (Path(env["FAKEGPU_STATE_ROOT"]) / "ctr-1").exists()
