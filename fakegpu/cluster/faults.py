"""`fakegpu cluster fault`: node loss and recovery in a running cluster, and the timeline of what was done.

A fault is one action on one node: kill, pause/resume, partition/heal (disconnect from and reconnect to the
cluster's network, with the node's hostname as alias again, so its peers resolve it), gpu-lost (Xid 79 on one of
the node's GPUs), nccl-hang / nccl-error (a rank of the job on that node: its NCCL operations hang until the
watchdog, or fail with ncclRemoteError, from then on or for a while: a link that heals, so an elastic restart can
recover) or kill-workers (SIGKILL to the training workers of the node's torchelastic agent, which lives on to
restart them). Everything is checked before anything is done or waited for.

A delay (`at_s`) is waited out by the caller's own process: no timer is left behind that could outlive the
cluster or fire into a later cluster of the same name, at the price of a command that blocks until then.

Every action that was attempted is appended to `faults.json` in the cluster's state folder (beside cluster.json
and run.json), so `cluster report` can show the timeline after `cluster down` too; a new `cluster up` of the
name starts an empty one, as it does for the reports.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from docker.errors import DockerException

from fakegpu.cluster import models as m
from fakegpu.devices import resolve_devices
from fakegpu.errors import FakeGPUError
from fakegpu.faults.inject import ContainerLayout, inject_container
from fakegpu.faults.plan import Fault
from fakegpu.profiles.matching import did_you_mean
from fakegpu.shared_state import CONTAINER_DIR

if TYPE_CHECKING:
    from fakegpu.cluster.controller import Controller

ACTIONS = ("kill", "pause", "resume", "partition", "heal", "gpu-lost", "nccl-hang", "nccl-error", "kill-workers")
NCCL_ACTIONS = {"nccl-hang": "hang", "nccl-error": "error"}
TIMELINE = "faults.json"
XID_LOST = 79
# Containers started by the engine's default runtime carry the shims in their image: their board is the node's
# own /run/fakegpu, reachable only from inside it.
_PLAIN_RUNTIMES = ("", "runc", None)
# Run inside the node by its own python3. torchelastic starts each worker with TORCHELASTIC_RUN_ID in its
# environment, which the agent itself does not carry: the workers are the processes that have it and whose
# parent does not (their own children, DataLoader workers and the like, go as they would after a crash: the
# agent ends each worker's process group when it stops the group). Prints when the signals went out and to whom.
_KILL_WORKERS = r"""
import json, os, signal, time

def environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
    except OSError:
        return {}

def parent(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0

me = os.getpid()
pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]
workers = []
for pid in pids:
    env = environ(pid)
    if b"TORCHELASTIC_RUN_ID" in env and b"TORCHELASTIC_RUN_ID" not in environ(parent(pid)):
        workers.append({"pid": pid, "rank": int(env.get(b"RANK", b"-1")),
                        "local_rank": int(env.get(b"LOCAL_RANK", b"-1"))})
at = time.time()
killed = []
for w in workers:
    try:
        os.kill(w["pid"], signal.SIGKILL)
        killed.append(w)
    except ProcessLookupError:
        pass
