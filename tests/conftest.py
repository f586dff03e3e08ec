"""Shared fixtures. Tests that need Docker are marked `docker`; under CI they fail instead of skipping."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI") == "true"


@pytest.fixture(scope="session")
def docker_client():
    import docker

    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:
        if IN_CI:
            pytest.fail(f"Docker Engine required under CI but not reachable: {exc}")
        pytest.skip(f"Docker Engine not reachable: {exc}")
    return client


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed console script in a real process, as a user runs it."""
    exe = Path(sys.executable).with_name("fakegpu")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=120)



def mounts_under(folder: Path) -> list[str]:
    """Mount points at or below folder, deepest first (from this process's mountinfo)."""
    top = str(folder)
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point == top or point.startswith(top + "/"):
                points.append(point)
    return sorted(points, key=len, reverse=True)
