"""`fakegpu cluster --backend k8s` through the official `kubernetes` client, end to end against recorded API
exchanges (tests/k8s/api_fixtures.py) served by a replaying server on a temp kubeconfig (tests/k8s/api_server.py):
up (create, 409, a pod that fails while starting, 403), status, run by exec (websocket), report (reports read back
by exec as tar), down (every created object deleted; a 404 is no error), and the errors a user meets without a
kubeconfig or an API server. Every object the backend sends passes kubernetes-validate strict for 1.29 and the
newest version it knows. No API server can run here: a live cluster is not tested."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fakegpu.cli.main import app
from fakegpu.cluster import report as merge
from fakegpu.cluster.k8s_backend import COLLECT_SCRIPT, KubernetesBackend
from fakegpu.cluster.models import ClusterSpec
from tests.cluster.test_models_and_report import _process
from tests.k8s import api_fixtures as f
from tests.k8s.api_server import FakeApiServer

pytest.importorskip("kubernetes")
kv = pytest.importorskip("kubernetes_validate")
from kubernetes_validate.utils import all_versions  # noqa: E402
from packaging.version import Version  # noqa: E402

VERSIONS = sorted({v for v in all_versions() if Version(v) >= Version("1.29")}, key=Version)
CHECKED = [VERSIONS[0], VERSIONS[-1]]
runner = CliRunner()


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKEGPU_CLUSTER_HOME", str(tmp_path / "clusters"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return tmp_path / "clusters"


def cli(*args: str):
    return runner.invoke(app, ["cluster", *args])


def created_and_deleted(server: FakeApiServer) -> tuple[set[str], set[str]]:
    created = {f"{e.path}/{e.seen['metadata']['name']}" for e in server.used if e.method == "POST" and e.status == 201}
    deleted = {e.path for e in server.used if e.method == "DELETE"}
    return created, deleted


def sent_objects(server: FakeApiServer) -> list[dict]:
    return [e.seen for e in server.used if e.method == "POST"]


def assert_clean(server: FakeApiServer) -> None:
    assert server.problems == []
    assert server.unused() == []


def up_exchanges(name: str) -> list:
    pending = [f.pod(name, r, "Pending", 100 + r) for r in range(2)]
    return [
        f.list_pods(name, []), f.list_services(name, []),  # no cluster of that name yet
        f.create_service(name), f.create_pod(name, 0), f.create_pod(name, 1),
        f.list_pods(name, pending, rv=101),
        f.watch_pods(name, 101, [("MODIFIED", f.pod(name, 0, "Running", 110)),
                                 ("MODIFIED", f.pod(name, 1, "Running", 111))]),
        f.list_pods(name, f.running(name)), f.list_services(name, [f.service(name)]),  # up's answer
    ]


def reports_of(rank_base: int) -> dict[str, dict]:
    out = {}
    for local in range(2):
        rep, act = _process(1000 + rank_base + local, rank_base + local, 1 << 30)
        out[f"fakecuda-{rep['pid']}.json"] = rep
        out[f"activity-{act['pid']}.json"] = act
    return out


def test_up_status_run_report_down_through_the_api_and_down_leaves_nothing(tmp_path, home):
    name = "demo"
    job = ["python3", "train.py", "--node", "$NODE_RANK"]
    exchanges = [
        *up_exchanges(name),
        f.list_pods(name, f.running(name)), f.list_services(name, [f.service(name)]),  # status
        f.list_pods(name, f.running(name)), f.list_services(name, [f.service(name)]),  # run finds the nodes
    ]
    for rank in range(2):
        exchanges += [
            f.read_pod(name, rank),  # the node's environment, for $NODE_RANK
            f.exec_in(name, rank, ["env", "PYTHONUNBUFFERED=1", "python3", "train.py", "--node", str(rank)],
                      [(1, f"step 1 loss {rank}.5\n".encode()), (2, b"a warning\n"), (1, b"done")]),
            f.read_pod(name, rank),  # the job ended: is the node itself still there
            f.exec_in(name, rank, ["sh", "-c", COLLECT_SCRIPT], [(1, f.tar_of(reports_of(2 * rank)))]),
        ]
    exchanges += [
        f.list_pods(name, f.running(name)), f.delete_pod(name, 0), f.delete_pod(name, 1),
        f.list_services(name, [f.service(name)]), f.delete_service(name),
        f.list_pods(name, []),  # gone: down returns
    ]
    with FakeApiServer(exchanges) as server:
        config = server.kubeconfig(tmp_path)
        result = cli("up", name, "--backend", "k8s", "--kubeconfig", str(config), "--image", f.IMAGE,
                     "--devices", "a100:4")
        assert result.exit_code == 0, result.output + str(server.problems)
        assert "service fakegpu-demo in namespace rehearse" in result.stdout
        assert "[demo] 2 node pods running" in result.stderr
        # later commands find the cluster through what up recorded: no --backend, no --kubeconfig
        status = json.loads(cli("status", name, "--json").stdout)["data"]
        assert [(n["hostname"], n["status"], n["devices"]) for n in status["nodes"]] == [
            ("node-0", "running", "a100:4"), ("node-1", "running", "a100:4")]
        assert status["healthy"] and status["network"] == "fakegpu-demo"
        result = cli("run", name, "--", *job)
        assert result.exit_code == 0, result.output + str(server.problems)
        lines = result.stdout.splitlines()
        for rank in range(2):
            assert [ln for ln in lines if ln.startswith(f"[node-{rank}]")] == [
                f"[node-{rank}] step 1 loss {rank}.5", f"[node-{rank}] a warning", f"[node-{rank}] done"]
        result = cli("down", name)
        assert result.exit_code == 0 and "removed 2 pods, 1 services" in result.stdout
        assert_clean(server)
        created, deleted = created_and_deleted(server)
    assert created == deleted and len(created) == 3
    # the run's reports came back by exec and merge like Docker's
    doc = merge.build(name)
    assert doc["rank_count"] == 4 and [n["status"] for n in doc["nodes"]] == ["ok", "ok"]
    assert doc["job"]["command"] == job and doc["verdict"] == "fits"
    # what went over the wire is what a real API server would accept
    for obj in sent_objects(server):
        for version in CHECKED:
            kv.validate(obj, version, strict=True)
    pods = [o for o in sent_objects(server) if o["kind"] == "Pod"]
    env = {e["name"]: e["value"] for e in pods[1]["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == "node-0.fakegpu-demo" and env["NODE_RANK"] == "1"
    # the GPUs are the device plugin's to give, in both modes: FAKEGPU_DEVICES would decide alone under the runtime
    assert "FAKEGPU_DEVICES" not in env and env["FAKEGPU_RUNTIME"] == "fakecuda"
    native = KubernetesBackend._env(ClusterSpec(name="n", mode="native"), 0, 4, "node-0.fakegpu-n")
    assert "FAKEGPU_DEVICES" not in native and native["FAKEGPU_RUNTIME"] == "native"


def test_a_pod_that_fails_while_starting_fails_up_and_what_was_created_is_deleted(tmp_path):
    name = "broken"
    failed = f.pod(name, 1, "Failed", 112, exit_code=1)
    exchanges = [
        f.list_pods(name, []), f.list_services(name, []),
        f.create_service(name), f.create_pod(name, 0), f.create_pod(name, 1),
        f.list_pods(name, [f.pod(name, r, "Pending", 100 + r) for r in range(2)], rv=101),
        f.watch_pods(name, 101, [("MODIFIED", f.pod(name, 0, "Running", 110)), ("MODIFIED", failed)]),
        # rollback, newest first; node-1 was already deleted by someone: 404 is no error
        f.delete_pod(name, 1, found=False), f.delete_pod(name, 0), f.delete_service(name),
    ]
    with FakeApiServer(exchanges) as server:
        result = cli("up", name, "--backend", "k8s", "--kubeconfig", str(server.kubeconfig(tmp_path)),
                     "--image", f.IMAGE)
        assert_clean(server)
        created, deleted = created_and_deleted(server)
    assert result.exit_code == 1
    assert "node pod fakegpu-broken-node-1 ended (Failed) while starting" in result.stderr
    assert "Error, exit status 1" in result.stderr and "removing what was created" in result.stderr
    assert created == deleted


def test_a_name_taken_by_an_object_not_ours_is_refused_and_nothing_is_deleted(tmp_path):
    name = "taken"
    conflict = f.status(409, "AlreadyExists", 'services "fakegpu-taken" already exists', "services", "fakegpu-taken")
    exchanges = [f.list_pods(name, []), f.list_services(name, []),
                 f.create_service(name, status_code=409, response=conflict)]
    with FakeApiServer(exchanges) as server:
        result = cli("up", name, "--backend", "k8s", "--kubeconfig", str(server.kubeconfig(tmp_path)),
                     "--image", f.IMAGE)
        assert_clean(server)  # no DELETE: one would be an unexpected request
    assert result.exit_code == 2
    assert "Service fakegpu-taken already exists in namespace 'rehearse' but is not labelled" in result.stderr


def test_forbidden_says_which_rights_are_missing_and_rolls_back(tmp_path):
    name = "norbac"
    denied = f.status(403, "Forbidden", 'pods is forbidden: User "tester" cannot create resource "pods" in API '
                      'group "" in the namespace "rehearse"', "pods")
    exchanges = [f.list_pods(name, []), f.list_services(name, []), f.create_service(name),
                 f.create_pod(name, 0, status_code=403, response=denied), f.delete_service(name)]
    with FakeApiServer(exchanges) as server:
        result = cli("up", name, "--backend", "k8s", "--kubeconfig", str(server.kubeconfig(tmp_path)),
                     "--image", f.IMAGE)
        assert_clean(server)
        created, deleted = created_and_deleted(server)
    assert result.exit_code == 1 and created == deleted
    assert "forbidden: creating Pod fakegpu-norbac-node-0 in namespace 'rehearse'" in result.stderr
    assert 'cannot create resource "pods"' in result.stderr and "pods/exec and services" in result.stderr


def test_a_failing_node_fails_the_run_with_its_exit_status(tmp_path):
    name = "fails"
    exchanges = [f.list_pods(name, f.running(name)), f.list_services(name, [f.service(name)])]
    argv = ["env", "PYTHONUNBUFFERED=1", "sh", "-c", "exit $NODE_RANK"]
    for rank in range(2):
        exchanges += [f.read_pod(name, rank),
                      f.exec_in(name, rank, argv, [(2, b"bye\n")], exit_code=3 * rank),
                      f.read_pod(name, rank), f.exec_in(name, rank, ["sh", "-c", COLLECT_SCRIPT], [(1, f.tar_of({}))])]
    # node-1's failure may reach the controller while node-0's stream is still open: then it is stopped
    exchanges += [f.read_pod(name, 1, optional=True), f.read_pod(name, 1, optional=True),
                  f.exec_in(name, 0, ["python3", "-c", "import os, signal; os.kill(-1, signal.SIGTERM)"], [],
                            optional=True)]
    with FakeApiServer(exchanges) as server:
        # run's options come before the name: what follows it is the job's
        result = cli("run", "--backend", "k8s", "--kubeconfig", str(server.kubeconfig(tmp_path)), name, "--",
                     "exit $NODE_RANK")
        assert_clean(server)
    assert result.exit_code == 3, result.output
    assert "node-1 (node rank 1) failed: job exited with status 3" in result.stderr


def test_down_twice_is_idempotent_and_a_pod_gone_meanwhile_is_no_error(tmp_path):
    name = "twice"
    exchanges = [f.list_pods(name, f.running(name)), f.delete_pod(name, 0), f.delete_pod(name, 1, found=False),
                 f.list_services(name, [f.service(name)]), f.delete_service(name),
                 f.list_pods(name, [f.pod(name, 0, "Running", 300, deleting=True)]),  # still terminating
                 f.list_pods(name, []),
                 f.list_pods(name, []), f.list_services(name, []), f.list_pods(name, [])]  # the second down
    with FakeApiServer(exchanges) as server:
        config = str(server.kubeconfig(tmp_path))
        first = cli("down", name, "--backend", "k8s", "--kubeconfig", config)
        second = cli("down", name, "--backend", "k8s", "--kubeconfig", config)
        assert_clean(server)
    assert first.exit_code == 0 and "removed 1 pods, 1 services" in first.stdout
    assert second.exit_code == 0 and "removed 0 pods, 0 services" in second.stdout


def test_no_kubeconfig_and_no_api_server_get_clear_messages(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    result = cli("up", "c", "--backend", "k8s")
    assert result.exit_code == 2
    assert f"no kubeconfig at {tmp_path}/.kube/config" in result.stderr and "--kubeconfig" in result.stderr
    gone = FakeApiServer([])
    config, port = gone.kubeconfig(tmp_path), gone.httpd.server_address[1]
    gone.httpd.server_close()  # nothing listens there any more
    result = cli("status", "c", "--backend", "k8s", "--kubeconfig", str(config))
    assert result.exit_code == 1
    assert f"Kubernetes API server at http://127.0.0.1:{port} not reachable (listing pods)" in result.stderr


def test_names_and_options_kubernetes_cannot_carry_are_refused_before_any_request(tmp_path):
    with FakeApiServer([]) as server:
        config = str(server.kubeconfig(tmp_path))
        bad_name = cli("up", "my_cluster", "--backend", "k8s", "--kubeconfig", config)
        workdir = cli("up", "ok", "--backend", "k8s", "--kubeconfig", config, "--workdir", str(tmp_path))
        assert server.problems == [] and server.used == []
    assert bad_name.exit_code == 2 and "no '_' or '.'" in bad_name.stderr
    assert workdir.exit_code == 2 and "--workdir mounts a host folder" in workdir.stderr
