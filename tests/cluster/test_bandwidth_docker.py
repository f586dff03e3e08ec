"""fakegpu bandwidth on a 2-node native-mode cluster (one container per node, one rank each): FakeGPU's NCCL carries
every size across the containers over its socket transport, and each size's check says the data arrived.

The default path ships the host's worker source in the command (works with any node image that has torch); the
second run takes the node image's packaged module, which an image built from an older checkout lacks, so the test
copies this checkout's worker file into the nodes' fakegpu package first when it is missing (as a stock image of
this version carries it). A third run forces native NCCL onto shared memory, which the containers do not share,
and must fail every size's check."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from fakegpu.perf.bandwidth_launch import WORKER_PATH
from fakegpu.reports import validate
from tests.cluster.conftest import LABEL, cluster_name
from tests.conftest import run_cli

pytestmark = [pytest.mark.docker, pytest.mark.slow]
PACKAGE_IN_NODE = "/usr/local/lib/python3.11/dist-packages/fakegpu/perf"


def _put_worker(container) -> None:
    probe = container.exec_run(["python3", "-c", "import fakegpu.perf.bandwidth_worker"])
    if probe.exit_code == 0:
        return
    data = WORKER_PATH.read_bytes()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(WORKER_PATH.name)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    assert container.put_archive(PACKAGE_IN_NODE, buf.getvalue())


def test_bandwidth_sweep_moves_data_across_two_native_containers(docker_client, node_image, labelled):
    name = cluster_name("bw")
    result = run_cli("cluster", "up", name, "--label", LABEL, "--nodes", "2", "--devices", "a100:1",
                     "--mode", "native", "--image", node_image)
    assert result.returncode == 0, result.stderr
    try:
        result = run_cli("bandwidth", "--cluster", name, "--sizes", "8B:1MiB", "--step-factor", "4", "--iters", "3",
                         "--warmup", "1")
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
        out = result.stdout
        assert f"measured on cluster {name} (2 node(s) x 1), native mode" in out and "NOT a GPU's speed" in out
        assert "2 x 1 a100-sxm4-80gb" in out and "ib-ndr400" in out
        header = next(i for i, ln in enumerate(out.splitlines()) if ln.startswith("SIZE(B)"))
        rows = [ln.split() for ln in out.splitlines()[header + 2:] if ln[:1].isdigit()]
        assert [int(r[0]) for r in rows] == [8 * 4 ** k for k in range(9)]
        assert all(r[6] == "ok" for r in rows), out  # every size's sum arrived from the other container

        for node in docker_client.containers.list(filters={"label": f"fakegpu.cluster={name}"}):
            _put_worker(node)
        result = run_cli("bandwidth", "--cluster", name, "--worker", "module", "--op", "all-gather,broadcast",
                         "--sizes", "8B:64KiB", "--step-factor", "64", "--iters", "2", "--warmup", "0",
                         "--fabric", "roce-400", "--json")
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
        doc = json.loads(result.stdout)
        validate(doc)
        data = doc["data"]
        validate(data)
        assert data["all_checks_passed"] and data["rank_local_calls"] == 0
        assert data["run"]["worker"] == "module" and data["run"]["nodes"] == 2
        assert data["target"]["network"]["fabric"] == "roce-400"
        assert [o["op"] for o in data["ops"]] == ["all-gather", "broadcast"]
        assert all(r["check"] == "ok" for o in data["ops"] for r in o["rows"])

        # the same sweep forced onto shared memory, which two containers do not share: every communicator ends
        # rank-local after the join timeout, and the checks and the native reports say so
        result = run_cli("bandwidth", "--cluster", name, "--env", "FAKEGPU_NCCL_TRANSPORT=shm", "--env",
                         "FAKEGPU_NCCL_JOIN_TIMEOUT_S=2", "--sizes", "8B:64KiB", "--step-factor", "64", "--iters", "2",
                         "--warmup", "0", "--json")
        assert result.returncode == 1, result.stdout[-4000:] + result.stderr[-3000:]
        doc = json.loads(result.stdout)
        validate(doc["data"])
        assert doc["errors"][0]["code"] == "check-failed" and doc["data"]["rank_local_calls"] > 0
        assert [r["check"] for r in doc["data"]["ops"][0]["rows"]] == ["wrong"] * 3
    finally:
        assert run_cli("cluster", "down", name).returncode == 0
