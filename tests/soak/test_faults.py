"""The runtime, the hook and `fakegpu runtime install` under injected faults: each a clear error, the container
started correctly or not at all, no host file changed, daemon.json never half-written."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, mounts_under, run_cli
from tests.hook.conftest import DATA, MOCK_BIN

pytestmark = pytest.mark.soak
CREATE = REPO / "native" / "build" / "bin" / "fakegpu-create"
PY_RUNTIME = Path(sys.executable).with_name("fakegpu-container-runtime")
SMI = REPO / "native" / "build" / "bin" / "nvidia-smi"
CATALOG = REPO / "fakegpu" / "data" / "catalog.tbl"


@pytest.fixture(autouse=True)
def _unmount(tmp_path):
    yield
    for point in mounts_under(tmp_path):
        subprocess.run(["umount", "-l", point], check=False)


def _tree_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(str(p.relative_to(folder)).encode())
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


def _create(entry: str, tmp_path: Path, env_extra: dict[str, str], catalog: Path = CATALOG):
    b = tmp_path / "b"
    if not b.exists():
        shutil.copytree(DATA / "bundles" / "gpu", b)
        shutil.copytree(DATA / "rootfs" / "debian", b / "rootfs", symlinks=True)
    env = {"PATH": f"{MOCK_BIN}:/usr/bin:/bin", "MOCK_RUNC_LOG": str(tmp_path / "runc.log"),
           "FAKEGPU_CONFIG": str(tmp_path / "no-config.json"), "FAKEGPU_STATE_ROOT": str(tmp_path / "state"),
           **env_extra}
    args = ["--log", str(tmp_path / "log.json"), "--log-format", "json", "create", "--bundle", str(b), "ctr-1"]
    if entry == "c":
        if not CREATE.exists():
            pytest.skip("native/build/bin/fakegpu-create not built (run `make`)")
        from fakegpu_hook import front

        cmd = [str(CREATE), "--python", sys.executable, "--pycode",
               front._pycode("fakegpu_hook.runtime", str(PY_RUNTIME), front.package_path()),
               "--native-default", "/nonexistent", "--catalog", str(catalog), "--", *args]
    else:
        cmd = [str(PY_RUNTIME), *args]
    return b, subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)


ENTRIES = ["python", "c"]


@pytest.mark.parametrize("entry", ENTRIES)
def test_runc_missing_fails_before_anything_changes(entry, tmp_path, soak_record):
    b, result = _create(entry, tmp_path, {"FAKEGPU_LOW_LEVEL_RUNTIME": "/nonexistent/runc"})
    before = (DATA / "bundles" / "gpu" / "config.json").read_bytes()
    assert result.returncode != 0 and "/nonexistent/runc" in result.stderr and "not found" in result.stderr
    assert (b / "config.json").read_bytes() == before
    assert not (tmp_path / "state" / "ctr-1").exists()
    soak_record(**{f"runc_missing_{entry}": "refused, nothing changed"})


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_full_state_filesystem_fails_cleanly(entry, tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "nosuid,nodev,noexec,mode=0700,size=64k", "tmpfs", str(state)],
                   check=True)
    subprocess.run(["dd", "if=/dev/zero", f"of={state / 'filler'}", "bs=4k", "count=64"], capture_output=True)
    b, result = _create(entry, tmp_path, {})
    before = (DATA / "bundles" / "gpu" / "config.json").read_bytes()
    assert result.returncode == 1
    assert "cannot write the device table" in result.stderr and "No space left" in result.stderr, result.stderr
    assert (b / "config.json").read_bytes() == before
    assert sorted(os.listdir(state)) == ["filler"]
    assert not (tmp_path / "runc.log").exists()


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_damaged_catalog_table_hands_over_and_the_start_still_works(damage, tmp_path):
    """The C create resolves with the catalog table; one it cannot read is Python's to handle (it resolves from
    the compiled JSON catalog), so the container still starts with the devices it asked for."""
    bad = tmp_path / "catalog.tbl"
    text = CATALOG.read_bytes()
    bad.write_bytes(text[: len(text) // 3] if damage == "truncated" else os.urandom(4096))
    b, result = _create("c", tmp_path, {}, catalog=bad)
    assert result.returncode == 0, result.stderr
    table = (tmp_path / "state" / "ctr-1" / "devices.tbl").read_text()
    assert "count=2" in table and "FAKEGPU_DEVICE_TABLE=/run/fakegpu/devices.tbl" in (b / "config.json").read_text()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_the_shims_refuse_a_damaged_device_table_clearly(damage, tmp_path):
    if not SMI.exists():
        pytest.skip("native/build/bin/nvidia-smi not built (run `make`)")
    from fakegpu.devices import resolve_devices
    from fakegpu.devices.table import write_table

    table = tmp_path / "devices.tbl"
    write_table(table, resolve_devices("a100:4"), "a100:4", "0")
    text = table.read_bytes()
    table.write_bytes({"truncated": text[: len(text) // 2], "garbage": os.urandom(2048), "empty": b""}[damage])
    result = subprocess.run([str(SMI), "-L"], capture_output=True, text=True, timeout=30,
                            env={"PATH": "/usr/bin:/bin", "FAKEGPU_DEVICE_TABLE": str(table)})
    assert result.returncode > 0, (result.returncode, result.stdout)  # an error exit, not a signal
    assert str(table) in result.stdout + result.stderr or "table" in (result.stdout + result.stderr).lower()


def _install(daemon_json: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("runtime", "install", "--config", str(daemon_json), "--no-reload",
                   env={"FAKEGPU_FRONT_DIR": str(tmp_path / "front")})


def test_invalid_daemon_json_is_refused_and_left_alone(tmp_path):
    conf = tmp_path / "docker" / "daemon.json"
    conf.parent.mkdir()
    conf.write_text('{"runtimes": {"x": ')
    result = _install(conf, tmp_path)
    assert result.returncode != 0 and "not valid JSON" in result.stderr and "nothing was changed" in result.stderr
    assert conf.read_text() == '{"runtimes": {"x": ' and sorted(os.listdir(conf.parent)) == ["daemon.json"]
    assert not (tmp_path / "front").exists()  # refused before the fronts were written


def test_a_daemon_json_symlink_is_refused_and_its_target_untouched(tmp_path):
    real = tmp_path / "managed.json"
    real.write_text('{"log-level": "warn"}\n')
    conf = tmp_path / "docker" / "daemon.json"
    conf.parent.mkdir()
    conf.symlink_to(real)
    result = _install(conf, tmp_path)
    assert result.returncode != 0 and "is a symlink" in result.stderr
    assert conf.is_symlink() and real.read_text() == '{"log-level": "warn"}\n'
    assert sorted(os.listdir(conf.parent)) == ["daemon.json"]


def test_a_read_only_docker_folder_fails_clearly(tmp_path):
    folder = tmp_path / "docker"
    folder.mkdir()
    conf = folder / "daemon.json"
    conf.write_text('{"log-level": "warn"}\n')
    subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True)
    digest = _tree_hash(folder)
    result = _install(conf, tmp_path)
    assert result.returncode != 0 and "Read-only file system" in result.stderr, result.stderr
    assert _tree_hash(folder) == digest


def test_daemon_json_is_never_half_written_when_the_disk_fills(tmp_path):
    folder = tmp_path / "docker"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(folder)], check=True)
    original = json.dumps({"log-level": "warn", "labels": ["x" * 3000]}, indent=4) + "\n"
    (folder / "daemon.json").write_text(original)
    subprocess.run(["dd", "if=/dev/zero", f"of={folder / 'filler'}", "bs=1k", "count=16"], capture_output=True)
    result = _install(folder / "daemon.json", tmp_path)
    assert result.returncode != 0 and "No space left" in result.stderr, result.stderr
    assert (folder / "daemon.json").read_text() == original
    assert sorted(os.listdir(folder)) == ["daemon.json", "filler"]  # no temporary file left behind
