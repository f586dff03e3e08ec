"""Issue 7's acceptance on the machine's Docker Engine, through the CLI as a user runs it: a 2-node DDP job
(8 ranks of fakecuda torch), the merged report, a node killed mid-job, two clusters side by side, bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakegpu.cluster import report as merge
from fakegpu.reports import validate
from tests.cluster.conftest import LABEL, cluster_name
from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.docker, pytest.mark.slow]
EXAMPLES = REPO / "compose" / "examples"


def up(name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli("cluster", "up", name, "--label", LABEL, "--workdir", str(EXAMPLES), *extra)


def leftovers(client, name: str) -> list[str]:
    label = f"fakegpu.cluster={name}"
    return ([c.name for c in client.containers.list(all=True, filters={"label": label})]
            + [n.name for n in client.networks.list(filters={"label": label})])


def test_two_node_ddp_job_runs_reports_eight_ranks_and_down_leaves_nothing(docker_client, node_image, labelled,
                                                                           tmp_path):
    name = cluster_name("demo")
    result = up(name, "--nodes", "2", "--devices", "a100:4")
    assert result.returncode == 0, result.stderr
    status = json.loads(run_cli("cluster", "status", name, "--json").stdout)["data"]
    assert [n["hostname"] for n in status["nodes"]] == ["node-0", "node-1"] and status["healthy"]
    # torchrun's options come from the node (PET_* variables); --node-rank shows node-side substitution
    result = run_cli("cluster", "run", name, "--", "torchrun", "--nnodes", "2", "--nproc-per-node", "4",
                     "--node-rank", "$NODE_RANK", "--master-addr", "node-0", "ddp_train.py")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    # ranks of one node share its stdout, so two ranks' lines can land on one line: count, don't split
    per_node = {n: sum(ln.count(" loss ") for ln in result.stdout.splitlines() if ln.startswith(f"[{n}]"))
                for n in ("node-0", "node-1")}
    assert per_node == {"node-0": 4, "node-1": 4}, result.stdout[-3000:]
    out = tmp_path / "report.json"
    result = run_cli("cluster", "report", name, "--json", str(out), "--html", str(tmp_path / "report.html"))
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    validate(doc)
    assert doc["rank_count"] == 8 and doc["verdict"] == "fits"
    ranks = sorted(p["rank"] for n in doc["nodes"] for p in n["processes"] if p["rank"] is not None)
    assert ranks == list(range(8))
    for node in doc["nodes"]:
        assert node["status"] == "ok" and len(node["devices"]) == 4
        assert all(d["peak_allocated_bytes"] > 0 and d["verdict"] == "fits" for d in node["devices"])
    assert doc["collectives"]["all_reduce"]["calls"] >= 8 and doc["collectives"]["all_reduce"]["bytes"] > 0
    uuids = {d["uuid"] for n in doc["nodes"] for d in n["devices"]}
    assert len(uuids) == 8  # FAKEGPU_SEED=<node rank>: no two nodes share a GPU identity
    assert "<svg" in (tmp_path / "report.html").read_text()
    assert run_cli("cluster", "down", name).returncode == 0
    assert leftovers(docker_client, name) == []
    assert run_cli("cluster", "down", name).returncode == 0  # idempotent


def test_a_node_killed_mid_job_fails_the_run_naming_it(docker_client, node_image, labelled):
    name = cluster_name("kill")
    assert up(name, "--nodes", "2", "--devices", "a100:1").returncode == 0
    exe = Path(sys.executable).with_name("fakegpu")
    job = subprocess.Popen([str(exe), "cluster", "run", name, "STEPS=1000000 torchrun ddp_train.py"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(8)
    docker_client.containers.get(f"fakegpu-{name}-node-1").kill()
    _, err = job.communicate(timeout=120)
    assert job.returncode != 0
    assert "node-1 (node rank 1) failed" in err and "node container is exited" in err, err
    doc = merge.build(name)
    assert doc["verdict"] == "failed"
    assert [n["status"] for n in doc["nodes"]] == ["stopped", "failed"]
    assert run_cli("cluster", "down", name).returncode == 0
    assert leftovers(docker_client, name) == []


def test_two_clusters_do_not_collide_and_bad_input_leaves_nothing(docker_client, node_image, labelled):
    a, b = cluster_name("a"), cluster_name("b")
    assert up(a, "--nodes", "1", "--devices", "t4").returncode == 0
    assert up(b, "--nodes", "2", "--devices", "h100:2").returncode == 0
    listed = {c["name"]: c for c in json.loads(run_cli("cluster", "list", "--json").stdout)["data"]}
    assert len(listed[a]["nodes"]) == 1 and len(listed[b]["nodes"]) == 2
    result = run_cli("cluster", "run", a, "--", "nvidia-smi", "-L")
    assert result.returncode == 0 and result.stdout.count("Tesla T4") == 1, result.stdout + result.stderr
    again = up(a)
    assert again.returncode == 2 and "exists" in again.stderr
    assert run_cli("cluster", "down", a).returncode == 0
    assert leftovers(docker_client, a) == [] and len(leftovers(docker_client, b)) == 3  # b untouched
    bad = [up(cluster_name("bad1"), "--devices", "a10O:2"), up(cluster_name("bad2"), "--image", "nope/none:0")]
    assert [r.returncode for r in bad] == [2, 2]
    assert "Did you mean" in bad[0].stderr and "make images" in bad[1].stderr
    assert leftovers(docker_client, cluster_name("bad1")) == leftovers(docker_client, cluster_name("bad2")) == []
    assert run_cli("cluster", "down", b).returncode == 0


def test_native_mode_nodes_run_unmodified_cuda_torch_on_the_shims(docker_client, node_image, labelled):
    # --mode native: no fakecuda; torch in the node image loads FakeGPU's CUDA libraries, so its real caching
    # allocator runs on the node's simulated device memory (values are not computed in this mode).
    name = cluster_name("native")
    result = up(name, "--nodes", "1", "--devices", "a100:2", "--mode", "native")
    assert result.returncode == 0, result.stderr
    try:
        code = ("import torch; x = torch.empty(1 << 28, device='cuda:1');"
                "print('seen', torch.cuda.device_count(), torch.cuda.get_device_name(1),"
                " torch.cuda.memory_allocated(1))")
        result = run_cli("cluster", "run", name, "--", "python3", "-c", code)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
        assert "[node-0] seen 2 NVIDIA A100-SXM4-80GB 1073741824" in result.stdout
    finally:
        assert run_cli("cluster", "down", name).returncode == 0
    assert leftovers(docker_client, name) == []


def test_native_mode_ddp_across_two_containers_moves_real_data(docker_client, node_image, labelled):
    """Issue 19's rehearsal: one rank per container, NCCL's data over the socket transport (the job spans hosts:
    WORLD_SIZE 2, LOCAL_WORLD_SIZE 1). Before it, each container's collectives were rank-local: an all-gather
    returned each rank's own input twice."""
    name = cluster_name("xhost")
    result = run_cli("cluster", "up", name, "--label", LABEL, "--workdir", str(REPO / "tests" / "cluster" / "data"),
                     "--nodes", "2", "--devices", "a100:1", "--mode", "native")
    assert result.returncode == 0, result.stderr
    try:
        result = run_cli("cluster", "run", name, "--", "torchrun", "--nnodes", "2", "--nproc-per-node", "1",
                         "--node-rank", "$NODE_RANK", "--master-addr", "node-0", "cross_host_ddp.py")
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
        lines = [json.loads(ln.split("] ", 1)[1]) for ln in result.stdout.splitlines() if '] {"rank"' in ln]
        by_rank = {d["rank"]: d for d in lines}
        assert sorted(by_rank) == [0, 1], result.stdout[-3000:]
        for d in by_rank.values():
            assert d["hosts"] == ["node-0", "node-1"] and d["total"] == 3.0 and d["big_ok"]
        # DDP broadcast rank 0's weights and all-reduced the gradients: the same bytes on both ranks
        assert by_rank[0]["weight"] == by_rank[1]["weight"] and by_rank[0]["grad"] == by_rank[1]["grad"]
        # Python objects of different sizes, through the group's CPU backend, whole on both ranks
        for d in by_rank.values():
            assert d["objects"] == [{"rank": 0, "host": "node-0", "pad": 1000},
                                    {"rank": 1, "host": "node-1", "pad": 2000}]
            assert d["broadcast"] == {"from": "node-1", "sizes": [1000, 2000]}
        assert "rank-local" not in result.stdout + result.stderr
    finally:
        assert run_cli("cluster", "down", name).returncode == 0
    assert leftovers(docker_client, name) == []


