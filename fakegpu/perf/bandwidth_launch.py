"""Where `fakegpu bandwidth` runs its ranks: torchrun --standalone under `fakegpu run` on this host, or one
torchrun per node of a FakeGPU cluster through the cluster controller's run path (as `fakegpu cluster run`).

Both return the worker's result, the output's tail and, in native mode, how many NCCL calls completed rank-locally
(FakeGPU's NCCL counts them in each process report: a communicator that lost or never found its peers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakegpu.errors import UsageError
from fakegpu.perf import bandwidth_worker
from fakegpu.perf.bandwidth import BandwidthError, Plan, Shape, Sweep, parse_worker_output
from fakegpu.perf.bandwidth_worker import MARKER

WORKER_PATH = Path(bandwidth_worker.__file__).resolve()
WORKER_MODULE = "fakegpu.perf.bandwidth_worker"
# inline: the host's worker source travels in the command (any node image with torch runs it, and the result is
# the one this host parses); module: the node image's own fakegpu runs it (its version must match this one).
WORKER_PATHS = ("inline", "module")
TRANSPORTS = ("auto", "shm", "socket")
TAIL = 40
RESULT_FILE = "bandwidth-result.out"  # beside the native process reports, not *.json: it is not one of them
Echo = Callable[[str], None]


@dataclass
class Outcome:
    result: dict[str, Any]
    run: dict[str, Any]
    rank_local_calls: int | None
    tail: list[str] = field(default_factory=list)


def rank_local_calls(report_dir: Path) -> int | None:
    """NCCL calls completed from a rank's own input, summed over the native process reports in report_dir (and
    its node folders); None when no report says (fakecuda mode, or no report written)."""
    total, seen = 0, False
    for path in sorted(report_dir.rglob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        calls = doc.get("collectives", {}).get("rank_local_calls") if isinstance(doc, dict) else None
        if isinstance(calls, int):
            total, seen = total + calls, True
    return total if seen else None


# ---------------------------------------------------------------------- this host


def local_command(plan: Plan, sweep: Sweep, nproc: int, mode: str, devices: str, folder: Path,
                  timeout: str | None) -> list[str]:
    run = [sys.executable, "-m", "fakegpu", "run", "--mode", mode, "--devices", devices,
           *(["--report-dir", str(folder)] if mode == "native" else []),
           *(["--timeout", timeout] if timeout else []), "--"]
    return [*run, sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
            str(WORKER_PATH), *plan.worker_args(sweep), "--out", str(folder / RESULT_FILE)]


def parse_env(items: Sequence[str]) -> dict[str, str]:
    """`--env KEY=VALUE` items (NCCL_SOCKET_IFNAME, FAKEGPU_NCCL_TIMEOUT_S, ... for the ranks)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not key.replace("_", "a").isalnum() or key[0].isdigit():
            raise UsageError(f"--env wants KEY=VALUE with a variable name for KEY, got {item!r}")
        out[key] = value
    return out


def run_local(plan: Plan, sweep: Sweep, nproc: int, mode: str, devices: str, transport: str = "auto",
              timeout: str | None = None, echo: Echo | None = None, extra_env: dict[str, str] | None = None) -> Outcome:
    """The sweep on `nproc` ranks of this host under `fakegpu run --mode MODE --devices DEVICES`."""
    from fakegpu.devices import resolve_devices
    from fakegpu.profiles.documents import not_one_of

    if mode not in ("native", "fakecuda"):
        raise UsageError(f"--mode: {not_one_of(mode, ['native', 'fakecuda'])}")
    if transport not in TRANSPORTS:
        raise UsageError(f"--transport: {not_one_of(transport, TRANSPORTS)}")
    if transport != "auto" and mode != "native":
        raise UsageError("--transport chooses native mode's NCCL transport; fakecuda always goes through gloo")
    have = len(resolve_devices(devices))
    if have < nproc:
        raise UsageError(f"--devices {devices} has {have} GPU(s); --nproc {nproc} needs one per rank")
    env = {**os.environ, **(extra_env or {})}
    if transport != "auto":
        env["FAKEGPU_NCCL_TRANSPORT"] = transport
    with tempfile.TemporaryDirectory(prefix="fakegpu-bandwidth-") as tmp:
        argv = local_command(plan, sweep, nproc, mode, devices, Path(tmp), timeout)
        lines: list[str] = []
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if echo is not None:
                echo(lines[-1])
        code = proc.wait()
        tail = lines[-TAIL:]
        if code != 0:
            raise BandwidthError(f"the sweep's ranks failed (exit status {code}):\n" + "\n".join(tail))
        local = rank_local_calls(Path(tmp)) if mode == "native" else None
        written = Path(tmp) / RESULT_FILE
        result = parse_worker_output([MARKER + written.read_text(encoding="utf-8")] if written.is_file() else lines)
    run = {"kind": "local", "cluster": None, "mode": mode, "devices": devices, "nodes": 1, "ranks_per_node": nproc,
           "transport": transport, "worker": "file"}
    return Outcome(result, run, local, tail)


