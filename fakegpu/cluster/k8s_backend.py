"""Nodes as pods on a Kubernetes cluster, through the official `kubernetes` client and a kubeconfig: a headless
Service naming the node pods for torchrun's rendezvous, and one pod per node (fakegpu.k8s.manifests builds both)
under the `fakegpu` RuntimeClass with `nvidia.com/gpu` limits, which the FakeGPU device plugin serves. Everything
carries the cluster's label, so `status`, `run` and `down` find it again from any process.

A job runs by exec in each pod (the API's websocket exec, as kubectl exec), and the nodes' process reports come
back the same way, as kubectl cp does it: a tar stream of the pod's report folder on exec's stdout. Pod logs would
only carry the idle main process's output, and no host folder is shared with a node as Docker's bind mount is."""

from __future__ import annotations

import io
import json
import math
import os
import re
import tarfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fakegpu.cluster import models as m
from fakegpu.cluster.backend import STOP_JOB, JobEnd, Progress, node_env
from fakegpu.k8s import manifests
from fakegpu.k8s.resources import DEFAULT_RESOURCE

READY_TIMEOUT_S = 300.0  # an image to pull onto a node can take minutes
GONE_TIMEOUT_S = 60.0
POLL_S = 0.5
# Waiting reasons of a container that will not start by waiting longer: `up` fails at once, naming it.
_HOPELESS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
             "CreateContainerError", "RunContainerError"}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_REPORT = re.compile(r"^(\./)?[^/]+\.json$")
# A node's report folder on exec's stdout as tar, then emptied: the next run's reports are its own.
COLLECT_SCRIPT = (f"cd {m.REPORTS_IN_NODE} && tar cf - --exclude='*.tmp' . && "
                  "find . -name '*.json' -type f -delete")


def kubeconfig_path(given: str | None = None) -> Path:
    """--kubeconfig, else the first file of $KUBECONFIG, else ~/.kube/config (kubectl's order)."""
    if given:
        return Path(given).expanduser()
    env = os.environ.get("KUBECONFIG", "")
    first = next((p for p in env.split(os.pathsep) if p), None)
    return Path(first or "~/.kube/config").expanduser()


def _message(exc: Any) -> str:
    """The API server's own sentence from a Status body, else the HTTP reason."""
    try:
        return json.loads(exc.body)["message"]
    except (TypeError, ValueError, KeyError):
        return f"{exc.status} {exc.reason}"


class KubernetesJob:
    def __init__(self, backend: KubernetesBackend, pod: str, ws: Any) -> None:
        self.backend, self.pod, self.ws = backend, pod, ws

    def output(self) -> Iterator[bytes]:
        """Whole lines only: stdout and stderr come on two channels, and a line half-read from one must not be
        joined to a line of the other (Docker's multiplexed stream has one order; these two have one each)."""
        partial = {1: b"", 2: b""}  # stdout, stderr
        try:
            while True:
                open_ = self.ws.is_open()
                if open_:
                    self.ws.update(timeout=1)
                for channel in partial:
                    data = partial[channel] + self.ws.read_channel(channel)
                    complete, _, partial[channel] = data.rpartition(b"\n")
                    if complete:
                        yield complete + b"\n"
                if not open_:
                    break
        except Exception as exc:  # websocket-client's own errors, which share no base class we could name
            raise m.ClusterError(f"exec stream of pod {self.pod}: {exc}") from exc
        for rest in partial.values():
            if rest:
                yield rest + b"\n"

    def end(self) -> JobEnd:
        try:
            code = self.ws.returncode  # from the error channel's Status: Success, or NonZeroExitCode's cause
        except (TypeError, KeyError, ValueError, IndexError):
            code = None  # the stream ended without a Status: the pod or the connection went away
        for _ in range(1 if code == 0 else 3):
            state, alive, exit_code = self.backend.pod_state(self.pod)
            if not alive:
                break
            time.sleep(POLL_S)
        return JobEnd(code, alive, f"node pod is {state}", exit_code)

    def stop(self) -> None:
        try:
            self.backend.exec(self.pod, STOP_JOB)
        except m.ClusterError:
            pass  # a pod already gone has no job left to stop


