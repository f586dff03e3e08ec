"""The cluster controller: what a rehearsal is, whatever its nodes are. `up` checks the spec, makes the state
folder and has the backend create the nodes (removing what was made when that fails or is interrupted); `run`
executes a job on every node at once, streams its output and ends it everywhere when one node fails; `status`,
`list` and `down` find clusters by label. Where nodes live is a backend's business (fakegpu.cluster.backend):
Docker containers by default, pods on Kubernetes with `--backend k8s`."""

from __future__ import annotations

import json
import queue
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakegpu.cluster import models as m
from fakegpu.cluster.backend import Backend, JobEnd, NodeJob, Progress
from fakegpu.cluster.elastic import AgentLog
from fakegpu.devices import resolve_devices
from fakegpu.errors import EXIT_INTERRUPTED
from fakegpu.interrupts import interrupt_on_stop_signals

# How long an interrupted run waits for its job to end in the nodes after asking them to stop it.
STOP_WAIT_S = 15.0
_VAR = re.compile(r"\$(\w+)|\$\{(\w+)\}")
# torchelastic logs restarts and rendezvous at INFO, which it hides by default; a torchrun job gets LOGLEVEL=INFO
# (unless the node or the command sets it) so that the run record can show them.
_TORCHRUN = re.compile(r"(^|[\s/])torchrun(\s|$)|torch\.distributed\.run\b")
BACKENDS = ("docker", "k8s")


@dataclass
class NodeOutcome:
    node: str
    rank: int
    exit_code: int | None = None
    status: str = "running"  # ok | failed | stopped (ended by us after another node failed, or Ctrl-C)
    reason: str = ""
    tail: list[str] = field(default_factory=list)
    log: AgentLog = field(init=False)  # torchelastic's events in this node's output

    def __post_init__(self) -> None:
        self.log = AgentLog(self.node)

    def as_dict(self) -> dict:
        return {"node": self.node, "rank": self.rank, "exit_code": self.exit_code, "status": self.status,
                "reason": self.reason}


@dataclass
class RunResult:
    exit_code: int
    nodes: list[NodeOutcome]

    @property
    def failed(self) -> list[NodeOutcome]:
        return [n for n in self.nodes if n.status == "failed"]


