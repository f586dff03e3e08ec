"""No Docker engine: `cluster fault`'s checks, its engine actions on stand-ins for the SDK's objects, the fault
board a runtime node gets, the timeline file and its place in the merged report and the HTML."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from docker.errors import APIError
from typer.testing import CliRunner

from fakegpu.cli.main import app
from fakegpu.cluster import faults, html
from fakegpu.cluster import report as merge
from fakegpu.cluster.models import Cluster, ClusterError, ClusterNotFound, ClusterUsageError, Node
from fakegpu.devices import resolve_devices
from fakegpu.devices.table import write_table
from fakegpu.faults import board
from fakegpu.faults.inject import ContainerLayout
from fakegpu.reports import schema as load_schema
from fakegpu.reports import validate
from tests.cluster.test_models_and_report import _state


class FakeContainer:
    def __init__(self, name: str, runtime: str = "runc") -> None:
        self.name, self.id, self.status = name, f"id-{name}", "running"
        self.attrs = {"HostConfig": {"Runtime": runtime}}
        self.calls: list[tuple] = []
        self.exec_result = (0, b"Xid 79 (GPU has fallen off the bus) on GPU 0")

    def kill(self) -> None:
        self.calls.append(("kill",))
        self.status = "exited"

    def pause(self) -> None:
        self.calls.append(("pause",))

    def unpause(self) -> None:
        self.calls.append(("unpause",))

    def exec_run(self, cmd, environment=None):
        self.calls.append(("exec", cmd, environment))
        return self.exec_result


class FakeNetwork:
    name = "fakegpu-c"

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def disconnect(self, container) -> None:
        self.calls.append(("disconnect", container.name))

    def connect(self, container, aliases=None) -> None:
        self.calls.append(("connect", container.name, aliases))


class FakeClient:
    def __init__(self, containers: dict[str, FakeContainer]) -> None:
        self.network = FakeNetwork()
        by_id = {c.id: c for c in containers.values()}
        self.containers = type("C", (), {"get": lambda _, key: containers.get(key) or by_id[key]})()
        self.networks = type("N", (), {"get": lambda _, key: self.network})()


class FakeController:
    """What faults.py asks of fakegpu.cluster.controller.Controller: status, list and the SDK client."""

    def __init__(self, state_dir: Path, runtime: str = "runc") -> None:
        nodes = [Node(r, f"node-{r}", f"fakegpu-c-node-{r}", "running", None, "a100:2") for r in range(2)]
        self.cluster = Cluster("c", "r1", "fakecuda", "fakegpu/pytorch:latest", "fakegpu-c", state_dir, nodes)
        self.containers = {n.container: FakeContainer(n.container, runtime) for n in nodes}
        self.client = FakeClient(self.containers)

    def status(self, name: str) -> Cluster:
        if name != self.cluster.name:
            raise ClusterNotFound(f"no cluster named {name!r}")
        return self.cluster

    def list(self) -> list[Cluster]:
        return [self.cluster]

    def node(self, rank: int) -> FakeContainer:
        return self.containers[f"fakegpu-c-node-{rank}"]


@pytest.fixture
def ctl(tmp_path) -> FakeController:
    return FakeController(_state(tmp_path))


@pytest.mark.parametrize("args, message", [
    (("c", "puase", "node-1"), "unknown fault action 'puase'; did you mean pause?"),
    (("cc", "kill", "node-1"), "no cluster named 'cc'; did you mean c?"),
    (("c", "kill", "node-3"), "no node 'node-3'; did you mean node-0?"),
    (("c", "kill", "node-1", 0), "--gpu is for gpu-lost only"),
    (("c", "gpu-lost", "node-1"), "gpu-lost needs --gpu N (node-1 has GPUs 0-1)"),
    (("c", "gpu-lost", "node-1", 2), "node-1 has no GPU 2"),
    (("c", "nccl-hang", "node-1"), "nccl-hang needs --rank R: the job's global rank (RANK) on that node"),
    (("c", "kill", "node-1", None, 1), "--rank and --for are for nccl-hang and nccl-error only, not kill"),
    (("c", "gpu-lost", "node-1", 0, None, 30.0), "--rank and --for are for nccl-hang and nccl-error only"),
    (("c", "nccl-eror", "node-1"), "did you mean nccl-error?"),
])
def test_bad_faults_are_refused_with_a_close_match_and_nothing_is_done(ctl, args, message):
    with pytest.raises(ClusterUsageError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        faults.check(ctl, *args)
    assert info.value.exit_code == 2
    assert all(c.calls == [] for c in ctl.containers.values()) and ctl.client.network.calls == []
    assert faults.timeline(ctl.cluster.state_dir) == []


def test_cli_exits_2_on_an_unknown_action_naming_the_close_one(ctl, monkeypatch):
    monkeypatch.setattr("fakegpu.cli.cluster._controller", lambda: ctl)
    result = CliRunner().invoke(app, ["cluster", "fault", "c", "partiton", "node-1"])
    assert result.exit_code == 2
    assert "did you mean partition?" in result.stderr
    assert not (ctl.cluster.state_dir / faults.TIMELINE).exists()


def test_cli_refuses_a_bad_delay_and_reports_what_it_did(ctl, monkeypatch):
    monkeypatch.setattr("fakegpu.cli.cluster._controller", lambda: ctl)
    bad = CliRunner().invoke(app, ["cluster", "fault", "c", "kill", "node-1", "--at", "soon"])
    assert bad.exit_code == 2 and "--at 'soon' is not a duration" in bad.stderr and ctl.node(1).calls == []
    done = CliRunner().invoke(app, ["cluster", "fault", "c", "partition", "node-0"])
    assert done.exit_code == 0 and done.stdout == "cluster c: partition node-0: disconnected from fakegpu-c\n"


def test_each_action_does_its_engine_call_and_the_timeline_keeps_their_order(ctl):
    for action in ("pause", "resume", "partition", "heal", "kill"):
        event = faults.apply(ctl, faults.check(ctl, "c", action, "node-1"))
        assert event.outcome == "ok" and event.node == "node-1" and event.gpu is None
    assert ctl.node(1).calls == [("pause",), ("unpause",), ("kill",)]
    # heal restores the hostname as the node's alias: its peers find it by name (MASTER_ADDR=node-0)
    assert ctl.client.network.calls == [("disconnect", "fakegpu-c-node-1"),
                                        ("connect", "fakegpu-c-node-1", ["node-1"])]
    assert ctl.node(0).calls == []
    events = faults.timeline(ctl.cluster.state_dir)
    assert [e["action"] for e in events] == ["pause", "resume", "partition", "heal", "kill"]
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)


def test_at_waits_in_the_command_then_acts(ctl):
    waited = []
    event = faults.apply(ctl, faults.check(ctl, "c", "pause", "node-0"), 30.0, sleep=waited.append)
    assert waited == [30.0] and ctl.node(0).calls == [("pause",)] and event.time >= event.requested


def test_a_cluster_taken_down_during_the_wait_is_left_alone(ctl):
    target = faults.check(ctl, "c", "kill", "node-1")

    def down_meanwhile(_: float) -> None:
        ctl.cluster = Cluster(**{**ctl.cluster.__dict__, "run_id": "r2"})  # up again under the same name

    with pytest.raises(ClusterError, match="taken down during the wait"):
        faults.apply(ctl, target, 5.0, sleep=down_meanwhile)
    assert ctl.node(1).calls == [] and faults.timeline(ctl.cluster.state_dir) == []


def test_gpu_lost_on_an_image_node_runs_the_nodes_own_fault_inject(ctl):
    event = faults.apply(ctl, faults.check(ctl, "c", "gpu-lost", "node-1", 1))
    ((_, cmd, env),) = ctl.node(1).calls
    assert cmd == ["fakegpu", "fault", "inject", "--xid", "79", "--device", "1"]
    assert env["FAKEGPU_STATE_DIR"] == "/run/fakegpu"
    assert event.gpu == 1 and event.outcome == "ok"


def test_an_nccl_fault_runs_the_nodes_own_fault_inject_for_that_rank(ctl):
    event = faults.apply(ctl, faults.check(ctl, "c", "nccl-hang", "node-1", rank=3, lasts_s=20.0))
    ((_, cmd, env),) = ctl.node(1).calls
    assert cmd == ["fakegpu", "fault", "inject", "--nccl", "hang", "--rank", "3", "--for", "20"]
    assert env["FAKEGPU_STATE_DIR"] == "/run/fakegpu"
    assert (event.rank, event.gpu, event.outcome) == (3, None, "ok")
    (row,) = faults.timeline(ctl.cluster.state_dir)
    assert (row["action"], row["rank"]) == ("nccl-hang", 3)


def test_a_failed_action_is_recorded_as_failed_and_raised(ctl):
    ctl.node(1).exec_result = (2, b"no such device")

    def refuse():
        raise APIError("boom", explanation="Container is not paused")

    ctl.node(0).unpause = refuse
    with pytest.raises(ClusterError, match="gpu-lost on node-1 failed: fault inject in the node exited 2"):
        faults.apply(ctl, faults.check(ctl, "c", "gpu-lost", "node-1", 0))
    with pytest.raises(ClusterError, match="Container is not paused"):
        faults.apply(ctl, faults.check(ctl, "c", "resume", "node-0"))
    events = faults.timeline(ctl.cluster.state_dir)
    assert [(e["action"], e["outcome"]) for e in events] == [("gpu-lost", "failed"), ("resume", "failed")]


def test_gpu_lost_on_a_runtime_node_writes_its_board_on_the_host(tmp_path):
    """A node under the FakeGPU runtime: the board in <state_root>/<id>/state/, found through
    fakegpu.faults.inject's container path, with the node's device table numbering its GPUs."""
    (tmp_path / "cluster").mkdir()
    ctl = FakeController(_state(tmp_path / "cluster"), runtime="fakegpu")
    root = tmp_path / "runtime"
    host_dir = root / ctl.node(1).id
    (host_dir / "state").mkdir(parents=True)
    root.chmod(0o700)
    devices = resolve_devices("a100:2", "1")
    write_table(host_dir / "devices.tbl", devices, "a100:2", "1")
    layout = ContainerLayout(str(root), "state", "devices.tbl")
    event = faults.apply(ctl, faults.check(ctl, "c", "gpu-lost", "node-1", 1), layout=lambda: layout)
    (record,) = board.read(str(host_dir / "state"))
    assert (record.code, record.device, record.lost) == (79, 1, True)
    assert devices[1].uuid in event.detail and ctl.node(1).calls == []
    error = faults.apply(ctl, faults.check(ctl, "c", "nccl-error", "node-1", rank=1), layout=lambda: layout)
    _, nccl = board.read(str(host_dir / "state"))
    assert (nccl.kind, nccl.code, nccl.device, nccl.for_rank) == (board.KIND_NCCL, board.NCCL_REMOTE_ERROR, 1, True)
    assert error.detail == "NCCL operations failing with ncclRemoteError on rank 1" and ctl.node(1).calls == []


def test_concurrent_records_all_land(tmp_path):
    def put(i: int) -> None:
        faults.record(tmp_path, faults.FaultEvent(float(i), 0.0, "kill", f"node-{i}", None, "ok"))

    threads = [threading.Thread(target=put, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(e["node"] for e in faults.timeline(tmp_path)) == [f"node-{i}" for i in range(8)]
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]  # no temp file left


def test_the_report_and_its_html_carry_the_timeline(ctl):
    faults.apply(ctl, faults.check(ctl, "c", "partition", "node-1"))
    faults.apply(ctl, faults.check(ctl, "c", "gpu-lost", "node-0", 1))
    doc = merge.merge(ctl.cluster.state_dir)
    validate(doc)
    assert [(f["action"], f["node"], f["gpu"]) for f in doc["faults"]] == [("partition", "node-1", None),
                                                                           ("gpu-lost", "node-0", 1)]
    assert "faults: partition node-1, gpu-lost node-0 gpu 1" in merge.summary(doc)
    page = html.render(doc)
    assert "<h2>Fault timeline</h2><table>" in page and page.count("<td>gpu-lost GPU 1</td>") == 1
    assert json.loads(json.dumps(doc)) == doc


def test_a_report_without_faults_says_so_and_the_schema_knows_every_action(tmp_path):
    doc = merge.merge(_state(tmp_path))
    assert doc["faults"] == [] and "No faults were injected" in html.render(doc)
    schema = load_schema("cluster-report")
    assert tuple(schema["$defs"]["fault"]["properties"]["action"]["enum"]) == faults.ACTIONS
