"""compose/: each rehearsal file runs to exit 0 with `up --abort-on-container-exit` and writes one process report
per rank; cleanup with `down -v` and by the project's label."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.cluster.conftest import RUN_ID, need
from tests.conftest import REPO

pytestmark = [pytest.mark.docker, pytest.mark.slow]
COMPOSE = REPO / "compose"


def compose_cmd() -> list[str]:
    """Compose v2 (`docker compose`) where installed, else v1 (`docker-compose`, what this machine has)."""
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    exe = shutil.which("docker-compose")
    need(exe is not None, "neither `docker compose` nor `docker-compose` is installed")
    return [exe]


def rehearse(files: list[str], project: str, reports) -> subprocess.CompletedProcess[str]:
    base = [*compose_cmd(), "-p", project, *[a for f in files for a in ("-f", str(COMPOSE / f))]]
    env = {**os.environ, "FAKEGPU_REPORTS": str(reports)}
    try:
        return subprocess.run([*base, "up", "--abort-on-container-exit"], capture_output=True, text=True, env=env,
                              timeout=600)
    finally:
        subprocess.run([*base, "down", "-v"], capture_output=True, env=env, timeout=120)


def rank_reports(reports) -> list[dict]:
    docs = [json.loads(p.read_text()) for p in reports.glob("node-*/*.activity.json")]
    return sorted((d for d in docs if d["rank"] is not None), key=lambda d: d["rank"])


def left(client, project: str) -> list:
    label = f"com.docker.compose.project={project}"
    return client.containers.list(all=True, filters={"label": label}) + client.networks.list(filters={"label": label})


def test_ddp_2node_finishes_and_every_rank_reports(docker_client, node_image, tmp_path):
    project = f"fgt{RUN_ID}"
    result = rehearse(["ddp-2node.yaml"], project, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    ranks = rank_reports(tmp_path)
    assert [d["rank"] for d in ranks] == list(range(8))
    assert all(d["collectives"]["all_reduce"]["calls"] > 0 for d in ranks)
    assert left(docker_client, project) == []


def test_ddp_2node_with_the_fakegpu_runtime(docker_client, node_image, fakegpu_runtime, tmp_path):
    project = f"fgt{RUN_ID}rt"
    result = rehearse(["ddp-2node.yaml", "ddp-2node-runtime.yaml"], project, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert [d["rank"] for d in rank_reports(tmp_path)] == list(range(8))
    assert left(docker_client, project) == []