class Controller:
    def __init__(self, client: Any = None, backend: Backend | None = None) -> None:
        """`client` (a docker.DockerClient) keeps the Docker-only constructor working; `backend` picks another."""
        if backend is None:
            from fakegpu.cluster.docker_backend import DockerBackend

            backend = DockerBackend(client)
        self.backend = backend

    @property
    def client(self) -> Any:
        """The Docker SDK client, for what only Docker nodes do (`cluster fault`)."""
        client = getattr(self.backend, "client", None)
        if self.backend.kind != "docker" or client is None:
            raise m.ClusterUsageError(f"this needs the Docker backend; the cluster runs on {self.backend.kind}")
        return client

    # ---- finding clusters -------------------------------------------------------------------------------------

    def status(self, name: str) -> m.Cluster:
        m.check_name(name)
        cluster = self.backend.find(name)
        if cluster is None:
            raise m.ClusterNotFound(f"no cluster named {name!r} (`fakegpu cluster list` shows them)")
        return cluster

    def list(self) -> list[m.Cluster]:
        return self.backend.find_all()

    # ---- up and down ------------------------------------------------------------------------------------------

    def up(self, spec: m.ClusterSpec, progress: Progress = lambda _: None) -> m.Cluster:
        """Validate everything, then create; any failure or Ctrl-C on the way removes what was made."""
        devices = resolve_devices(spec.devices)  # raises InvalidDeviceSpec before anything exists
        self.backend.check_spec(spec)
        if self.backend.exists(spec.name):
            raise m.ClusterExists(f"a cluster named {spec.name!r} exists; `fakegpu cluster down {spec.name}` first")
        run_id = uuid.uuid4().hex[:12]
        state_dir = m.state_root() / spec.name
        shutil.rmtree(state_dir, ignore_errors=True)  # a new cluster of this name: the old one's reports go
        try:
            self._write_state(spec, run_id, state_dir, len(devices))
            self.backend.create(spec, run_id, state_dir, len(devices), progress)
        except BaseException:
            progress("start failed; removing what was created")
            self.backend.undo_create(spec.name)
            raise
        return self.status(spec.name)

    def _write_state(self, spec: m.ClusterSpec, run_id: str, state_dir: Path, ndev: int) -> None:
        (state_dir / "reports").mkdir(parents=True, exist_ok=True)
        (state_dir / "cluster.json").write_text(json.dumps({
            "name": spec.name, "run_id": run_id, "nodes": spec.nodes, "devices": spec.devices, "mode": spec.mode,
            "image": spec.image, "nproc_per_node": spec.nproc_per_node or ndev, "created": time.time(),
            # later commands on this name find its nodes again through this (fakegpu.cluster.select)
            "backend": {"kind": self.backend.kind, **self.backend.target()},
        }, indent=1))

    def down(self, name: str, purge: bool = False) -> dict[str, int]:
        """Remove every object labelled with the cluster's name. Idempotent."""
        m.check_name(name)
        removed = self.backend.remove(name)
        if purge:
            shutil.rmtree(m.state_root() / name, ignore_errors=True)
        return removed

    # ---- running a job ----------------------------------------------------------------------------------------

    def run(self, name: str, argv: Sequence[str], emit: Callable[[str], None] = print,
            grace_s: float = 30.0) -> RunResult:
        """Run argv on every node at once; stream `[node-N] line`; when a node fails, end the job on the others
        (a torchrun left alone would wait for its dead peer until gloo's 30-minute timeout)."""
        cluster = self.status(name)
        down = [n.hostname for n in cluster.nodes if not n.running]
        if down or not cluster.nodes:
            raise m.ClusterError(f"cluster {name!r} is not running (nodes down: {', '.join(down) or 'all'}); "
                                 f"`fakegpu cluster down {name}` and up again")
        self._clear_reports(cluster.state_dir)
        outcomes = [NodeOutcome(n.hostname, n.rank) for n in cluster.nodes]
        lines: queue.Queue = queue.Queue()
        jobs = []
        for node in cluster.nodes:
            node_env = self.backend.node_env(cluster, node)
            cmd = self._command(argv, node_env)
            jobs.append(self.backend.start(cluster, node, cmd, self._exec_env(cmd, node_env)))
        started = time.time()
        threads = [threading.Thread(target=self._pump, args=(o, j, lines), daemon=True)
                   for o, j in zip(outcomes, jobs, strict=True)]
        for t in threads:
            t.start()
        stopping_since: float | None = None
        restore = interrupt_on_stop_signals()  # Ctrl-C, a CI job cancelled, a closed terminal: the job stops too
        try:
            while any(t.is_alive() for t in threads) or not lines.empty():
                try:
                    kind, outcome, text = lines.get(timeout=0.2)
                except queue.Empty:
                    if stopping_since and time.monotonic() - stopping_since > grace_s:
                        break
                    continue
                if kind == "line":
                    emit(f"[{outcome.node}] {text}")
                elif outcome.status == "failed" and stopping_since is None:
                    emit(f"[fakegpu] {outcome.node} failed ({outcome.reason}); stopping the job on the other nodes")
                    stopping_since = time.monotonic()
                    self._stop(jobs, outcomes)
        except KeyboardInterrupt:
            emit("[fakegpu] interrupted; stopping the job on every node")
            self._stop(jobs, outcomes)
            # the stop runs in the nodes: return once their job has ended (a second Ctrl-C does not wait)
            deadline = time.monotonic() + STOP_WAIT_S
            for t in threads:
                t.join(timeout=max(0.0, deadline - time.monotonic()))
            self._collect(cluster, emit)
            self._record(cluster.state_dir, argv, started, outcomes, EXIT_INTERRUPTED)
            raise
        finally:
            restore()
        failed = [o for o in outcomes if o.status == "failed"]
        code = 0 if not failed else (failed[0].exit_code or 1)
        for o in outcomes:
            if o.status == "running":  # still going after the grace period: we ended it
                o.status, o.reason = "stopped", "did not stop within the grace period"
        self._collect(cluster, emit)
        self._record(cluster.state_dir, argv, started, outcomes, code)
        return RunResult(code, outcomes)

    def _collect(self, cluster: m.Cluster, emit: Callable[[str], None]) -> None:
        try:
            self.backend.collect_reports(cluster)
        except m.ClusterError as exc:  # the run's outcome is still recorded; the report says what is missing
            emit(f"[fakegpu] could not gather the nodes' reports: {exc}")

    @staticmethod
    def _command(argv: Sequence[str], env_list: list[str]) -> list[str]:
        """One argument with spaces is a shell script run by sh -c; otherwise argv is executed as is, with $VAR
        and ${VAR} of the node's environment (NODE_RANK, ...) substituted, since the host's shell cannot."""
        if len(argv) == 1 and " " in argv[0]:
            return ["sh", "-c", argv[0]]
        env = dict(item.split("=", 1) for item in env_list if "=" in item)

        def sub(match: re.Match) -> str:
            key = match.group(1) or match.group(2)
            return env.get(key, match.group(0))

        return [_VAR.sub(sub, a) for a in argv]

    @staticmethod
    def _exec_env(cmd: list[str], node_env: list[str]) -> dict[str, str]:
        env = {"PYTHONUNBUFFERED": "1"}
        if _TORCHRUN.search(" ".join(cmd)) and not any(e.startswith("LOGLEVEL=") for e in node_env):
            env["LOGLEVEL"] = "INFO"
        return env

    def _pump(self, outcome: NodeOutcome, job: NodeJob, lines: queue.Queue) -> None:
        buffer = b""
        try:
            for chunk in job.output():
                arrival = time.time()  # the agent's own stamps are placed against it (fakegpu.cluster.elastic)
                buffer += chunk
                *complete, buffer = buffer.split(b"\n")
                for raw in complete:
                    text = raw.decode(errors="replace").rstrip("\r")
                    outcome.tail = [*outcome.tail, text][-20:]
                    outcome.log.feed(text, arrival)
                    lines.put(("line", outcome, text))
            if buffer:
                text = buffer.decode(errors="replace")
                outcome.log.feed(text, time.time())
                lines.put(("line", outcome, text))
        except (m.ClusterError, OSError) as exc:
            outcome.reason = f"lost the node's output stream: {exc}"
        outcome.log.close()
        self._conclude(outcome, job.end())
        lines.put(("end", outcome, ""))

    @staticmethod
    def _conclude(outcome: NodeOutcome, end: JobEnd) -> None:
        code = end.exit_code
        if outcome.status == "stopped":
            outcome.exit_code = code
        elif not end.node_alive:
            outcome.status, outcome.exit_code = "failed", code if code not in (None, 0) else end.node_exit or 137
            outcome.reason = f"{end.node_state} (container exit status {end.node_exit})"
        elif code == 0:
            outcome.status, outcome.exit_code = "ok", 0
        else:
            outcome.status, outcome.exit_code = "failed", code
            outcome.reason = outcome.reason or f"job exited with status {code}"

    @staticmethod
    def _stop(jobs: list[NodeJob], outcomes: list[NodeOutcome]) -> None:
        for job, outcome in zip(jobs, outcomes, strict=True):
            if outcome.status != "running":
                continue
            outcome.status, outcome.reason = "stopped", "ended by fakegpu after another node failed"
            job.stop()

    @staticmethod
    def _clear_reports(state_dir: Path) -> None:
        """A run's reports are its own: the previous run's process reports are removed first."""
        for path in (state_dir / "reports").glob("node-*/*.json"):
            path.unlink(missing_ok=True)
        (state_dir / "run.json").unlink(missing_ok=True)

    @staticmethod
    def _record(state_dir: Path, argv: Sequence[str], started: float, outcomes: list[NodeOutcome],
                code: int) -> None:
        events = sorted((e.as_dict() for o in outcomes for e in list(o.log.events)), key=lambda e: e["time"])
        (state_dir / "run.json").write_text(json.dumps({
            "command": list(argv), "started": started, "ended": time.time(), "exit_code": code,
            "nodes": [o.as_dict() for o in outcomes], "elastic_events": events,
        }, indent=1))
