"""Model FLOPs utilisation of a trace: the matrix FLOPs of each rank's window per step, over the step time and the
board's dense peak for the dtype that did most of them.

Where the FLOPs come from, first found wins for each GPU kernel in the window:

    kernel args        a kernel's own `flops` arg (FakeGPU's simulated timeline writes it on every GEMM)
    cpu_op flops       the host op that launched it (its External id, else the innermost matrix op around its
                       launch) carrying torch's `flops` arg (torch.profiler's with_flops=True: aten::mm, addmm,
                       bmm, baddbmm, conv2d ...); each host op counted once however many kernels it launched
    cpu_op Input Dims  that op being a GEMM (aten::mm, addmm, bmm, baddbmm, addbmm, _scaled_mm) whose operands'
                       shapes record_shapes=True wrote: 2 x m x n x k (x batch), torch's own count

A rank with no GPU activity at all (a CPU-only profile) counts its matrix host ops inside its steps instead, and
has no MFU: it has no GPU step time. Not counted, and said so: GEMM-class kernels none of the above explains, and
the FLOPs torch gives elementwise ops (aten::mul, aten::add), which are not model FLOPs.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

from fakegpu.errors import UsageError
from fakegpu.perf.roofline import Board
from fakegpu.perf.trace_collect import FLOPS_ARG, INPUT_DIMS, FlopOp
from fakegpu.perf.trace_window import Window
from fakegpu.profiles import Profile

KERNEL_ARGS = "kernel args"
SOURCES = (KERNEL_ARGS, FLOPS_ARG, INPUT_DIMS)
_ENCLOSING_SCAN = 64  # host ops looked back at for the one around a launch (ops nest only a few deep)


@dataclass
class Counted:
    """One rank's FLOPs in its window."""

    flops: float = 0.0
    sources: dict[str, list[float]] = field(default_factory=lambda: {s: [0, 0.0] for s in SOURCES})
    dtypes: dict[str, float] = field(default_factory=dict)
    uncounted_gemm: list[float] = field(default_factory=lambda: [0, 0.0])  # kernels, their GPU us
    steps: int = 1

    def add(self, source: str, flops: float, dtype: str | None) -> None:
        self.flops += flops
        self.sources[source][0] += 1
        self.sources[source][1] += flops
        key = dtype or "unknown"
        self.dtypes[key] = self.dtypes.get(key, 0.0) + flops

    @property
    def dominant(self) -> str | None:
        known = {k: v for k, v in self.dtypes.items() if k != "unknown"}
        return max(known, key=known.get) if known else None


def count(w: Window) -> Counted:
    t = w.trace
    c = Counted(steps=max(1, w.steps))
    ops = sorted(t.flop_ops.values(), key=lambda o: o.ts)
    starts = [o.ts for o in ops]
    seen: set[int] = set()
    if not len(t.start):
        lo, hi = _step_range(w)
        for o in ops:
            if lo <= o.ts < hi:
                c.add(o.source, o.flops, o.dtype)
        return c
    inside = bytearray(len(t.start))
    for i in w.kept:
        inside[i] = 1
    for i, (flops, dtype) in t.kernel_flops.items():
        if inside[i]:
            c.add(KERNEL_ARGS, flops, dtype)
    for i, ext in zip(t.gemm_index, t.gemm_ext, strict=True):
        if not inside[i]:
            continue
        op = t.flop_ops.get(ext)
        if op is None and ops:
            launch = t.launches.get(t.corr[i])
            op = _enclosing(ops, starts, launch) if launch is not None else None
        if op is None:
            c.uncounted_gemm[0] += 1
            c.uncounted_gemm[1] += t.dur[i]
        elif id(op) not in seen:
            seen.add(id(op))
            c.add(op.source, op.flops, op.dtype)
    return c


def _enclosing(ops: list[FlopOp], starts: list[float], at: float) -> FlopOp | None:
    """The innermost matrix op running at `at` (the latest-starting one around it)."""
    j = bisect_right(starts, at)
    for k in range(j - 1, max(-1, j - 1 - _ENCLOSING_SCAN), -1):
        if ops[k].end >= at:
            return ops[k]
    return None


def _step_range(w: Window) -> tuple[float, float]:
    """The host time of the window's steps (the whole trace without steps)."""
    spans = [(ts, end) for name, ts, end in w.trace.steps if name in w.step_names]
    if not spans:
        return float("-inf"), float("inf")
    return min(s for s, _ in spans), max(e for _, e in spans)


