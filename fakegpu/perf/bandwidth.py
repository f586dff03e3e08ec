"""`fakegpu bandwidth`: a collective size sweep measured through torch.distributed on this host or a FakeGPU
cluster, side by side with the topology model's prediction for the target fabric.

The measured figures are what this machine's CPUs, shared memory and TCP achieve carrying the ranks' bytes
(native mode: FakeGPU's NCCL; fakecuda: gloo): a check that the plumbing moves real data and how fast the
rehearsal itself runs, never a GPU's speed. The modeled figures come from `simulate.simulate` on a fabric of the
same shape as the run (nodes x ranks per node) built from the target's board and network. The sizes the ranks
run are the model's rows, rounded as nccl-tests rounds them, so every measured row has its modeled twin.

The rank side is `bandwidth_worker` (torch only); the launchers are in `bandwidth_launch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakegpu.errors import UsageError
from fakegpu.perf.bandwidth_worker import DTYPES, MARKER, OPS
from fakegpu.perf.collectives import busbw_factor
from fakegpu.perf.simulate import Request, simulate
from fakegpu.perf.topology import Fabric, FabricSpec, generated
from fakegpu.reports import schema_id

SCHEMA = schema_id("bandwidth")
# Across nodes the model needs a network; a user who names none gets the common one of HGX-class clusters.
DEFAULT_NETWORK = "ib-ndr400"
MEASURED_IS = ("measured: this host's CPUs, shared memory and TCP carrying the ranks' bytes (FakeGPU's NCCL in "
               "native mode, gloo in fakecuda mode), not a GPU's speed")


class BandwidthError(UsageError):
    """The sweep's result is missing or does not fit the request (the worker failed, or another shape ran)."""

    code = "bandwidth"


@dataclass(frozen=True)
class Sweep:
    """What to measure: ops, the sizes asked for (bytes, before rounding), timing and element type."""

    ops: Sequence[str] = ("all-reduce",)
    sizes: Sequence[int] = ()
    iters: int = 20
    warmup: int = 5
    dtype: str = "float"

    def check(self) -> None:
        from fakegpu.profiles.documents import not_one_of

        for op in self.ops:
            if op not in OPS:
                raise UsageError(f"--op: {not_one_of(op, OPS)}")
        if not self.ops:
            raise UsageError("--op: no collective to measure")
        if len(set(self.ops)) != len(self.ops):
            raise UsageError("--op: a collective is named twice")
        if self.dtype not in DTYPES:
            raise UsageError(f"--dtype: {not_one_of(self.dtype, list(DTYPES))}")
        if self.iters < 1 or self.warmup < 0:
            raise UsageError("--iters must be at least 1 and --warmup at least 0")


@dataclass(frozen=True)
class Shape:
    """The run's shape: the model's fabric has these nodes and ranks per node."""

    nodes: int
    ranks_per_node: int

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node


@dataclass(frozen=True)
class Target:
    """The fabric the model prices: a board (profile name) and a network, or a fabric file."""

    profile: str | None = None
    network: str | None = None
    fabric_file: Path | None = None


@dataclass
class Plan:
    """The modeled sweep per op (simulate-topology reports), and the worker's arguments that run the same sizes."""

    fabric: Fabric
    models: dict[str, dict[str, Any]]
    notes: list[str] = field(default_factory=list)

    def worker_args(self, sweep: Sweep) -> list[str]:
        args = ["--iters", str(sweep.iters), "--warmup", str(sweep.warmup), "--dtype", sweep.dtype]
        for op, report in self.models.items():
            args += ["--sweep", f"{op}:" + ",".join(str(r["size"]) for r in report["rows"])]
        return args


def target_fabric(shape: Shape, target: Target) -> tuple[Fabric, list[str]]:
    """The target fabric with the run's shape, and notes on what was assumed."""
    from fakegpu.perf.fabric_file import load as load_fabric_file
    from fakegpu.profiles import load_catalog

    notes: list[str] = []
    if target.fabric_file is not None:
        if target.profile is not None or target.network is not None:
            raise UsageError("--profile, --fabric: the fabric file describes the fabric; give one or the other")
        spec: FabricSpec = load_fabric_file(target.fabric_file)
        fabric = Fabric(spec)
        if fabric.gpu_count != shape.ranks:
            raise UsageError(f"--fabric-file has {fabric.gpu_count} GPUs; the run has {shape.ranks} ranks "
                             f"({shape.nodes} node(s) x {shape.ranks_per_node}): the model must price the same ranks")
        return fabric, notes
    if target.profile is None:
        raise UsageError("name the target board with --profile (or give --fabric-file)")
    network = target.network
    if network is None and shape.nodes > 1:
        network = DEFAULT_NETWORK
        notes.append(f"target network: {DEFAULT_NETWORK} assumed (--fabric names another)")
    profile = load_catalog().get(target.profile)
    return Fabric(generated(shape.nodes, shape.ranks_per_node, profile, network)), notes


