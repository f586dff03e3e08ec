"""`fakegpu cluster fault` on the machine's Docker Engine, through the CLI as a user runs it: a 2-node cluster's
node-1 paused and resumed, partitioned and healed, its GPU 0 lost, then killed, each seen by the engine or in
the node, and the report's fault timeline listing them in order."""

from __future__ import annotations

import json
import time

import pytest

from tests.cluster.conftest import LABEL, cluster_name
from tests.conftest import run_cli

pytestmark = [pytest.mark.docker, pytest.mark.slow]
# fakecuda in the node reads the same board: the lost GPU fails as a driver's does, the other keeps working
TOUCH_BOTH_GPUS = """
import torch
for d in (0, 1):
    try:
        print(f"cuda:{d} ok", (torch.ones(4, device=f"cuda:{d}") * 2).sum().item())
    except Exception as exc:
        print(f"cuda:{d}", type(exc).__name__, exc)
"""


def fault(name: str, *args: str):
    return run_cli("cluster", "fault", name, *args)


def test_pause_partition_gpu_lost_and_kill_are_done_and_timed(docker_client, node_image, labelled, tmp_path):
    name = cluster_name("faults")
    result = run_cli("cluster", "up", name, "--label", LABEL, "--nodes", "2", "--devices", "a100:2")
    assert result.returncode == 0, result.stderr
    try:
        node0 = docker_client.containers.get(f"fakegpu-{name}-node-0")
        node1 = docker_client.containers.get(f"fakegpu-{name}-node-1")
        network = f"fakegpu-{name}"

        def state(c) -> str:
            c.reload()
            return c.attrs["State"]["Status"]

        def networks(c) -> set[str]:
            c.reload()
            return set(c.attrs["NetworkSettings"]["Networks"])

        # refused before anything is done: exit 2 with the close match
        bad = fault(name, "pase", "node-1")
        assert bad.returncode == 2 and "did you mean pause?" in bad.stderr, bad.stderr
        assert fault(name, "kill", "node-7").returncode == 2 and state(node1) == "running"

        assert fault(name, "pause", "node-1").returncode == 0
        assert state(node1) == "paused" and state(node0) == "running"
        started = time.monotonic()
        result = fault(name, "resume", "node-1", "--at", "2s")
        assert result.returncode == 0, result.stderr
        assert time.monotonic() - started >= 2 and state(node1) == "running"

        assert fault(name, "partition", "node-1").returncode == 0
        assert network not in networks(node1) and network in networks(node0)
        assert fault(name, "heal", "node-1").returncode == 0
        assert network in networks(node1)
        # healed under its hostname again: its peer resolves it
        code, out = node0.exec_run(["getent", "hosts", "node-1"])
        assert code == 0, out

        result = fault(name, "gpu-lost", "node-1", "--gpu", "0")
        assert result.returncode == 0, result.stderr
        code, out = node1.exec_run(["nvidia-smi", "-L"])
        assert code == 15 and b"GPU is lost" in out and b"GPU 1:" in out, out
        code, out = node0.exec_run(["nvidia-smi", "-L"])
        assert code == 0 and out.count(b"GPU ") == 2, out
        code, out = node1.exec_run(["python3", "-c", TOUCH_BOTH_GPUS])
        assert code == 0 and b"cuda:0 AcceleratorError" in out and b"cuda:1 ok 8.0" in out, out

        assert fault(name, "kill", "node-1").returncode == 0
        assert state(node1) != "running" and state(node0) == "running"

        out = tmp_path / "report.json"
        result = run_cli("cluster", "report", name, "--json", str(out), "--html", str(tmp_path / "report.html"))
        assert result.returncode == 0, result.stderr
        timeline = json.loads(out.read_text())["faults"]
        assert [(f["action"], f["node"], f["gpu"], f["outcome"]) for f in timeline] == [
            ("pause", "node-1", None, "ok"), ("resume", "node-1", None, "ok"), ("partition", "node-1", None, "ok"),
            ("heal", "node-1", None, "ok"), ("gpu-lost", "node-1", 0, "ok"), ("kill", "node-1", None, "ok")]
        assert timeline[1]["time"] - timeline[1]["requested"] >= 2
        assert "<h2>Fault timeline</h2><table>" in (tmp_path / "report.html").read_text()
    finally:
        assert run_cli("cluster", "down", name).returncode == 0
    label = f"fakegpu.cluster={name}"
    assert docker_client.containers.list(all=True, filters={"label": label}) == []
    assert docker_client.networks.list(filters={"label": label}) == []
