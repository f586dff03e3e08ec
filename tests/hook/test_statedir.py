"""The host's state root (statedir.py and its C twin): a root-only folder on a nosuid,nodev,noexec filesystem."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fakegpu_hook.statedir import StateRootError, make_container_dir, secure_state_root

from tests.conftest import REPO, mounts_under
from tests.hook.conftest import DATA, MOCK_BIN

CREATE = REPO / "native" / "build" / "bin" / "fakegpu-create"
PY_RUNTIME = Path(sys.executable).with_name("fakegpu-container-runtime")


def _flags(path: Path) -> int:
    return os.statvfs(path).f_flag & (os.ST_NOSUID | os.ST_NODEV | os.ST_NOEXEC)


def test_a_bare_folder_gets_a_tmpfs_once(tmp_path):
    root = tmp_path / "state"
    secure_state_root(str(root))
    secure_state_root(str(root))  # already safe: nothing stacked on top
    assert mounts_under(root) == [str(root)]
    assert _flags(root) == os.ST_NOSUID | os.ST_NODEV | os.ST_NOEXEC
    assert root.stat().st_mode & 0o777 == 0o700
    host = Path(make_container_dir(str(root), "ctr"))
    assert host.stat().st_mode & 0o7777 == 0o700 and (host / "state").stat().st_mode & 0o7777 == 0o1777


def test_concurrent_first_creates_mount_one_tmpfs(tmp_path):
    root = tmp_path / "state"
    code = f"from fakegpu_hook.statedir import secure_state_root; secure_state_root({str(root)!r})"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(6)]
    assert all(p.wait(timeout=60) == 0 for p in procs)
    assert mounts_under(root) == [str(root)]


def test_a_mount_without_the_flags_is_refused(tmp_path):
    root = tmp_path / "state"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(root)], check=True)
    with pytest.raises(StateRootError, match="mount without nosuid,nodev,noexec"):
        secure_state_root(str(root))


def test_a_link_is_refused_and_the_hook_never_mounts(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(StateRootError, match="not a folder"):
        secure_state_root(str(tmp_path / "link"))
    with pytest.raises(StateRootError, match="runtime mounts one"):
        secure_state_root(str(tmp_path / "bare"), may_mount=False)
    assert mounts_under(tmp_path) == []


@pytest.mark.parametrize("entry", ["python", "c"])
def test_both_runtimes_refuse_an_unsafe_state_root_before_changing_anything(entry, tmp_path):
    if entry == "c" and not CREATE.exists():
        pytest.skip("native/build/bin/fakegpu-create not built (run `make`)")
    root = tmp_path / "state"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "nosuid", "tmpfs", str(root)], check=True)
    b = tmp_path / "b"
    shutil.copytree(DATA / "bundles" / "gpu", b)
    shutil.copytree(DATA / "rootfs" / "debian", b / "rootfs", symlinks=True)
    before = (b / "config.json").read_bytes()
    env = {"PATH": f"{MOCK_BIN}:/usr/bin:/bin", "MOCK_RUNC_LOG": str(tmp_path / "runc.log"),
           "FAKEGPU_CONFIG": str(tmp_path / "no-config.json"), "FAKEGPU_STATE_ROOT": str(root)}
    args = ["--log", str(tmp_path / "log.json"), "--log-format", "json", "create", "--bundle", str(b), "ctr-1"]
    from fakegpu_hook import front

    cmd = ([str(PY_RUNTIME), *args] if entry == "python" else
           [str(CREATE), "--python", sys.executable, "--pycode",
            front._pycode("fakegpu_hook.runtime", str(PY_RUNTIME), front.package_path()),
            "--native-default", "/nonexistent", "--catalog", str(REPO / "fakegpu" / "data" / "catalog.tbl"),
            "--", *args])
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 1
    assert f"state root {root} is a mount without nosuid,nodev,noexec" in result.stderr
    assert "mount without" in json.loads((tmp_path / "log.json").read_text().splitlines()[-1])["msg"]
    assert (b / "config.json").read_bytes() == before and os.listdir(root) == []
    assert not (tmp_path / "runc.log").exists()