def plan(sweep: Sweep, shape: Shape, target: Target) -> Plan:
    """Validate the sweep, build the target fabric and price every op's sizes on it."""
    sweep.check()
    if shape.ranks < 2:
        raise UsageError(f"a collective needs at least 2 ranks; the run has {shape.ranks}")
    fabric, notes = target_fabric(shape, target)
    models = {op: simulate(fabric, Request(collective=op, dtype=sweep.dtype, sizes=list(sweep.sizes)))
              for op in sweep.ops}
    return Plan(fabric, models, notes)


def parse_worker_output(lines: Sequence[str]) -> dict[str, Any]:
    """The JSON result rank 0 printed (the last such line: a cluster prefixes each line with its node)."""
    import json

    found = None
    for line in lines:
        at = line.find(MARKER)
        if at >= 0:
            found = line[at + len(MARKER):]
    if found is None:
        raise BandwidthError("the sweep printed no result (rank 0's output has no result line)")
    try:
        doc = json.loads(found)
    except ValueError as exc:
        raise BandwidthError(f"the sweep's result line is not JSON ({exc}); another process may have written "
                             "into it") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("ops"), dict):
        raise BandwidthError("the sweep's result has no ops")
    return doc


def _gb_s(size: int, seconds: float) -> float:
    return size / seconds / 1e9 if seconds > 0 else 0.0


def report(plan_: Plan, sweep: Sweep, result: dict[str, Any], run: dict[str, Any],
           rank_local_calls: int | None) -> dict[str, Any]:
    """The fakegpu.bandwidth/v1 report: per op and size the measured and modeled time, algbw and busbw."""
    n = plan_.fabric.gpu_count
    if result.get("world_size") != n:
        raise BandwidthError(f"the sweep ran on {result.get('world_size')} ranks; the model has {n}")
    ops = []
    for op, model in plan_.models.items():
        measured = result["ops"].get(op)
        if not isinstance(measured, list) or len(measured) != len(model["rows"]):
            raise BandwidthError(f"the sweep's result for {op} does not have the {len(model['rows'])} sizes asked")
        factor = busbw_factor(op, n)
        rows = []
        for got, want in zip(measured, model["rows"], strict=True):
            if got["size"] != want["size"]:
                raise BandwidthError(f"{op}: the sweep ran {got['size']} B where {want['size']} B was asked")
            algbw = _gb_s(got["size"], got["time_s"])
            rows.append({
                "size": want["size"], "count": want["count"], "type": want["type"],
                "measured": {"time_us": got["time_s"] * 1e6, "algbw_gb_s": algbw, "busbw_gb_s": algbw * factor},
                "check": got["check"], "wrong_ranks": int(got.get("wrong_ranks", 0)),
                "model": {k: want[k] for k in ("time_us", "algbw_gb_s", "busbw_gb_s", "algorithm", "protocol")},
                "time_ratio": got["time_s"] * 1e6 / want["time_us"] if want["time_us"] > 0 else None,
            })
        ops.append({"op": op, "busbw_factor": factor, "rows": rows,
                    "peak_measured_busbw_gb_s": max(r["measured"]["busbw_gb_s"] for r in rows),
                    "peak_model_busbw_gb_s": model["peak_busbw_gb_s"]})
    checks_ok = all(r["check"] == "ok" for o in ops for r in o["rows"])
    notes = [MEASURED_IS,
             "modeled: the topology model's prediction (simulate-topology) for the target fabric with the run's "
             "ranks; RATIO is measured time / modeled time",
             "busbw as nccl-tests defines it (doc/PERFORMANCE.md), the same factors the model uses",
             f"check: each size's first call ran on rank-distinct values copied from the host and every rank "
             f"compared its output with what the ranks' inputs make ({'all passed' if checks_ok else 'SOME FAILED'})",
             *plan_.notes]
    if rank_local_calls:
        notes.append(f"{rank_local_calls} NCCL call(s) completed rank-locally (from the rank's own input): the "
                     "communicator had no reachable peers, so the times and the count of wrong ranks are each "
                     "rank's own")
    return {
        "schema": SCHEMA,
        "run": run,
        "target": plan_.fabric.describe(),
        "ranks": n,
        "dtype": sweep.dtype,
        "iters": sweep.iters,
        "warmup": sweep.warmup,
        "worker": {k: result.get(k) for k in ("backend", "torch", "torch_cuda", "device", "hostname", "seconds")},
        "rank_local_calls": rank_local_calls,
        "all_checks_passed": checks_ok and not rank_local_calls,
        "ops": ops,
        "notes": notes,
    }
