"""The seam between the cluster controller and where nodes live. The controller (controller.py) owns what a
rehearsal is: checking the spec, the state folder, rolling back a failed `up`, running a job on every node at once
and stopping it everywhere when one node fails, the run record. A backend owns only how nodes are made, found,
entered and removed: Docker containers on this engine (docker_backend.py) or pods on a Kubernetes cluster
(k8s_backend.py). Each translates its own client's errors into fakegpu.cluster.models errors."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fakegpu.cluster import models as m

Progress = Callable[[str], None]
# Ends every process of a job in a node but the node's own init (pid 1) and the killer itself: kill(-1, ...).
STOP_JOB = ["python3", "-c", "import os, signal; os.kill(-1, signal.SIGTERM)"]


@dataclass
class JobEnd:
    """How one node's part of a job ended, as its backend saw it."""

    exit_code: int | None  # the command's; None when the backend could not tell
    node_alive: bool       # the node itself (container, pod) still runs
    node_state: str        # the backend's word for the node: running, exited, Failed, gone...
    node_exit: int | None  # the node's own exit status, where it has one


def node_env(rank: int, spec: m.ClusterSpec, nproc: int, master: str) -> dict[str, str]:
    """torch.distributed's environment of node `rank`, on every backend; only the master's address differs."""
    return {
        "MASTER_ADDR": master, "MASTER_PORT": str(m.MASTER_PORT), "NNODES": str(spec.nodes),
        "NODE_RANK": str(rank), "NPROC_PER_NODE": str(nproc),
        # torchrun reads PET_<OPTION> for every option left off its command line
        "PET_MASTER_ADDR": master, "PET_MASTER_PORT": str(m.MASTER_PORT), "PET_NNODES": str(spec.nodes),
        "PET_NODE_RANK": str(rank), "PET_NPROC_PER_NODE": str(nproc),
        "FAKEGPU_RUNTIME": spec.mode, "FAKEGPU_REPORT_DIR": m.REPORTS_IN_NODE, "FAKEGPU_CLUSTER": spec.name,
    }


class NodeJob(Protocol):
    """One node's part of a running job."""

    def output(self) -> Iterator[bytes]:
        """stdout and stderr as they come; raises ClusterError (or OSError) when the stream is lost."""

    def end(self) -> JobEnd:
        """Called once output() is exhausted."""

    def stop(self) -> None:
        """End the job's processes in the node (best effort: a node already gone is not an error)."""


class Backend(Protocol):
    kind: str  # "docker" or "k8s": recorded in the cluster's state folder, so later commands find it

    def target(self) -> dict[str, Any]:
        """What locates this backend's clusters again (namespace, context...), recorded by `up`."""

    def check_spec(self, spec: m.ClusterSpec) -> None:
        """Refuse what this backend cannot make (a missing image, a name it cannot carry) before anything exists."""

    def exists(self, name: str) -> bool: ...

    def create(self, spec: m.ClusterSpec, run_id: str, state_dir: Path, ndev: int, progress: Progress) -> None:
        """Make and start every node; on failure the controller calls undo_create."""

    def undo_create(self, name: str) -> None:
        """Remove what create() made (and nothing that was there before)."""

    def find(self, name: str) -> m.Cluster | None: ...

    def find_all(self) -> list[m.Cluster]: ...

    def remove(self, name: str) -> dict[str, int]:
        """Remove every object labelled with the cluster's name; counts by kind. Idempotent."""

    def node_env(self, cluster: m.Cluster, node: m.Node) -> list[str]:
        """The node's environment as KEY=VALUE items (the job's $VARs are substituted from it)."""

    def start(self, cluster: m.Cluster, node: m.Node, argv: Sequence[str], env: dict[str, str]) -> NodeJob: ...

    def collect_reports(self, cluster: m.Cluster) -> None:
        """Bring the nodes' process reports into the state folder (state_dir/reports/node-N/)."""