print(json.dumps({"time": at, "killed": killed}))
"""


@dataclass(frozen=True)
class FaultEvent:
    """One row of the timeline: when the action was done, what, where, and how it went."""

    time: float            # when it was applied (epoch seconds)
    requested: float       # when it was asked for; time - requested is the --at delay plus the engine's work
    action: str
    node: str
    gpu: int | None
    outcome: str           # ok | failed
    detail: str = ""
    rank: int | None = None  # nccl-hang, nccl-error: the job's rank it hit


def _suggest(value: str, candidates: list[str]) -> str:
    hint = did_you_mean(value, candidates, quote=False, paren=False)
    return hint or (f"; one of: {', '.join(candidates)}" if candidates else "")


def _check_action(action: str) -> None:
    if action not in ACTIONS:
        raise m.ClusterUsageError(f"unknown fault action {action!r}{_suggest(action, list(ACTIONS))}")


def _find_cluster(controller: Controller, name: str) -> m.Cluster:
    try:
        return controller.status(name)
    except m.ClusterNotFound as exc:
        hint = _suggest(name, [c.name for c in controller.list()]) or " (`fakegpu cluster list` shows them)"
        raise m.ClusterNotFound(f"no cluster named {name!r}{hint}") from exc


def _find_node(cluster: m.Cluster, node: str) -> m.Node:
    for n in cluster.nodes:
        if node in (n.hostname, n.container):
            return n
    hosts = [n.hostname for n in cluster.nodes]
    raise m.ClusterUsageError(f"cluster {cluster.name} has no node {node!r}{_suggest(node, hosts)}")


def _check_gpu(action: str, node: m.Node, gpu: int | None) -> None:
    if action != "gpu-lost":
        if gpu is not None:
            raise m.ClusterUsageError(f"--gpu is for gpu-lost only, not {action}")
        return
    count = len(resolve_devices(node.devices)) if node.devices else 0
    if gpu is None:
        raise m.ClusterUsageError(f"gpu-lost needs --gpu N ({node.hostname} has GPUs 0-{count - 1})")
    if not 0 <= gpu < count:
        raise m.ClusterUsageError(f"{node.hostname} has no GPU {gpu} (it has GPUs 0-{count - 1})")


def _check_rank(action: str, rank: int | None, lasts_s: float) -> None:
    if action not in NCCL_ACTIONS:
        if rank is not None or lasts_s:
            raise m.ClusterUsageError(f"--rank and --for are for nccl-hang and nccl-error only, not {action}")
        return
    if rank is None or rank < 0:
        raise m.ClusterUsageError(f"{action} needs --rank R: the job's global rank (RANK) on that node whose NCCL "
                                  "operations it hits")


@dataclass(frozen=True)
class Target:
    """A checked fault: the cluster and node exist, the action and GPU (or rank) make sense for them."""

    cluster: m.Cluster
    node: m.Node
    action: str
    gpu: int | None
    rank: int | None = None
    lasts_s: float = 0.0  # nccl-hang, nccl-error: how long the link stays bad; 0: until the run ends


def check(controller: Controller, name: str, action: str, node: str, gpu: int | None = None,
          rank: int | None = None, lasts_s: float = 0.0) -> Target:
    """Everything a fault needs, looked up and checked; raises ClusterUsageError (exit 2) naming a close match."""
    m.check_name(name)
    _check_action(action)
    _check_rank(action, rank, lasts_s)
    cluster = _find_cluster(controller, name)
    found = _find_node(cluster, node)
    _check_gpu(action, found, gpu)
    return Target(cluster, found, action, gpu, rank, lasts_s)


def _inject(client: Any, container: Any, fault: Fault, flags: list[str],
            layout: Callable[[], ContainerLayout] | None) -> str:
    """`fault` on the node's board: the host's copy of it under the FakeGPU runtime, else through the node's own
    `fakegpu fault inject FLAGS` (the same fault, as its command line says it)."""
    runtime = container.attrs.get("HostConfig", {}).get("Runtime")
    if runtime not in _PLAIN_RUNTIMES and layout is not None:
        done = inject_container(fault, container.id, layout(), client)
        return fault.describe() + (f" on GPU {done.record.device} ({done.uuid})" if fault.device is not None else "")
    # The node's own fakegpu writes the node's board, with the node's device identities (FAKEGPU_SEED).
    code, out = container.exec_run(
        ["fakegpu", "fault", "inject", *flags],
        # no fakecuda start-up hook for a command that imports no torch
        environment={"FAKEGPU_STATE_DIR": CONTAINER_DIR, "FAKEGPU_RUNTIME": ""})
    text = out.decode(errors="replace").strip()
    if code != 0:
        raise m.ClusterError(f"fault inject in the node exited {code}: {text}")
    return text


def _lose_gpu(client: Any, container: Any, gpu: int, layout: Callable[[], ContainerLayout] | None) -> str:
    return _inject(client, container, Fault(xid=XID_LOST, device=gpu), ["--xid", str(XID_LOST), "--device", str(gpu)],
                   layout)


def _nccl_fault(client: Any, container: Any, target: Target, layout: Callable[[], ContainerLayout] | None) -> str:
    kind = NCCL_ACTIONS[target.action]
    fault = Fault(None, None, nccl=kind, rank=target.rank, lasts_s=target.lasts_s)
    flags = ["--nccl", kind, "--rank", str(target.rank)] + (["--for", f"{target.lasts_s:g}"] if target.lasts_s else [])
    return _inject(client, container, fault, flags, layout)


def _kill_workers(container: Any, node: str) -> tuple[str, float]:
    code, out = container.exec_run(["python3", "-c", _KILL_WORKERS],
                                   environment={"FAKEGPU_RUNTIME": ""})  # no fakecuda (and no report) for it
    text = out.decode(errors="replace").strip()
    try:
        done = json.loads(text.splitlines()[-1])
    except (ValueError, IndexError):
        done = None
    if code != 0 or not isinstance(done, dict):
        raise m.ClusterError(f"the worker search in {node} exited {code}: {text[-500:]}")
    if not done["killed"]:
        raise m.ClusterError(f"no torchelastic workers running on {node} (is a torchrun job running there?)")
    who = ", ".join(f"rank {w['rank']} (local rank {w['local_rank']}, pid {w['pid']})"
                    for w in sorted(done["killed"], key=lambda w: w["rank"]))
    return f"SIGKILL to {len(done['killed'])} worker(s): {who}", float(done["time"])


def _act(controller: Controller, target: Target,
         layout: Callable[[], ContainerLayout] | None) -> tuple[str, float | None]:
    """Do the action; returns what was done and, where the node knows better than we do, when."""
    client = controller.client
    container = client.containers.get(target.node.container)
    action = target.action
    if action == "kill-workers":
        # the node's clock is the host's (one kernel); its time is the kill's, not docker exec's return
        return _kill_workers(container, target.node.hostname)
    return _engine_act(client, container, target, layout), None


def _engine_act(client: Any, container: Any, target: Target, layout: Callable[[], ContainerLayout] | None) -> str:
    action = target.action
    if action == "kill":
        container.kill()
        return "container killed"
    if action == "pause":
        container.pause()
        return "container paused"
    if action == "resume":
        container.unpause()
        return "container resumed"
    if action == "gpu-lost":
        return _lose_gpu(client, container, target.gpu or 0, layout)
    if action in NCCL_ACTIONS:
        return _nccl_fault(client, container, target, layout)
    if not target.cluster.network:
        raise m.ClusterError(f"cluster {target.cluster.name} has no network left")
    network = client.networks.get(target.cluster.network)
    if action == "partition":
        network.disconnect(container)
        return f"disconnected from {network.name}"
    network.connect(container, aliases=[target.node.hostname])
    return f"reconnected to {network.name}"


def apply(controller: Controller, target: Target, at_s: float = 0.0,
          layout: Callable[[], ContainerLayout] | None = None,
          sleep: Callable[[float], None] = time.sleep) -> FaultEvent:
    """Wait `at_s`, do the fault, append it to the timeline; a failed engine action is recorded as failed and
    raised as ClusterError. `layout` gives the FakeGPU runtime's folders, for nodes running under it."""
    requested = time.time()
    if at_s > 0:
        sleep(at_s)
        try:
            now = controller.status(target.cluster.name).run_id
        except m.ClusterNotFound:
            now = None
        if now != target.cluster.run_id:  # downed, or downed and up again, while we waited: not ours to hit
            raise m.ClusterError(f"cluster {target.cluster.name} was taken down during the wait; nothing done")
    applied: float | None = None
    try:
        (detail, applied), outcome = _act(controller, target, layout), "ok"
    except DockerException as exc:
        detail, outcome = getattr(exc, "explanation", None) or str(exc), "failed"
    except (FakeGPUError, OSError) as exc:  # the fault board's refusals (ContainerNotUsable, ...) among them
        detail, outcome = getattr(exc, "message", None) or str(exc), "failed"
    event = FaultEvent(applied or time.time(), requested, target.action, target.node.hostname, target.gpu, outcome,
                       detail, target.rank)
    record(target.cluster.state_dir, event)
    if outcome == "failed":
        raise m.ClusterError(f"{target.action} on {target.node.hostname} failed: {detail}")
    return event


def record(state_dir: Path, event: FaultEvent) -> None:
    """Append under a lock: two delayed faults of one cluster may end at the same moment."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / TIMELINE
    with open(state_dir / ".faults.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        events = timeline(state_dir)
        events.append(asdict(event))
        tmp = path.with_name(f".{TIMELINE}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({"faults": events}, indent=1))
        tmp.replace(path)  # readers (cluster report) see the old file or the new one, never half of one


def timeline(state_dir: Path) -> list[dict[str, Any]]:
    """The cluster's fault events in the order they were applied; [] when there were none."""
    try:
        doc = json.loads((state_dir / TIMELINE).read_text())
    except (OSError, ValueError):
        return []
    return list(doc.get("faults", [])) if isinstance(doc, dict) else []
