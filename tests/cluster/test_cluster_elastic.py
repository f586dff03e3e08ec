"""No Docker engine: what `cluster run` reads from an elastic torchrun job's output (fakegpu.cluster.elastic), the
kill-workers fault on stand-ins for the SDK's objects and on real processes, and the recovery in the merged report
and its HTML.

The two logs in data/ are what `cluster run` printed for real rehearsals on this machine (torch 2.15.0 in the
fakegpu/pytorch node image, 2 nodes x 1 rank, `torchrun --nnodes 2 --max-restarts 1 --rdzv-backend c10d`,
LOGLEVEL=INFO), trimmed of torchrun's configuration dump and most step lines:
- torchrun-elastic-restart.log: kill-workers on node-1 at its first step; node-1's agent restarts its group
  (FAILED, 1/1 attempts left), node-0's rank sees the connection reset and its agent restarts for the membership
  change; both rendezvous again and finish (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1);
- torchrun-elastic-stale-store.log: the same with node-0's new rank 8 s late and torch's default shared
  rendezvous store: node-1's new rank connects to the address node-0's killed rank left in the store, gloo gives
  up, node-1 has no restarts left and the job fails.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakegpu.cluster import elastic, faults, html
from fakegpu.cluster import report as merge
from fakegpu.cluster.controller import Controller
from fakegpu.cluster.models import ClusterError
from fakegpu.reports import validate
from tests.cluster.test_cluster_faults import FakeController
from tests.cluster.test_models_and_report import _state

DATA = Path(__file__).parent / "data"
_LINE = re.compile(r"^\[(node-\d+)\] (.*)$")
_STAMP = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) ")
YEAR = 2026
TRANSPORT_S = 0.05  # arrival after the stamp


def _epoch(month: int, day: int, h: int, m: int, s: int, us: int) -> float:
    return calendar.timegm((YEAR, month, day, h, m, s)) + us / 1e6


def replay(name: str, folder: Path = DATA) -> list[dict]:
    """Feed a recorded `cluster run` output to one AgentLog per node, as the controller's pumps do; a line's
    arrival is its stamp (or the last one seen) plus a transport delay."""
    logs: dict[str, elastic.AgentLog] = {}
    last = 0.0
    for raw in (folder / name).read_text().splitlines():
        found = _LINE.match(raw)
        if not found:
            continue  # fakegpu's own lines
        node, text = found.groups()
        stamp = _STAMP.match(text)
        if stamp:
            last = _epoch(*(int(g) for g in stamp.groups()))
        logs.setdefault(node, elastic.AgentLog(node)).feed(text, last + TRANSPORT_S)
    for log in logs.values():
        log.close()
    return sorted((e.as_dict() for log in logs.values() for e in log.events), key=lambda e: e["time"])


def kinds(events: list[dict], node: str) -> list[str]:
    return [e["kind"] for e in events if e["node"] == node]


def test_a_restart_after_killed_workers_is_read_from_the_agents_log():
    events = replay("torchrun-elastic-restart.log")
    assert kinds(events, "node-1") == ["rendezvous", "first-output", "worker-failed", "restart", "rendezvous",
                                       "first-output", "succeeded"]
    # node-0's agent restarts for the waiting node; torchelastic does not count that against --max-restarts
    assert kinds(events, "node-0") == ["rendezvous", "first-output", "exception", "membership-change",
                                       "rendezvous", "first-output", "succeeded"]
    by = {(e["node"], e["kind"]): e for e in events}  # the last of each kind
    failed = by["node-1", "worker-failed"]
    assert (failed["exit_code"], failed["local_rank"], failed["pid"], failed["source"]) == (-9, 0, 17, "torchelastic")
    assert (by["node-1", "restart"]["attempts_left"], by["node-1", "restart"]["max_restarts"]) == (1, 1)
    assert (by["node-1", "rendezvous"]["restart_count"], by["node-1", "rendezvous"]["group_rank"],
            by["node-1", "rendezvous"]["group_world_size"]) == (1, 1, 2)
    assert by["node-0", "rendezvous"]["restart_count"] == 0 and by["node-0", "membership-change"]["nodes_waiting"] == 1
    # what rank 0 saw of its dead peer: the exception that ended its traceback
    seen = by["node-0", "exception"]
    assert seen["rank"] == 0 and seen["source"] == "job"
    assert seen["detail"].startswith("RuntimeError: [") and "Connection reset by peer" in seen["detail"]
    assert by["node-1", "first-output"]["detail"] == "rank 1/2 restart 1 step 1/10 loss 0.3101"
    # the agent's stamp, not the arrival: 18:40:07.097 is when node-1's agent saw its worker die
    assert by["node-1", "worker-failed"]["time"] == pytest.approx(_epoch(12, 4, 18, 40, 7, 97000))


def test_an_agent_line_glued_to_a_killed_workers_unfinished_line_is_still_read(tmp_path):
    # An unbuffered print() writes its text and its newline in two writes: a worker killed between them leaves its
    # line open, and the agent's worker-failed line arrives glued to it (an elastic rehearsal under load lost the
    # event so). Glue it so in the recorded log; the events must not change.
    lines = (DATA / "torchrun-elastic-restart.log").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "failed (exitcode: -9)" in line)
    lines[at] = "[node-1] rank 1/2 restart 0 step 2/10 loss " + lines[at].removeprefix("[node-1] ")
    glued = tmp_path / "glued.log"
    glued.write_text("\n".join(lines) + "\n")
    events = replay(glued.name, tmp_path)
    assert events == replay("torchrun-elastic-restart.log")
    failed = next(e for e in events if e["kind"] == "worker-failed")
    assert (failed["node"], failed["exit_code"], failed["pid"]) == ("node-1", -9, 17)


@pytest.mark.parametrize("zone_h", [0, 2, -5, 5.75, 13])
def test_stamps_in_any_zone_give_the_same_epoch_times(zone_h):
    # the node's clock is the host's; only the zone it prints in differs, and the arrival is in epoch seconds
    stamp = _epoch(12, 4, 18, 40, 7, 97000)
    local = stamp + zone_h * 3600  # what a clock in that zone prints
    t = time.gmtime(local)
    assert elastic.stamp_time(stamp + 0.3, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, 97000) == \
        pytest.approx(stamp)


def test_a_stamp_across_new_year_and_an_implausible_one():
    stamp = calendar.timegm((YEAR, 12, 31, 23, 59, 59)) + 0.9
    # the line arrives after midnight: the year taken from the arrival is one too many
    assert elastic.stamp_time(stamp + 0.2, 12, 31, 23, 59, 59, 900000) == pytest.approx(stamp)
    # minutes away from any zone offset: the arrival is kept
    assert elastic.stamp_time(stamp + 400, 12, 31, 23, 59, 59, 900000) == stamp + 400


def test_a_failed_restart_is_not_counted_as_progress_and_the_job_did_not_recover():
    events = replay("torchrun-elastic-stale-store.log")
    node1 = [e for e in events if e["node"] == "node-1"]
    assert [e["kind"] for e in node1] == ["rendezvous", "first-output", "worker-failed", "restart", "rendezvous",
                                          "exception", "worker-failed", "exception"]
    # gloo's and c10's log lines and the tracebacks after the new rendezvous are not progress
    assert "connectFullMesh failed" in node1[5]["detail"] and node1[6]["exit_code"] == 1
    assert node1[7]["detail"].startswith("torch.distributed.elastic.multiprocessing.errors.ChildFailedError")
    # cluster run stopped node-0's agent after node-1 failed; the agent's own exception says so
    assert kinds(events, "node-0")[-2:] == ["agent-signal", "exception"]
    assert "SignalException: Process 12 got signal: 15" in events[-1]["detail"]
    fault_time = node1[2]["time"] - 0.1
    job = {"started": events[0]["time"] - 10, "ended": events[-1]["time"] + 1}
    fault = {"time": fault_time, "action": "kill-workers", "node": "node-1", "outcome": "ok"}
    (rec,) = elastic.recoveries([fault], events, ["node-0", "node-1"], job)
    assert rec["recovered"] is False and rec["time_lost_s"] is None and rec["first_output_s"] is None
    assert rec["rendezvous_s"] == pytest.approx(node1[4]["time"] - fault_time, abs=0.01)
    assert rec["restarts"] == {"node-0": 1, "node-1": 1}


def test_recovery_times_and_faults_outside_the_job():
    events = replay("torchrun-elastic-restart.log")
    kill = next(e for e in events if e["kind"] == "worker-failed")["time"] - 0.087
    job = {"started": events[0]["time"] - 10, "ended": events[-1]["time"] + 1}
    timeline = [{"time": job["started"] - 5, "action": "pause", "node": "node-0", "outcome": "ok"},  # before
                {"time": kill, "action": "kill-workers", "node": "node-1", "outcome": "ok"},
                {"time": kill + 1, "action": "kill-workers", "node": "node-0", "outcome": "failed"}]
    (rec,) = elastic.recoveries(timeline, events, ["node-0", "node-1"], job)
    again = [e["time"] for e in events if e["kind"] == "rendezvous"][-2:]
    progress = [e["time"] for e in events if e["kind"] == "first-output"][-2:]
    assert rec["fault"] == 1 and rec["recovered"] is True and rec["restarts"] == {"node-0": 1, "node-1": 1}
    assert rec["rendezvous_s"] == pytest.approx(max(again) - kill)
    assert rec["time_lost_s"] == rec["first_output_s"] == pytest.approx(max(progress) - kill)
    assert elastic.recoveries(timeline, events, ["node-0", "node-1"], None) == []


def test_torchrun_jobs_get_torchelastics_info_log_unless_the_node_sets_it():
    run = Controller._exec_env
    assert run(["torchrun", "--nnodes", "2", "x.py"], []) == {"PYTHONUNBUFFERED": "1", "LOGLEVEL": "INFO"}
    assert run(["sh", "-c", "STEPS=3 /usr/local/bin/torchrun x.py"], [])["LOGLEVEL"] == "INFO"
    assert run(["python3", "-m", "torch.distributed.run", "x.py"], [])["LOGLEVEL"] == "INFO"
    assert "LOGLEVEL" not in run(["python3", "train.py"], [])
    assert "LOGLEVEL" not in run(["python3", "torchrun_helper.py"], [])
    assert "LOGLEVEL" not in run(["torchrun", "x.py"], ["LOGLEVEL=WARNING"])


# ---- kill-workers -------------------------------------------------------------------------------------------


@pytest.fixture
def ctl(tmp_path) -> FakeController:
    return FakeController(_state(tmp_path))


def test_kill_workers_runs_the_search_in_the_node_and_records_the_nodes_time(ctl):
    ctl.node(1).exec_result = (0, json.dumps({"time": 1234.5, "killed": [
        {"pid": 31, "rank": 3, "local_rank": 1}, {"pid": 30, "rank": 2, "local_rank": 0}]}).encode())
    event = faults.apply(ctl, faults.check(ctl, "c", "kill-workers", "node-1"))
    ((_, cmd, env),) = ctl.node(1).calls
    assert cmd[:2] == ["python3", "-c"] and env == {"FAKEGPU_RUNTIME": ""}  # no fakecuda, so no report of its own
    assert event.time == 1234.5 and event.outcome == "ok" and event.gpu is None
    assert event.detail == ("SIGKILL to 2 worker(s): rank 2 (local rank 0, pid 30), rank 3 (local rank 1, pid 31)")
    assert ctl.node(0).calls == []
    assert [e["action"] for e in faults.timeline(ctl.cluster.state_dir)] == ["kill-workers"]


def test_kill_workers_without_a_job_is_recorded_as_failed(ctl):
    ctl.node(1).exec_result = (0, b'{"time": 1.0, "killed": []}')
    with pytest.raises(ClusterError, match="no torchelastic workers running on node-1"):
        faults.apply(ctl, faults.check(ctl, "c", "kill-workers", "node-1"))
    ctl.node(0).exec_result = (1, b"python3: not found")
    with pytest.raises(ClusterError, match="the worker search in node-0 exited 1"):
        faults.apply(ctl, faults.check(ctl, "c", "kill-workers", "node-0"))
    assert [(e["action"], e["outcome"]) for e in faults.timeline(ctl.cluster.state_dir)] == [
        ("kill-workers", "failed"), ("kill-workers", "failed")]


def test_kill_workers_is_checked_up_front_like_the_others(ctl):
    from fakegpu.cluster.models import ClusterUsageError

    with pytest.raises(ClusterUsageError, match="did you mean kill-workers"):
        faults.check(ctl, "c", "kill-worker", "node-1")
    with pytest.raises(ClusterUsageError, match="--gpu is for gpu-lost only"):
        faults.check(ctl, "c", "kill-workers", "node-1", 0)
    assert all(c.calls == [] for c in ctl.containers.values())


# Run in a PID namespace of its own (unshare): the search reads the whole /proc it sees, and on a shared host it
# would find, and kill, any torchrun worker there (another test's, a developer's job). Inside, it sees the stand-in
# agent, its workers and the bystander only, as in a node container; the namespace ends with the driver (its pid 1),
# so nothing outlives the test.
_SCENARIO = r"""
import json, os, subprocess, sys, time
tmp, agent_code, search = sys.argv[1:4]