def test_a_cancelled_run_stops_the_job_on_every_node(docker_client, node_image, labelled):
    """A CI job cancelled (SIGTERM to `cluster run`, started as a shell starts a background job: SIGINT ignored)
    stops the job in every node, records it and exits 130, as Ctrl-C does."""
    name = cluster_name("cancel")
    assert up(name, "--nodes", "2", "--devices", "t4").returncode == 0
    exe = Path(sys.executable).with_name("fakegpu")
    job = subprocess.Popen([str(exe), "cluster", "run", name, "echo started; sleep 300"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        seen = {job.stdout.readline().strip() for _ in range(2)}
        assert seen == {"[node-0] started", "[node-1] started"}, seen
        job.send_signal(signal.SIGTERM)
        _, err = job.communicate(timeout=90)
        assert job.returncode == 130 and "interrupted; the job was stopped on every node" in err, err
        for node in ("node-0", "node-1"):
            top = docker_client.containers.get(f"fakegpu-{name}-{node}").top()
            assert not [p for p in top["Processes"] if "sleep 300" in " ".join(p)], (node, top)
        assert merge.build(name)["job"]["exit_code"] == 130  # the run's record says it was interrupted
    finally:
        if job.poll() is None:
            job.kill()
        assert run_cli("cluster", "down", name).returncode == 0
    assert leftovers(docker_client, name) == []
