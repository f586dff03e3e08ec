"""The cluster controller, on the Docker SDK (no docker CLI): `up` makes a labelled network and one container per
node, `run` executes a job on every node and streams its output, `status`/`list` read the engine, `down` removes
everything carrying the cluster's label. Docker errors are translated into fakegpu.cluster.models errors here."""

from __future__ import annotations

import json
import queue
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from fakegpu.cluster import models as m
from fakegpu.cluster.elastic import AgentLog
from fakegpu.devices import resolve_devices
from fakegpu.errors import EXIT_INTERRUPTED
from fakegpu.interrupts import interrupt_on_stop_signals

Progress = Callable[[str], None]
# Ends every process of a job in a node but the node's own init (pid 1) and the killer itself: kill(-1, ...).
_STOP_JOB = ["python3", "-c", "import os, signal; os.kill(-1, signal.SIGTERM)"]
# How long an interrupted run waits for its job to end in the nodes after asking them to stop it.
STOP_WAIT_S = 15.0
_VAR = re.compile(r"\$(\w+)|\$\{(\w+)\}")
# torchelastic logs restarts and rendezvous at INFO, which it hides by default; a torchrun job gets LOGLEVEL=INFO
# (unless the node or the command sets it) so that the run record can show them.
_TORCHRUN = re.compile(r"(^|[\s/])torchrun(\s|$)|torch\.distributed\.run\b")