def gone(pid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False

env = {k: v for k, v in os.environ.items() if k != "TORCHELASTIC_RUN_ID"}
agent = subprocess.Popen([sys.executable, "-c", agent_code], env=env, stdout=subprocess.PIPE, text=True)
bystander = subprocess.Popen(["sleep", "60"])
deadline = time.monotonic() + 20
while not all(os.path.exists(f"{tmp}/{n}") for n in ("workers", "grandchild-0", "grandchild-1")):
    if time.monotonic() > deadline:
        sys.exit("stand-in agent did not start its workers")
    time.sleep(0.05)
time.sleep(0.1)
grandchildren = [int(open(f"{tmp}/grandchild-{r}").read()) for r in (0, 1)]
workers = sorted(int(p) for p in open(f"{tmp}/workers").read().split())
out = subprocess.run([sys.executable, "-c", search], capture_output=True, text=True, env=env, timeout=30)
print(json.dumps({"workers": workers, "search": out.stdout, "search_err": out.stderr,
                  "agent": agent.communicate(timeout=10)[0].strip(), "bystander": bystander.poll() is None,
                  "grandchildren_gone": [gone(pid, 0.2) for pid in grandchildren]}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace (unshare --pid) needs root")
def test_the_worker_search_kills_the_agents_children_only(tmp_path):
    """On real processes: a stand-in agent (no TORCHELASTIC_RUN_ID) with two workers that carry it, as
    torchelastic starts them, each with a child of its own (a DataLoader worker, say), and a bystander."""
    agent_code = f"""
import os, subprocess, sys, time
kids = []
for rank in (0, 1):
    env = {{**os.environ, "TORCHELASTIC_RUN_ID": "r", "RANK": str(4 + rank), "LOCAL_RANK": str(rank)}}
    script = "sleep 60 >/dev/null & echo $! > {tmp_path}/grandchild-$LOCAL_RANK; wait"
    kids.append(subprocess.Popen(["sh", "-c", script], env=env))
with open("{tmp_path}/workers", "w") as f:
    f.write(" ".join(str(k.pid) for k in kids))
print([k.wait() for k in kids], flush=True)
"""
    run = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", _SCENARIO,
                          str(tmp_path), agent_code, faults._KILL_WORKERS],
                         capture_output=True, text=True, timeout=90)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    done = json.loads(seen["search"])
    assert sorted(w["pid"] for w in done["killed"]) == seen["workers"], seen
    assert sorted((w["rank"], w["local_rank"]) for w in done["killed"]) == [(4, 0), (5, 1)]
    # the agent sees each worker die of SIGKILL, as torchelastic's would, and lives on
    assert seen["agent"] == f"[{-signal.SIGKILL}, {-signal.SIGKILL}]"
    assert seen["bystander"]
    assert seen["grandchildren_gone"] == [False, False]  # the agent's stop ends their groups


# ---- the merged report --------------------------------------------------------------------------------------


def _with_run(tmp_path: Path, exit_code: int = 0) -> tuple[Path, list[dict], float]:
    state = _state(tmp_path)
    events = replay("torchrun-elastic-restart.log")
    kill = next(e for e in events if e["kind"] == "worker-failed")["time"] - 0.087
    run = json.loads((state / "run.json").read_text())
    run.update(started=events[0]["time"] - 10, ended=events[-1]["time"] + 1, exit_code=exit_code,
               elastic_events=events)
    (state / "run.json").write_text(json.dumps(run))
    faults.record(state, faults.FaultEvent(kill, kill - 1, "kill-workers", "node-1", None, "ok",
                                           "SIGKILL to 1 worker(s): rank 1 (local rank 0, pid 17)"))
    # rank 3 started twice: the killed start wrote no report, a first start that raised did
    for name, restart in (("103.activity.json", 1), ("203.activity.json", 0)):
        act = json.loads((state / "reports" / "node-1" / "103.activity.json").read_text())
        act.update(pid=int(name[:3]), restart_count=restart)
        (state / "reports" / "node-1" / name).write_text(json.dumps(act))
    rep = json.loads((state / "reports" / "node-1" / "103.json").read_text())
    (state / "reports" / "node-1" / "203.json").write_text(json.dumps({**rep, "pid": 203}))
    return state, events, kill


def test_the_report_carries_events_restarts_and_time_lost(tmp_path):
    state, events, _ = _with_run(tmp_path)
    doc = merge.merge(state)
    validate(doc)
    assert doc["rank_count"] == 4  # rank 3's two starts are one rank
    assert [n["restarts"] for n in doc["nodes"]] == [1, 1]
    assert doc["elastic"]["events"] == events and set(doc["elastic"]["sources"]) == {"torchelastic", "job"}
    (rec,) = doc["elastic"]["recoveries"]
    assert rec["recovered"] and rec["fault"] == 0 and rec["time_lost_s"] > rec["rendezvous_s"] > 0
    starts = sorted(p["restart_count"] for p in doc["nodes"][1]["processes"] if p["rank"] == 3)
    assert starts == [0, 1]
    text = merge.summary(doc)
    assert "restarts (torchelastic's log): node-0 1, node-1 1" in text
    assert f"after kill-workers node-1: every node rendezvoused again after {rec['rendezvous_s']:.1f} s" in text
    assert f"time lost {rec['time_lost_s']:.1f} s" in text and "3 (restart 1)" in text


def test_the_html_timeline_interleaves_the_fault_and_the_logs_events_in_order(tmp_path):
    state, events, _ = _with_run(tmp_path)
    page = html.render(merge.merge(state))
    table = page.split("<h2>Fault timeline</h2>", 1)[1]
    rows = re.findall(r"<tr><td>[^<]*</td><td>[^<]*</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td>", table)
    what = [(src, node, kind) for src, node, kind in rows]
    fault_at = what.index(("fakegpu cluster fault", "node-1", "kill-workers"))
    assert what[fault_at + 1] == ("torchelastic log", "node-1", "worker-failed")
    assert what[fault_at + 2:fault_at + 4] == [("torchelastic log", "node-1", "restart"),
                                              ("torchelastic log", "node-0", "membership-change")]
    assert ("job output", "node-0", "exception") in what[:fault_at]  # replayed lines without a stamp come early
    assert len(rows) == len(events) + 1
    assert "time lost" in table and "nothing is inferred" in table and "LOGLEVEL=INFO" in table


def test_a_report_of_an_older_run_without_events_still_validates(tmp_path):
    doc = merge.merge(_state(tmp_path))
    validate(doc)
    assert doc["elastic"]["events"] == [] and doc["elastic"]["recoveries"] == []
    assert [n["restarts"] for n in doc["nodes"]] == [0, 0] and "restarts" not in merge.summary(doc)
