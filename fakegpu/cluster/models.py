"""What a cluster is: its spec (what `up` was asked for), its nodes as found on the engine, and the errors the
controller raises. The Docker engine's labels are the only state: nothing about a running cluster is kept
elsewhere, so `down`, `status` and `list` work after a crash of the process that ran `up`."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from fakegpu.errors import EXIT_USAGE, FakeGPUError

LABEL_CLUSTER = "fakegpu.cluster"      # the cluster's name: every object of a cluster carries it
LABEL_RUN = "fakegpu.run"              # one id per `up`, so two incarnations of a name are told apart
LABEL_NODE = "fakegpu.node"            # node rank, on containers
LABEL_DEVICES = "fakegpu.devices"
LABEL_MODE = "fakegpu.mode"
LABEL_NNODES = "fakegpu.nnodes"
LABEL_STATE_DIR = "fakegpu.state-dir"  # host folder with the nodes' reports
MODES = ("fakecuda", "native")
DEFAULT_IMAGE = "fakegpu/pytorch:latest"
MASTER_PORT = 29500  # each cluster has its own network, so every cluster can use torchrun's default port
REPORTS_IN_NODE = "/fakegpu/reports"
WORKDIR_IN_NODE = "/workspace"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,39}$")


class ClusterError(FakeGPUError):
    """Anything the cluster controller refuses or fails at; Docker SDK errors are translated into these."""

    code = "cluster-error"


class ClusterUsageError(ClusterError):
    exit_code = EXIT_USAGE
    code = "usage"


class ClusterExists(ClusterUsageError):
    code = "cluster-exists"


class ClusterNotFound(ClusterUsageError):
    code = "cluster-not-found"


class ImageMissing(ClusterUsageError):
    code = "image-missing"


class NodeFailed(ClusterError):
    """A node's part of a job ended badly: which node, how, and the end of what it printed."""

    code = "node-failed"

    def __init__(self, node: str, exit_code: int | None, reason: str, tail: str = "") -> None:
        status = "no exit status" if exit_code is None else f"exit status {exit_code}"
        super().__init__(f"{node} failed ({status}): {reason}" + (f"\n{tail}" if tail else ""))
        self.node, self.exit_code, self.reason, self.tail = node, exit_code, reason, tail


def state_root() -> Path:
    """Host folder holding one folder per cluster (its reports and the last run's outcome)."""
    env = os.environ.get("FAKEGPU_CLUSTER_HOME")
    return Path(env) if env else Path.home() / ".local" / "state" / "fakegpu" / "clusters"


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ClusterUsageError(
            f"invalid cluster name {name!r}: use 1-40 of a-z, 0-9, '_', '.', '-', starting with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class ClusterSpec:
    """What `fakegpu cluster up` asks for; validated before anything is created."""

    name: str
    nodes: int = 2
    devices: str = "a100:4"
    image: str = DEFAULT_IMAGE
    mode: str = "fakecuda"
    workdir: str | None = None
    docker_runtime: str | None = None   # e.g. "fakegpu" for images without the shims baked in
    nproc_per_node: int | None = None   # default: one process per device
    labels: dict[str, str] = field(default_factory=dict)  # extra labels (tests tag what they create)

    def __post_init__(self) -> None:
        check_name(self.name)
        if not 1 <= self.nodes <= 64:
            raise ClusterUsageError(f"--nodes must be 1 to 64, got {self.nodes}")
        if self.mode not in MODES:
            raise ClusterUsageError(f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.workdir is not None and not Path(self.workdir).is_dir():
            raise ClusterUsageError(f"--workdir {self.workdir!r} is not a folder")

    @property
    def network(self) -> str:
        return f"fakegpu-{self.name}"

    def container_name(self, rank: int) -> str:
        return f"fakegpu-{self.name}-node-{rank}"


@dataclass
class Node:
    """One node container as the engine reports it."""

    rank: int
    hostname: str
    container: str
    status: str                  # the engine's: running, exited, ...
    exit_code: int | None
    devices: str

    @property
    def running(self) -> bool:
        return self.status == "running"


@dataclass
class Cluster:
    """A cluster as found by its label: enough for status, run, report and down."""

    name: str
    run_id: str
    mode: str
    image: str
    network: str | None
    state_dir: Path
    nodes: list[Node]

    @property
    def healthy(self) -> bool:
        return bool(self.nodes) and all(n.running for n in self.nodes)

    def as_dict(self) -> dict:
        return {
            "name": self.name, "run_id": self.run_id, "mode": self.mode, "image": self.image,
            "network": self.network, "state_dir": str(self.state_dir), "healthy": self.healthy,
            "nodes": [{"rank": n.rank, "hostname": n.hostname, "container": n.container, "status": n.status,
                       "exit_code": n.exit_code, "devices": n.devices} for n in self.nodes],
        }