# ---------------------------------------------------------------------- a cluster


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    mode: str
    devices: str
    shape: Shape
    state_dir: Path


def describe_cluster(name: str, controller: Any = None) -> ClusterInfo:
    """The running cluster's nodes, devices, mode and ranks per node (its NPROC_PER_NODE)."""
    from fakegpu.cluster.controller import Controller
    from fakegpu.cluster.models import ClusterError
    from fakegpu.devices import resolve_devices

    cluster = (controller or Controller()).status(name)
    down = [n.hostname for n in cluster.nodes if not n.running]
    if down or not cluster.nodes:
        raise ClusterError(f"cluster {name!r} is not running (nodes down: {', '.join(down) or 'all'})")
    devices = cluster.nodes[0].devices
    per_node = len(resolve_devices(devices))
    saved = cluster.state_dir / "cluster.json"
    try:
        per_node = int(json.loads(saved.read_text(encoding="utf-8")).get("nproc_per_node") or per_node)
    except (OSError, ValueError):
        pass  # a cluster made on another host: its devices decide, as NPROC_PER_NODE's default does
    return ClusterInfo(name, cluster.mode, devices, Shape(len(cluster.nodes), per_node), cluster.state_dir)


def cluster_command(plan: Plan, sweep: Sweep, worker: str = "inline", extra_env: dict[str, str] | None = None
                    ) -> list[str]:
    """One torchrun per node; its nodes, ranks per node, node rank and master come from the node's PET_* env."""
    if worker not in WORKER_PATHS:
        raise UsageError(f"--worker {worker!r}: one of {', '.join(WORKER_PATHS)}")
    args = plan.worker_args(sweep)
    env = ["env", *(f"{k}={v}" for k, v in extra_env.items())] if extra_env else []
    if worker == "module":
        return [*env, "torchrun", "-m", WORKER_MODULE, *args]
    return [*env, "torchrun", "--no-python", "python3", "-c", WORKER_PATH.read_text(encoding="utf-8"), *args]


def run_cluster(plan: Plan, sweep: Sweep, info: ClusterInfo, worker: str = "inline", echo: Echo | None = None,
                controller: Any = None, extra_env: dict[str, str] | None = None) -> Outcome:
    """The sweep on every node of a running cluster, through the controller's run path."""
    from fakegpu.cluster.controller import Controller

    lines: list[str] = []

    def emit(line: str) -> None:
        lines.append(line)
        if echo is not None:
            echo(line)

    argv = cluster_command(plan, sweep, worker, extra_env)
    result = (controller or Controller()).run(info.name, argv, emit=emit)
    tail = _shown(lines)
    if result.exit_code != 0:
        why = "; ".join(f"{n.node}: {n.reason}" for n in result.failed) or f"exit status {result.exit_code}"
        raise BandwidthError(f"the sweep failed on cluster {info.name} ({why}):\n" + "\n".join(tail))
    local = rank_local_calls(info.state_dir / "reports") if info.mode == "native" else None
    run = {"kind": "cluster", "cluster": info.name, "mode": info.mode, "devices": info.devices,
           "nodes": info.shape.nodes, "ranks_per_node": info.shape.ranks_per_node, "transport": "auto",
           "worker": worker}
    return Outcome(parse_worker_output(lines), run, local, tail)


def _shown(lines: Sequence[str]) -> list[str]:
    # the inline source is one huge argument: keep it out of error messages that quote the output
    return [ln if len(ln) < 2000 else ln[:2000] + " ..." for ln in lines[-TAIL:]]
