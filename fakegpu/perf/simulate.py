"""The simulate-topology report: a collective's size sweep on a fabric, as nccl-tests prints it (size, count,
type, time, algbw, busbw), the algorithm and protocol chosen per size (NCCL-like: the fastest the model finds
unless one is named), and the links that bound it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fakegpu.errors import UsageError, shorten
from fakegpu.perf import collectives
from fakegpu.perf.collectives import ALGORITHMS, COLLECTIVES, Plan, busbw_factor
from fakegpu.perf.fabric_kinds import PROTOCOLS
from fakegpu.perf.topology import Fabric
from fakegpu.perf.training_comm import Parallelism, step_communication
from fakegpu.reports import schema_id
from fakegpu.sizes import parse_bytes

SCHEMA = schema_id("simulate-topology")
MAX_SIZES = 4096
MAX_BYTES = 1 << 50
CRITICAL_SHOWN = 5
# nccl-tests' -d names, with the bytes of one element
DTYPES = {"int8": 1, "uint8": 1, "half": 2, "float16": 2, "bfloat16": 2, "float": 4, "float32": 4, "int32": 4,
          "uint32": 4, "double": 8, "float64": 8, "int64": 8, "uint64": 8}
_RANGE = re.compile(r"^\s*([^:]+?)\s*(?::\s*([^:]+?)\s*)?$")


def parse_sizes(text: str, factor: float = 2.0) -> list[int]:
    """`8B:8GiB` (every size from 8 B to 8 GiB, `factor` apart) or one size (`1GiB`); UsageError otherwise."""
    found = _RANGE.match(text or "")
    if not found:
        raise UsageError(f"--sizes: {shorten(text)} is not MIN:MAX or one size, e.g. 8B:8GiB")
    try:
        low = parse_bytes(found[1])
        high = parse_bytes(found[2]) if found[2] else low
    except ValueError as exc:
        raise UsageError(f"--sizes: {exc}") from None
    if low < 1:
        raise UsageError("--sizes: the smallest size must be at least 1 byte")
    if high < low:
        raise UsageError(f"--sizes: the range runs backwards ({low} B to {high} B)")
    if high > MAX_BYTES:
        raise UsageError(f"--sizes: {high} B is past the model's {MAX_BYTES >> 40} TiB")
    if not factor > 1 or factor != factor or factor == float("inf"):
        raise UsageError(f"--step-factor: {factor} must be a number above 1")
    out, size = [], float(low)
    while size <= high * (1 + 1e-12):
        out.append(round(size))
        if len(out) > MAX_SIZES:
            raise UsageError(f"--sizes: more than {MAX_SIZES} sizes; raise --step-factor")
        size *= factor
    return sorted(set(out))


@dataclass(frozen=True)
class Request:
    collective: str = "all-reduce"
    algorithm: str | None = None  # None: automatic
    protocol: str | None = None
    dtype: str = "float"
    sizes: Sequence[int] = ()
    root: int = 0


def _check(req: Request, fabric: Fabric) -> None:
    from fakegpu.profiles.documents import not_one_of

    if req.collective not in COLLECTIVES:
        raise UsageError(f"--collective: {not_one_of(req.collective, COLLECTIVES)}")
    if req.algorithm is not None and req.algorithm not in ALGORITHMS:
        raise UsageError(f"--algorithm: {not_one_of(req.algorithm, ('auto', *ALGORITHMS))}")
    if req.protocol is not None and req.protocol not in PROTOCOLS:
        raise UsageError(f"--protocol: {not_one_of(req.protocol, ('auto', *PROTOCOLS))}")
    if req.dtype not in DTYPES:
        raise UsageError(f"--dtype: {not_one_of(req.dtype, list(DTYPES))}")
    if not req.sizes:
        raise UsageError("--sizes: no sizes to simulate")
    if fabric.gpu_count < 2:
        raise UsageError(f"{req.collective} needs at least 2 GPUs; the fabric has {fabric.gpu_count}")
    if not 0 <= req.root < fabric.gpu_count:
        raise UsageError(f"--root {req.root} is not a rank of the fabric (0-{fabric.gpu_count - 1})")


def _sizes_as_run(req: Request, n: int) -> np.ndarray:
    """Sizes rounded down as nccl-tests does: whole elements, and for the collectives that split the buffer per
    rank, whole elements per rank."""
    unit = DTYPES[req.dtype] * (n if req.collective in ("all-gather", "reduce-scatter", "all-to-all") else 1)
    return np.array([max(unit, s // unit * unit) for s in req.sizes], dtype=np.float64)


def simulate(fabric: Fabric, req: Request, training: tuple[Path, Parallelism] | None = None) -> dict[str, Any]:
    """The report for one collective's sweep on `fabric`, and with `training` (a model directory and its
    parallelism) the communication of one training step."""
    _check(req, fabric)
    n = fabric.gpu_count
    sizes = _sizes_as_run(req, n)
    algos = [req.algorithm] if req.algorithm else collectives.candidates(fabric, req.collective)
    plans: dict[str, Plan] = {a: collectives.plan(fabric, req.collective, a, req.root) for a in algos}
    chosen, picks = collectives.fastest(fabric, list(plans.values()), sizes, req.protocol)
    factor = busbw_factor(req.collective, n)
    elem = DTYPES[req.dtype]
    rows = []
    for i, size in enumerate(sizes):
        algbw = size / chosen[i] / 1e9
        algo, proto = picks[i]
        rows.append({"size": int(size), "count": int(size // elem), "type": req.dtype,
                     "time_us": float(chosen[i] * 1e6), "algbw_gb_s": float(algbw),
                     "busbw_gb_s": float(algbw * factor), "algorithm": algo, "protocol": proto})
    largest = plans[picks[-1][0]]
    return {
        "schema": SCHEMA,
        "fabric": fabric.describe(),
        "collective": req.collective,
        "ranks": n,
        "dtype": req.dtype,
        "root": req.root if req.collective in ("broadcast", "reduce") else None,
        "requested": {"algorithm": req.algorithm or "auto", "protocol": req.protocol or "auto"},
        "busbw_factor": factor,
        "rows": rows,
        "peak_busbw_gb_s": max(r["busbw_gb_s"] for r in rows),
        "critical_links": critical_links(fabric, largest),
        "critical_algorithm": largest.algorithm,
        "parameters": fabric.kinds.parameters(),
        "notes": _notes(fabric, plans, req),
        "training_step": None if training is None else step_communication(fabric, *training),
    }


def critical_links(fabric: Fabric, plan: Plan, shown: int = CRITICAL_SHOWN) -> list[dict[str, Any]]:
    """The most loaded links of `plan` relative to their bandwidth: the first sets the large-size time."""
    _, busy = plan.seconds_per_byte(fabric)
    load = plan.total_load()
    order = np.argsort(-busy, kind="stable")[:shown]
    shares = fabric.kinds.shares
    out = []
    for i in order:
        if busy[i] <= 0:
            break
        cls = ("nvlink", "pcie", "network")[fabric.link_class[i]]
        nvls = plan.nvls_load is not None and plan.nvls_load[i] > 0
        share = shares["nvls" if nvls and cls == "nvlink" else cls]
        out.append({"link": fabric.link_name(int(i)), "class": cls, "utilisation": round(float(busy[i]), 4),
                    "load_bytes_per_byte": round(float(load[i]), 6),
                    "line_rate_gb_s": fabric.capacity[i] / 1e9, "effective_gb_s": fabric.capacity[i] * share / 1e9})
    # how many links share the worst load: a ring's bottleneck is usually every GPU's port at once
    tied = int((busy >= 0.999).sum())
    if out:
        out[0]["tied_links"] = tied
    return out


def _notes(fabric: Fabric, plans: dict[str, Plan], req: Request) -> list[str]:
    notes = ["busbw as nccl-tests defines it (doc/PERFORMANCE.md): algbw x " + {
        "all-reduce": "2(n-1)/n", "all-gather": "(n-1)/n", "reduce-scatter": "(n-1)/n",
        "all-to-all": "(n-1)/n"}.get(req.collective, "1")]
    if not req.algorithm:
        notes.append("algorithm and protocol: the fastest the model finds per size among "
                     + ", ".join(plans) + " (NCCL's tuner picks from its own cost model the same way)")
    for p in plans.values():
        notes.extend(f"{p.algorithm}: {note}" for note in p.notes)
    if fabric.nodes > 1:
        notes.append("GPU-to-NIC traffic over PCIe is not priced; leaf uplinks are one pooled link per leaf "
                     "(ECMP assumed balanced)")
    return notes
