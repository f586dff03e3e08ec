"""Fixtures for the runtime and hook: bundle copies, a mock runc first on PATH, fixed settings."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

DATA = REPO / "tests" / "data"
MOCK_BIN = REPO / "tests" / "bin"
HOOK_PATH = "/usr/bin/fakegpu-hook"
NATIVE_DIR = "/opt/fakegpu/lib"


@pytest.fixture
def bundle(tmp_path):
    """Copy of tests/data/bundles/<case>, so the runtime can rewrite it."""

    def make(case: str) -> Path:
        dest = tmp_path / case
        shutil.copytree(DATA / "bundles" / case, dest)
        return dest

    return make


@pytest.fixture
def runtime_env(tmp_path):
    """Settings pinned for golden files, no config file, and the mock runc first on PATH."""
    log = tmp_path / "runc.log"
    return {
        **os.environ,
        "PATH": f"{MOCK_BIN}:{os.environ['PATH']}",
        "MOCK_RUNC_LOG": str(log),
        "FAKEGPU_CONFIG": str(tmp_path / "no-config.json"),
        "FAKEGPU_HOOK_PATH": HOOK_PATH,
        "FAKEGPU_NATIVE_DIR": NATIVE_DIR,
        "FAKEGPU_STATE_ROOT": str(tmp_path / "state"),
    }


def run_runtime(args: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("fakegpu-container-runtime")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60)


def runc_calls(env: dict[str, str]) -> list[list[str]]:
    log = Path(env["MOCK_RUNC_LOG"])
    if not log.exists():
        return []
    return [line.split("\t") for line in log.read_text().splitlines()]