def client_from_env() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=120)
        client.ping()
        return client
    except DockerException as exc:
        raise m.ClusterError(f"Docker Engine not reachable: {exc}") from exc


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
    def __init__(self, client: docker.DockerClient | None = None) -> None:
        self.client = client or client_from_env()

    # ---- finding clusters -------------------------------------------------------------------------------------

    def _containers(self, name: str | None = None) -> list:
        label = f"{m.LABEL_CLUSTER}={name}" if name else m.LABEL_CLUSTER
        return self.client.containers.list(all=True, filters={"label": label})

    def _networks(self, name: str | None = None) -> list:
        label = f"{m.LABEL_CLUSTER}={name}" if name else m.LABEL_CLUSTER
        return self.client.networks.list(filters={"label": label})

    def _cluster(self, name: str, containers: list, networks: list) -> m.Cluster:
        nodes, labels = [], {}
        for c in containers:
            labels = c.labels
            state = c.attrs.get("State", {})
            nodes.append(m.Node(
                rank=int(labels.get(m.LABEL_NODE, -1)), hostname=c.attrs["Config"]["Hostname"], container=c.name,
                status=c.status, exit_code=None if c.status == "running" else state.get("ExitCode"),
                devices=labels.get(m.LABEL_DEVICES, ""),
            ))
        if not labels and networks:
            labels = networks[0].attrs.get("Labels") or {}
        return m.Cluster(
            name=name, run_id=labels.get(m.LABEL_RUN, ""), mode=labels.get(m.LABEL_MODE, ""),
            image=containers[0].attrs["Config"]["Image"] if containers else "",
            network=networks[0].name if networks else None,
            state_dir=Path(labels.get(m.LABEL_STATE_DIR) or m.state_root() / name),
            nodes=sorted(nodes, key=lambda n: n.rank),
        )

    def status(self, name: str) -> m.Cluster:
        m.check_name(name)
        containers, networks = self._containers(name), self._networks(name)
        if not containers and not networks:
            raise m.ClusterNotFound(f"no cluster named {name!r} (`fakegpu cluster list` shows them)")
        return self._cluster(name, containers, networks)

    def list(self) -> list[m.Cluster]:
        by_name: dict[str, tuple[list, list]] = {}
        for c in self._containers():
            by_name.setdefault(c.labels[m.LABEL_CLUSTER], ([], []))[0].append(c)
        for n in self._networks():
            by_name.setdefault((n.attrs.get("Labels") or {})[m.LABEL_CLUSTER], ([], []))[1].append(n)
        return [self._cluster(name, cs, ns) for name, (cs, ns) in sorted(by_name.items())]

    # ---- up and down ------------------------------------------------------------------------------------------

    def up(self, spec: m.ClusterSpec, progress: Progress = lambda _: None) -> m.Cluster:
        """Validate everything, then create; any failure or Ctrl-C on the way removes what was made."""
        devices = resolve_devices(spec.devices)  # raises InvalidDeviceSpec before anything exists
        try:
            self.client.images.get(spec.image)
        except ImageNotFound:
            raise m.ImageMissing(
                f"image {spec.image!r} not found on this Docker Engine; build it with `make images` "
                "(images/build.sh), or pass --image") from None
        if self._containers(spec.name) or self._networks(spec.name):
            raise m.ClusterExists(f"a cluster named {spec.name!r} exists; `fakegpu cluster down {spec.name}` first")
        run_id = uuid.uuid4().hex[:12]
        state_dir = m.state_root() / spec.name
        shutil.rmtree(state_dir, ignore_errors=True)  # a new cluster of this name: the old one's reports go
        try:
            self._create(spec, run_id, state_dir, len(devices), progress)
        except BaseException:
            progress("start failed; removing what was created")
            self.down(spec.name)
            raise
        return self.status(spec.name)

    def _create(self, spec: m.ClusterSpec, run_id: str, state_dir: Path, ndev: int, progress: Progress) -> None:
        labels = {**spec.labels, m.LABEL_CLUSTER: spec.name, m.LABEL_RUN: run_id}
        (state_dir / "reports").mkdir(parents=True, exist_ok=True)
        (state_dir / "cluster.json").write_text(json.dumps({
            "name": spec.name, "run_id": run_id, "nodes": spec.nodes, "devices": spec.devices, "mode": spec.mode,
            "image": spec.image, "nproc_per_node": spec.nproc_per_node or ndev, "created": time.time(),
        }, indent=1))
        t0 = time.monotonic()
        try:
            self.client.networks.create(spec.network, driver="bridge", labels=labels, check_duplicate=True)
        except APIError as exc:
            raise m.ClusterError(f"cannot create network {spec.network}: {exc.explanation or exc}") from exc
        progress(f"network {spec.network} created")

        def start(rank: int) -> None:
            self._start_node(spec, rank, labels, state_dir, ndev)
            progress(f"node-{rank} started ({time.monotonic() - t0:.1f} s)")

        # Nodes start in parallel: the engine spends most of a start waiting on storage and runc, not on us.
        with ThreadPoolExecutor(max_workers=min(8, spec.nodes)) as pool:
            for future in [pool.submit(start, r) for r in range(spec.nodes)]:
                future.result()

    def _start_node(self, spec: m.ClusterSpec, rank: int, labels: dict, state_dir: Path, ndev: int) -> None:
        hostname = f"node-{rank}"
        reports = state_dir / "reports" / hostname
        reports.mkdir(parents=True, exist_ok=True)
        nproc = spec.nproc_per_node or ndev
        env = {
            "MASTER_ADDR": "node-0", "MASTER_PORT": str(m.MASTER_PORT), "NNODES": str(spec.nodes),
            "NODE_RANK": str(rank), "NPROC_PER_NODE": str(nproc),
            # torchrun reads PET_<OPTION> for every option left off its command line
            "PET_MASTER_ADDR": "node-0", "PET_MASTER_PORT": str(m.MASTER_PORT), "PET_NNODES": str(spec.nodes),
            "PET_NODE_RANK": str(rank), "PET_NPROC_PER_NODE": str(nproc),
            "FAKEGPU_DEVICES": spec.devices, "FAKEGPU_SEED": str(rank),  # distinct UUIDs per node
            "FAKEGPU_RUNTIME": spec.mode, "FAKEGPU_REPORT_DIR": m.REPORTS_IN_NODE, "FAKEGPU_CLUSTER": spec.name,
        }
        volumes = {str(reports): {"bind": m.REPORTS_IN_NODE, "mode": "rw"}}
        if spec.workdir:
            volumes[str(Path(spec.workdir).resolve())] = {"bind": m.WORKDIR_IN_NODE, "mode": "rw"}
        node_labels = {**labels, m.LABEL_NODE: str(rank), m.LABEL_DEVICES: spec.devices, m.LABEL_MODE: spec.mode,
                       m.LABEL_NNODES: str(spec.nodes), m.LABEL_STATE_DIR: str(state_dir)}
        endpoint = self.client.api.create_endpoint_config(aliases=[hostname])
        try:
            self.client.containers.run(
                spec.image, ["sleep", "infinity"], name=spec.container_name(rank), hostname=hostname,
                detach=True, labels=node_labels, environment=env, volumes=volumes, working_dir=m.WORKDIR_IN_NODE,
                network=spec.network, networking_config={spec.network: endpoint}, runtime=spec.docker_runtime,
                shm_size="1g",  # DataLoader workers pass tensors through /dev/shm; Docker's default is 64 MB
            )
        except APIError as exc:
            raise m.ClusterError(f"cannot start node-{rank} of {spec.name}: {exc.explanation or exc}") from exc

    def down(self, name: str, purge: bool = False) -> dict[str, int]:
        """Remove every container and network labelled with the cluster's name. Idempotent."""
        m.check_name(name)
        removed = {"containers": 0, "networks": 0}
        for c in self._containers(name):
            try:
                c.remove(force=True, v=True)
                removed["containers"] += 1
            except NotFound:
                pass
        for n in self._networks(name):
            try:
                n.remove()
                removed["networks"] += 1
            except NotFound:
                pass
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
        execs = []
        for node in cluster.nodes:
            container = self.client.containers.get(node.container)
            node_env = container.attrs["Config"]["Env"]
            cmd = self._command(argv, node_env)
            exec_id = self.client.api.exec_create(container.id, cmd, environment=self._exec_env(cmd, node_env))["Id"]
            execs.append((container, exec_id))
        started = time.time()
        threads = [threading.Thread(target=self._pump, args=(o, c, e, lines), daemon=True)
                   for o, (c, e) in zip(outcomes, execs, strict=True)]
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
                    self._stop(execs, outcomes)
        except KeyboardInterrupt:
            emit("[fakegpu] interrupted; stopping the job on every node")
            self._stop(execs, outcomes)
            # the stop runs in the nodes: return once their job has ended (a second Ctrl-C does not wait)
            deadline = time.monotonic() + STOP_WAIT_S
            for t in threads:
                t.join(timeout=max(0.0, deadline - time.monotonic()))
            self._record(cluster.state_dir, argv, started, outcomes, EXIT_INTERRUPTED)
            raise
        finally:
            restore()
        failed = [o for o in outcomes if o.status == "failed"]
        code = 0 if not failed else (failed[0].exit_code or 1)
        for o in outcomes:
            if o.status == "running":  # still going after the grace period: we ended it
                o.status, o.reason = "stopped", "did not stop within the grace period"
        self._record(cluster.state_dir, argv, started, outcomes, code)
        return RunResult(code, outcomes)

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

    def _pump(self, outcome: NodeOutcome, container, exec_id: str, lines: queue.Queue) -> None:
        buffer = b""
        try:
            for chunk in self.client.api.exec_start(exec_id, stream=True):
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
        except (APIError, DockerException, OSError) as exc:
            outcome.reason = f"lost the node's output stream: {exc}"
        outcome.log.close()
        self._conclude(outcome, container, exec_id)
        lines.put(("end", outcome, ""))

    def _conclude(self, outcome: NodeOutcome, container, exec_id: str) -> None:
        try:
            info = self.client.api.exec_inspect(exec_id)
            code = None if info.get("Running") else info.get("ExitCode")
        except (APIError, NotFound):
            code = None
        alive, container_exit = True, None
        # A killed container ends the exec stream a moment before the engine marks the container exited, so a
        # failed exec gets a short look at its container before it is blamed on the job.
        for _ in range(1 if code == 0 else 10):
            try:
                container.reload()
                alive = container.status == "running"
                container_exit = container.attrs.get("State", {}).get("ExitCode")
            except NotFound:
                alive, container_exit = False, None
            if not alive:
                break
            time.sleep(0.2)
        if outcome.status == "stopped":
            outcome.exit_code = code
        elif not alive:
            outcome.status, outcome.exit_code = "failed", code if code not in (None, 0) else container_exit or 137
            outcome.reason = f"node container is {container.status if container else 'gone'} " \
                             f"(container exit status {container_exit})"
        elif code == 0:
            outcome.status, outcome.exit_code = "ok", 0
        else:
            outcome.status, outcome.exit_code = "failed", code
            outcome.reason = outcome.reason or f"job exited with status {code}"

    def _stop(self, execs: list, outcomes: list[NodeOutcome]) -> None:
        for (container, _), outcome in zip(execs, outcomes, strict=True):
            if outcome.status != "running":
                continue
            outcome.status, outcome.reason = "stopped", "ended by fakegpu after another node failed"
            try:
                container.exec_run(_STOP_JOB, detach=True)
            except (APIError, NotFound):
                pass

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