class KubernetesBackend:
    kind = "k8s"

    def __init__(self, kubeconfig: str | None = None, context: str | None = None, namespace: str | None = None,
                 ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        path = kubeconfig_path(kubeconfig)
        if not path.is_file():
            raise m.ClusterUsageError(
                f"no kubeconfig at {path}: `--backend k8s` talks to a cluster's API server through one; pass "
                "--kubeconfig FILE or set KUBECONFIG (kubectl's file works)")
        try:
            self.api_client = config.new_client_from_config(config_file=str(path), context=context,
                                                            persist_config=False)
            contexts, active = config.list_kube_config_contexts(config_file=str(path))
        except (ConfigException, ValueError, KeyError, TypeError) as exc:
            raise m.ClusterUsageError(f"kubeconfig {path}: {exc}") from exc
        chosen = next((c for c in contexts if c["name"] == context), active) if context else active
        self.kubeconfig, self.context = str(path.resolve()), (chosen or {}).get("name")
        self.namespace = namespace or ((chosen or {}).get("context") or {}).get("namespace") or "default"
        self.core = client.CoreV1Api(self.api_client)
        self.ready_timeout_s = ready_timeout_s
        self._created: list[tuple[str, str]] = []  # (kind, name) made by this backend's create(), for undo

    def target(self) -> dict[str, Any]:
        return {"kubeconfig": self.kubeconfig, "context": self.context, "namespace": self.namespace}

    @property
    def host(self) -> str:
        return self.api_client.configuration.host

    @contextmanager
    def _api(self, what: str) -> Iterator[None]:
        """The client's errors as ClusterErrors that say what was being done, where, and what to do."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            yield
        except ApiException as exc:
            if exc.status == 403:
                raise m.ClusterError(
                    f"forbidden: {what} in namespace {self.namespace!r}: {_message(exc)}. The kubeconfig's user "
                    "needs rights to pods, pods/exec and services there (a Role and RoleBinding)") from None
            if exc.status == 401:
                raise m.ClusterError(f"the API server at {self.host} did not accept the kubeconfig's credentials "
                                     f"({what}): {_message(exc)}") from None
            if exc.status == 0:  # the websocket calls report a failed connection this way
                raise m.ClusterError(f"{what}: {exc.reason}") from None
            raise m.ClusterError(f"{what}: the API server answered {_message(exc)}") from None
        except (HTTPError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise m.ClusterError(f"Kubernetes API server at {self.host} not reachable ({what}): {reason}; "
                                 "is the cluster up and the kubeconfig's server address right?") from None

    # ---- finding clusters -------------------------------------------------------------------------------------

    def _pods(self, selector: str) -> list:
        with self._api("listing pods"):
            return self.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def _services(self, selector: str) -> list:
        with self._api("listing services"):
            return self.core.list_namespaced_service(self.namespace, label_selector=selector).items

    @staticmethod
    def _node(pod: Any) -> m.Node:
        labels = pod.metadata.labels or {}
        phase = "terminating" if pod.metadata.deletion_timestamp else (pod.status.phase or "Unknown").lower()
        exit_code = None
        for status in pod.status.container_statuses or []:
            if status.state and status.state.terminated:
                exit_code = status.state.terminated.exit_code
        return m.Node(rank=int(labels.get(m.LABEL_NODE, -1)), hostname=pod.spec.hostname or pod.metadata.name,
                      container=pod.metadata.name, status=phase, exit_code=exit_code,
                      devices=(pod.metadata.annotations or {}).get(m.LABEL_DEVICES, ""))

    def _cluster(self, name: str, pods: list, services: list) -> m.Cluster:
        labels = (pods[0].metadata.labels if pods else services[0].metadata.labels) or {}
        return m.Cluster(name=name, run_id=labels.get(m.LABEL_RUN, ""), mode=labels.get(m.LABEL_MODE, ""),
                         image=pods[0].spec.containers[0].image if pods else "",
                         network=services[0].metadata.name if services else None,
                         state_dir=m.state_root() / name,
                         nodes=sorted((self._node(p) for p in pods), key=lambda n: n.rank))

    def exists(self, name: str) -> bool:
        selector = f"{m.LABEL_CLUSTER}={name}"
        return bool(self._pods(selector) or self._services(selector))

    def find(self, name: str) -> m.Cluster | None:
        selector = f"{m.LABEL_CLUSTER}={name}"
        pods, services = self._pods(selector), self._services(selector)
        return self._cluster(name, pods, services) if pods or services else None

    def find_all(self) -> list[m.Cluster]:
        by_name: dict[str, tuple[list, list]] = {}
        for pod in self._pods(m.LABEL_CLUSTER):
            by_name.setdefault(pod.metadata.labels[m.LABEL_CLUSTER], ([], []))[0].append(pod)
        for svc in self._services(m.LABEL_CLUSTER):
            by_name.setdefault(svc.metadata.labels[m.LABEL_CLUSTER], ([], []))[1].append(svc)
        return [self._cluster(name, pods, svcs) for name, (pods, svcs) in sorted(by_name.items())]

    # ---- up and down ------------------------------------------------------------------------------------------

    def check_spec(self, spec: m.ClusterSpec) -> None:
        if not _DNS_LABEL.match(spec.name):
            raise m.ClusterUsageError(f"cluster name {spec.name!r}: on Kubernetes it names pods and a Service, so "
                                      "use lowercase letters, digits and '-' only (no '_' or '.')")
        if spec.workdir:
            raise m.ClusterUsageError("--workdir mounts a host folder, which pods on other machines cannot see: "
                                      "put the code in the node image (or exec it in) with --backend k8s")
        if spec.docker_runtime:
            raise m.ClusterUsageError("--docker-runtime is Docker's; on Kubernetes the pods run under the "
                                      "`fakegpu` RuntimeClass (`fakegpu k8s render` sets it up)")

    def objects(self, spec: m.ClusterSpec, run_id: str, ndev: int) -> list[dict[str, Any]]:
        """The Service and the node pods of `spec`, as created."""
        labels = {**spec.labels, m.LABEL_CLUSTER: spec.name, m.LABEL_RUN: run_id}
        service = manifests.rehearsal_service(spec.name, self.namespace, labels, {m.LABEL_CLUSTER: spec.name})
        master = f"node-0.{service['metadata']['name']}"  # the pod's name under the headless Service
        pods = [manifests.rehearsal_pod(
            spec.name, self.namespace, rank, spec.image, DEFAULT_RESOURCE, ndev,
            env=self._env(spec, rank, spec.nproc_per_node or ndev, master),
            labels={**labels, m.LABEL_NODE: str(rank), m.LABEL_MODE: spec.mode, m.LABEL_NNODES: str(spec.nodes)},
            # a device spec (a100:4) is no label value; an annotation carries it for `status`
            annotations={m.LABEL_DEVICES: spec.devices}) for rank in range(spec.nodes)]
        return [service, *pods]

    @staticmethod
    def _env(spec: m.ClusterSpec, rank: int, nproc: int, master: str) -> dict[str, str]:
        # No FAKEGPU_DEVICES, in either mode: it would decide alone under the runtime, over the GPUs the device
        # plugin allocated; fakecuda and the native shims both read the device table the runtime gives the pod.
        return node_env(rank, spec, nproc, master)

    def create(self, spec: m.ClusterSpec, run_id: str, state_dir: Path, ndev: int, progress: Progress) -> None:
        from kubernetes.client.exceptions import ApiException

        self._created = []
        for obj in self.objects(spec, run_id, ndev):
            kind, name = obj["kind"], obj["metadata"]["name"]
            create = self.core.create_namespaced_service if kind == "Service" else self.core.create_namespaced_pod
            try:
                with self._api(f"creating {kind} {name}"):
                    create(self.namespace, obj)
            except m.ClusterError as exc:
                cause = exc.__context__
                if isinstance(cause, ApiException) and cause.status == 409:
                    raise m.ClusterExists(f"{kind} {name} already exists in namespace {self.namespace!r} but is "
                                          f"not labelled as cluster {spec.name!r}; delete it or choose another "
                                          "name") from None
                raise
            self._created.append((kind, name))
            progress(f"{kind.lower()} {name} created")
        self._wait_running(spec.name, spec.nodes, progress)

    def _wait_running(self, name: str, count: int, progress: Progress) -> None:
        """Watch the node pods until every one runs; one that ends, or cannot start, fails `up` at once."""
        from kubernetes import watch

        selector = f"{m.LABEL_CLUSTER}={name}"
        with self._api("listing pods"):
            listed = self.core.list_namespaced_pod(self.namespace, label_selector=selector)
        pods = {p.metadata.name: p for p in listed.items}
        version = listed.metadata.resource_version
        deadline = time.monotonic() + self.ready_timeout_s
        while not self._all_running(pods, count, progress):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                waiting = ", ".join(f"{n} {self._why(p)}" for n, p in sorted(pods.items())
                                    if p.status.phase != "Running")
                raise m.ClusterError(f"node pods not running after {self.ready_timeout_s:g} s: {waiting}")
            with self._api("watching pods"):
                for event in watch.Watch().stream(self.core.list_namespaced_pod, self.namespace,
                                                  label_selector=selector, resource_version=version,
                                                  timeout_seconds=max(1, math.ceil(remaining))):
                    pod = event["object"]
                    version = pod.metadata.resource_version
                    pods[pod.metadata.name] = pod
                    if self._all_running(pods, count, progress):
                        return

    def _all_running(self, pods: dict[str, Any], count: int, progress: Progress) -> bool:
        for name, pod in pods.items():
            phase = pod.status.phase
            if phase in ("Succeeded", "Failed"):
                raise m.ClusterError(f"node pod {name} ended ({phase}) while starting: {self._why(pod)}")
            for status in pod.status.container_statuses or []:
                waiting = status.state.waiting if status.state else None
                if waiting and waiting.reason in _HOPELESS:
                    raise m.ClusterError(f"node pod {name} cannot start: {waiting.reason}: {waiting.message or ''}")
        running = sorted(n for n, p in pods.items() if p.status.phase == "Running")
        if len(running) == count:
            progress(f"{count} node pods running")
            return True
        return False

    @staticmethod
    def _why(pod: Any) -> str:
        """What the pod's status says about it, in the API's words (scheduler, kubelet)."""
        parts = [pod.status.phase or "Unknown"]
        for cond in pod.status.conditions or []:
            if cond.status == "False" and cond.reason:
                parts.append(f"{cond.reason}: {cond.message or ''}".strip())
        for status in pod.status.container_statuses or []:
            state = status.state
            if state and state.waiting and state.waiting.reason:
                parts.append(state.waiting.reason)
            if state and state.terminated:
                parts.append(f"{state.terminated.reason or 'terminated'}, exit status {state.terminated.exit_code}")
        return "; ".join(parts)

    def undo_create(self, name: str) -> None:
        for kind, obj in reversed(self._created):
            self._delete(kind, obj)
        self._created = []

    def _delete(self, kind: str, name: str) -> bool:
        """True when this call deleted it; a 404 (gone already, or deleted by someone else) is no error."""
        from kubernetes.client.exceptions import ApiException

        delete = self.core.delete_namespaced_service if kind == "Service" else self.core.delete_namespaced_pod
        try:
            with self._api(f"deleting {kind} {name}"):
                delete(name, self.namespace)
        except m.ClusterError as exc:
            if isinstance(exc.__context__, ApiException) and exc.__context__.status == 404:
                return False
            raise
        return True

    def remove(self, name: str) -> dict[str, int]:
        selector = f"{m.LABEL_CLUSTER}={name}"
        removed = {"pods": 0, "services": 0}
        for pod in self._pods(selector):
            removed["pods"] += self._delete("Pod", pod.metadata.name)
        for svc in self._services(selector):
            removed["services"] += self._delete("Service", svc.metadata.name)
        # a deleted pod lingers while its kubelet stops it: `down` returns when it is gone, so an `up` of the
        # same name right after finds nothing in its way
        deadline = time.monotonic() + GONE_TIMEOUT_S
        while self._pods(selector):
            if time.monotonic() > deadline:
                raise m.ClusterError(f"pods of {name!r} still terminating after {GONE_TIMEOUT_S:g} s")
            time.sleep(POLL_S)
        return removed

    # ---- running a job ----------------------------------------------------------------------------------------

    def pod_state(self, pod: str) -> tuple[str, bool, int | None]:
        from kubernetes.client.exceptions import ApiException

        try:
            with self._api(f"reading pod {pod}"):
                found = self.core.read_namespaced_pod(pod, self.namespace)
        except m.ClusterError as exc:
            if isinstance(exc.__context__, ApiException) and exc.__context__.status == 404:
                return "gone", False, None
            raise
        node = self._node(found)
        return found.status.phase or "Unknown", node.running and not found.metadata.deletion_timestamp, \
            node.exit_code

    def node_env(self, cluster: m.Cluster, node: m.Node) -> list[str]:
        with self._api(f"reading pod {node.container}"):
            pod = self.core.read_namespaced_pod(node.container, self.namespace)
        return [f"{e.name}={e.value or ''}" for e in pod.spec.containers[0].env or []]

    def _connect(self, pod: str, argv: Sequence[str], preload: bool) -> Any:
        from kubernetes.stream import stream

        with self._api(f"exec in pod {pod}"):
            return stream(self.core.connect_get_namespaced_pod_exec, pod, self.namespace,
                          container=manifests.REHEARSAL_CONTAINER, command=list(argv), stderr=True, stdin=False,
                          stdout=True, tty=False, binary=True, _preload_content=preload)

    def exec(self, pod: str, argv: Sequence[str]) -> bytes:
        """Run argv in the pod to its end; its stdout and stderr as one byte string."""
        return self._connect(pod, argv, preload=True).data

    def start(self, cluster: m.Cluster, node: m.Node, argv: Sequence[str],
              env: dict[str, str]) -> KubernetesJob:
        # exec has no environment of its own: env(1) puts the run's variables in front of the command
        command = ["env", *(f"{k}={v}" for k, v in env.items()), *argv]
        return KubernetesJob(self, node.container, self._connect(node.container, command, preload=False))

    def collect_reports(self, cluster: m.Cluster) -> None:
        """Each node's report folder as a tar stream on exec's stdout (kubectl cp's way), unpacked into
        state_dir/reports/node-N; the copies in the pod go, so the next run's reports are its own."""
        for node in cluster.nodes:
            ws = self._connect(node.container, ["sh", "-c", COLLECT_SCRIPT], preload=False)
            ws.run_forever(timeout=120)
            data, stderr = ws.read_channel(1), ws.read_channel(2)
            if ws.returncode != 0:
                raise m.ClusterError(f"reading the reports of {node.hostname}: exit status {ws.returncode}: "
                                     f"{stderr.decode(errors='replace')[-500:]}")
            target = cluster.state_dir / "reports" / node.hostname
            target.mkdir(parents=True, exist_ok=True)
            _unpack_reports(data, target)


def _unpack_reports(data: bytes, target: Path) -> list[Path]:
    """Only plain *.json files at the top of the archive: a node's tar cannot write anywhere else on this host."""
    written = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        for member in archive.getmembers():
            if not (member.isfile() and _REPORT.match(member.name)):
                continue
            source = archive.extractfile(member)
            if source is None:
                continue
            path = target / Path(member.name).name
            path.write_bytes(source.read())
            written.append(path)
    return written