def step_period(w: Window) -> float | None:
    """The window's steps' mean period (us): from the first analysed step's start to the start of the step after
    the last (its end when none follows), over the steps, the wall time a step takes; None without two steps."""
    if len(w.step_names) < 1 or len({n for n, _, _ in w.trace.steps}) < 2:
        return None
    first: dict[str, float] = {}
    last_end: dict[str, float] = {}
    for name, ts, end in w.trace.steps:
        first[name] = min(ts, first.get(name, ts))
        last_end[name] = max(end, last_end.get(name, end))
    kept = [n for n in w.step_names if n in first]
    if not kept:
        return None
    later = [first[n] for n in first if n not in kept and first[n] > first[kept[-1]]]
    stop = min(later) if later else last_end[kept[-1]]
    return (stop - first[kept[0]]) / len(kept)


def peak(profile: Profile | None, dtype: str | None) -> float | None:
    """The board's dense FLOP/s in `dtype` (the roofline's catalog peaks); None when either is unknown."""
    if profile is None or dtype is None:
        return None
    try:
        return Board.of(profile).matrix_peak(dtype)
    except UsageError:
        return None


def mfu_pct(flops_per_step: float, step_us: float | None, peak_flops: float | None) -> float | None:
    if not flops_per_step or not step_us or not peak_flops:
        return None
    return round(100.0 * flops_per_step / (step_us * 1e-6 * peak_flops), 4)


def section(w: Window, c: Counted, step_us: float, profile: Profile | None) -> dict[str, Any]:
    """A rank's `flops` section of the report."""
    period = step_period(w)
    basis_us = period if period is not None else step_us
    dtype = c.dominant
    p = peak(profile, dtype)
    gpu = bool(len(w.trace.start))
    return {
        "total": c.flops,
        "per_step": c.flops / c.steps,
        "counted_from": "GPU kernels in the window" if gpu else "host ops in the steps (no GPU activity)",
        "sources": {s: {"ops": int(n), "flops": f} for s, (n, f) in c.sources.items() if n},
        "dtypes": dict(sorted(c.dtypes.items())),
        "dominant_dtype": dtype,
        "not_counted": {
            "gemm_kernels": int(c.uncounted_gemm[0]),
            "gemm_kernels_us": c.uncounted_gemm[1],
            "non_matrix_ops": {k: {"ops": int(n), "flops": f} for k, (n, f) in sorted(w.trace.other_flops.items())},
        },
        "step_us": basis_us if gpu else None,
        "step_basis": ("ProfilerStep period" if period is not None else "GPU span") if gpu else None,
        "profile": profile.id if profile is not None else None,
        "peak_tflops": p / 1e12 if p else None,
        "mfu_pct": mfu_pct(c.flops / c.steps, basis_us, p) if gpu else None,
    }


def overall(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The job's MFU: every rank's FLOPs per step over the slowest rank's step and the sum of the ranks' peaks."""
    usable = [r["flops"] for r in rows if r["flops"]["mfu_pct"] is not None]
    flops = sum(r["flops"]["per_step"] for r in rows)
    if not usable or len(usable) != len(rows):
        return {"flops_per_step": flops, "step_us": None, "mfu_pct": None}
    step = max(f["step_us"] for f in usable)
    peaks = sum(f["peak_tflops"] * 1e12 for f in usable)
    return {"flops_per_step": flops, "step_us": step, "mfu_pct": mfu_pct(flops, step, peaks)}


def notes(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        f = r["flops"]
        n = f["not_counted"]
        if n["gemm_kernels"]:
            out.append(
                f"rank {r['rank']}: {n['gemm_kernels']} GEMM kernel(s) without FLOPs (no flops arg, and no "
                "matrix host op with flops or Input Dims linked to them): not in the MFU; torch.profiler's "
                "with_flops=True or record_shapes=True records them"
            )
        if f["total"] and f["mfu_pct"] is None and f["step_us"] is not None:
            out.append(
                f"rank {r['rank']}: MFU unknown: no catalog peak for "
                f"{f['dominant_dtype'] or 'an unknown dtype'} on {f['profile'] or 'an unknown board'} "
                "(--from-profile names the board)"
            )
    return out
