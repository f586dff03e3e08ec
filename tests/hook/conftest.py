"""Fixtures for the runtime and hook: bundle copies, a mock runc first on PATH, fixed settings."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, mounts_under

DATA = REPO / "tests" / "data"
MOCK_BIN = REPO / "tests" / "bin"
HOOK_PATH = "/usr/bin/fakegpu-hook"
NATIVE_DIR = "/opt/fakegpu/lib"


@pytest.fixture(autouse=True)
def _unmount_state_roots(request):
    """The runtime mounts a tmpfs on a bare state root (statedir.py); a test's roots live in its tmp_path, so
    whatever was mounted there is unmounted when the test ends."""
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    for point in mounts_under(tmp) if tmp is not None else []:
        subprocess.run(["umount", "-l", point], check=False)


@pytest.fixture
def bundle(tmp_path):
    """Copy of tests/data/bundles/<case>, so the runtime can rewrite it, with a small Debian-like root."""

    def make(case: str) -> Path:
        dest = tmp_path / case
        shutil.copytree(DATA / "bundles" / case, dest)
        if not (dest / "rootfs").exists():
            shutil.copytree(DATA / "rootfs" / "debian", dest / "rootfs", symlinks=True)
        return dest

    return make


ENTRY_VAR = "FAKEGPU_TEST_RUNTIME_ENTRY"


@pytest.fixture(params=["python", "sh-front"])
def runtime_env(request, tmp_path):
    """Settings pinned for golden files, no config file, and the mock runc first on PATH. Every runtime test
    runs twice: through the Python console script and through the sh front that `fakegpu runtime install`
    registers (it starts Python for `create` only)."""
    from fakegpu_hook import front

    log = tmp_path / "runc.log"
    entry = str(Path(sys.executable).with_name("fakegpu-container-runtime"))
    if request.param == "sh-front":
        files = front.front_files(str(tmp_path / "front"))
        front.write_fronts(files)
        entry = next(p for p in files if p.endswith(front.RUNTIME_FRONT))
    return {
        **os.environ,
        ENTRY_VAR: entry,
        "PATH": f"{MOCK_BIN}:{os.environ['PATH']}",
        "MOCK_RUNC_LOG": str(log),
        "FAKEGPU_CONFIG": str(tmp_path / "no-config.json"),
        "FAKEGPU_HOOK_PATH": HOOK_PATH,
        "FAKEGPU_NATIVE_DIR": NATIVE_DIR,
        "FAKEGPU_STATE_ROOT": str(tmp_path / "state"),
    }


def run_runtime(args: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = env.get(ENTRY_VAR) or str(Path(sys.executable).with_name("fakegpu-container-runtime"))
    return subprocess.run([exe, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60)


def runc_calls(env: dict[str, str]) -> list[list[str]]:
    log = Path(env["MOCK_RUNC_LOG"])
    if not log.exists():
        return []
    return [line.split("\t") for line in log.read_text().splitlines()]


def hook_sandbox(tmp_path: Path) -> tuple[Path, Path]:
    """(bundle, native): a bundle with the Debian test root, and a native build of a fake NVML and a shell
    nvidia-smi, for tests that run the hook for real."""
    import shutil

    bundle = tmp_path / "bundle"
    shutil.copytree(DATA / "rootfs" / "debian", bundle / "rootfs")
    native = tmp_path / "native"
    (native / "lib").mkdir(parents=True)
    (native / "bin").mkdir()
    (native / "lib" / "libnvidia-ml.so.1").write_text("fake nvml")
    (native / "bin" / "nvidia-smi").write_text("#!/bin/sh\necho fake smi\n")
    (native / "bin" / "nvidia-smi").chmod(0o755)
    return bundle, native
