"""Nodes as containers on this Docker Engine, through the Docker SDK (no docker CLI): a labelled network and one
container per node whose report folder is a bind mount of the host's state folder. Docker errors are translated
into fakegpu.cluster.models errors here."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from fakegpu.cluster import models as m
from fakegpu.cluster.backend import STOP_JOB, JobEnd, Progress, node_env


def client_from_env() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=120)
        client.ping()
        return client
    except DockerException as exc:
        raise m.ClusterError(f"Docker Engine not reachable: {exc}") from exc


class DockerJob:
    def __init__(self, client: docker.DockerClient, container: Any, exec_id: str) -> None:
        self.client, self.container, self.exec_id = client, container, exec_id

    def output(self) -> Iterator[bytes]:
        try:
            yield from self.client.api.exec_start(self.exec_id, stream=True)
        except (APIError, DockerException) as exc:
            raise m.ClusterError(str(exc)) from exc

    def end(self) -> JobEnd:
        try:
            info = self.client.api.exec_inspect(self.exec_id)
            code = None if info.get("Running") else info.get("ExitCode")
        except (APIError, NotFound):
            code = None
        alive, container_exit = True, None
        # A killed container ends the exec stream a moment before the engine marks the container exited, so a
        # failed exec gets a short look at its container before it is blamed on the job.
        for _ in range(1 if code == 0 else 10):
            try:
                self.container.reload()
                alive = self.container.status == "running"
                container_exit = self.container.attrs.get("State", {}).get("ExitCode")
            except NotFound:
                alive, container_exit = False, None
            if not alive:
                break
            time.sleep(0.2)
        return JobEnd(code, alive, f"node container is {self.container.status if self.container else 'gone'}",
                      container_exit)

    def stop(self) -> None:
        try:
            self.container.exec_run(STOP_JOB, detach=True)
        except (APIError, NotFound):
            pass


class DockerBackend:
    kind = "docker"

    def __init__(self, client: docker.DockerClient | None = None) -> None:
        self.client = client or client_from_env()

    def target(self) -> dict[str, Any]:
        return {}

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

    def exists(self, name: str) -> bool:
        return bool(self._containers(name) or self._networks(name))

    def find(self, name: str) -> m.Cluster | None:
        containers, networks = self._containers(name), self._networks(name)
        if not containers and not networks:
            return None
        return self._cluster(name, containers, networks)

    def find_all(self) -> list[m.Cluster]:
        by_name: dict[str, tuple[list, list]] = {}
        for c in self._containers():
            by_name.setdefault(c.labels[m.LABEL_CLUSTER], ([], []))[0].append(c)
        for n in self._networks():
            by_name.setdefault((n.attrs.get("Labels") or {})[m.LABEL_CLUSTER], ([], []))[1].append(n)
        return [self._cluster(name, cs, ns) for name, (cs, ns) in sorted(by_name.items())]

    # ---- up and down ------------------------------------------------------------------------------------------

    def check_spec(self, spec: m.ClusterSpec) -> None:
        try:
            self.client.images.get(spec.image)
        except ImageNotFound:
            raise m.ImageMissing(
                f"image {spec.image!r} not found on this Docker Engine; build it with `make images` "
                "(images/build.sh), or pass --image") from None

    def create(self, spec: m.ClusterSpec, run_id: str, state_dir: Path, ndev: int, progress: Progress) -> None:
        labels = {**spec.labels, m.LABEL_CLUSTER: spec.name, m.LABEL_RUN: run_id}
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
        env = {**node_env(rank, spec, spec.nproc_per_node or ndev, master="node-0"),
               "FAKEGPU_DEVICES": spec.devices, "FAKEGPU_SEED": str(rank)}  # distinct UUIDs per node
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

    def undo_create(self, name: str) -> None:
        # everything carrying this name's label is this `up`'s: up refused to start while any existed
        self.remove(name)

    def remove(self, name: str) -> dict[str, int]:
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
        return removed

    # ---- running a job ----------------------------------------------------------------------------------------

    def node_env(self, cluster: m.Cluster, node: m.Node) -> list[str]:
        return self.client.containers.get(node.container).attrs["Config"]["Env"]

    def start(self, cluster: m.Cluster, node: m.Node, argv: Sequence[str], env: dict[str, str]) -> DockerJob:
        container = self.client.containers.get(node.container)
        exec_id = self.client.api.exec_create(container.id, list(argv), environment=env)["Id"]
        return DockerJob(self.client, container, exec_id)

    def collect_reports(self, cluster: m.Cluster) -> None:
        pass  # each node's report folder is a bind mount of state_dir/reports/node-N: they are there already
