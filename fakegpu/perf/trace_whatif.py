"""What-if: the same trace re-timed for another board.

Kernels are re-timed by class with the roofline room's numbers (roofline.pricing on a representative op of the
class, so the per-dtype peaks, bandwidth, efficiency factors and fallbacks are exactly estimate-roofline's):

    gemm, attention          compute-bound: time scales by (peak x share) of the source over the target's, in the
                             dtype the kernel name spells (else --dtype);
    elementwise, reduction,  bandwidth-bound: scales by (bandwidth x share) of the kernel kind;
    memset, device copies,
    other
    host<->device copies     PCIe: scales by the boards' PCIe link rates;
    NCCL collectives         priced by a CollectivePricer: with a fabric, the topology model (trace_fabric: the
                             transfer x model time on the target fabric / on the source's); without one, the
                             fallback, the boards' GPU-to-GPU link bandwidth ratio (trace_links).

Each kernel keeps its start-and-drain time (efficiency.yaml kernel_fixed_s of the architecture) apart from its
work. The timeline is then replayed: the host's launch times stay as recorded (the board does not change the
host); each activity starts after what it waited for in the trace (its stream's previous activity, its launch, or
another stream's activity that ended just before it) with the same delay after it; a collective starts on every
rank when the last rank arrives and lasts its re-priced transfer (the shortest duration any rank saw for it: the
others include waiting). Replayed on the source board the trace comes out as recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fakegpu.errors import UsageError
from fakegpu.perf.ops import Attention, Gemm, MemoryOp
from fakegpu.perf.roofline import Board, pricing
from fakegpu.perf.trace_collectives import Collective, collectives
from fakegpu.perf.trace_fabric import FabricPricer
from fakegpu.perf.trace_flops import count as count_flops
from fakegpu.perf.trace_flops import mfu_pct, peak
from fakegpu.perf.trace_kernels import kernel_class, kernel_dtype
from fakegpu.perf.trace_links import CollectivePricer, bandwidth_ratio_pricer, pcie_gb_s, ratio_basis
from fakegpu.perf.trace_retime import replay
from fakegpu.perf.trace_window import Window
from fakegpu.profiles import Profile, load_catalog
from fakegpu.profiles.efficiency import Efficiency, load

# A representative op per class, for its factors only (its size does not enter the ratios).
_MEMORY_KIND = {"elementwise": "elementwise", "reduction": "reduction", "memset": "fill", "memcpy": "copy",
                "other": "copy"}
PCIE, NCCL = "memcpy (host)", "nccl (transfer)"  # what-if classes of their own: priced by links, not the chip
DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")

@dataclass(frozen=True)
class Rate:
    """How one class of kernel runs on one board: work per second relative to nothing (a rate), plus fixed time."""

    rate: float  # FLOP/s or B/s actually sustained
    fixed_us: float
    basis: str


class Rates:
    """Per-class rates of one board, priced by the roofline room."""

    def __init__(self, profile: Profile, dtype: str, eff: Efficiency) -> None:
        self.profile = profile
        self.board = Board.of(profile)
        self.dtype = dtype
        self.eff = eff
        self._cache: dict[tuple[str, str], Rate] = {}
        self.substituted: set[str] = set()

    def _dtype(self, want: str) -> str:
        for d in (want, "fp16", "fp32"):
            try:
                self.board.matrix_peak(d)
            except UsageError:
                continue
            if d != want:
                self.substituted.add(f"{self.profile.id} has no {want} rate: priced as {d}")
            return d
        raise UsageError(f"{self.profile.id}: no usable matrix rate in the catalog")

    def of(self, cls: str, name: str) -> Rate:
        dtype = (kernel_dtype(name) or self.dtype) if cls in ("gemm", "attention") else "fp32"
        key = (cls, dtype)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._price(cls, dtype)
        return found

    def _price(self, cls: str, dtype: str) -> Rate:
        if cls == "gemm":
            d = self._dtype(dtype)
            p = pricing(Gemm(name="gemm", dtype=d, m=4096, n=4096, k=4096), self.board, self.eff)
            return Rate(p.peak * p.compute.expected, p.fixed_s * 1e6, f"{d} {p.peak / 1e12:.4g} TFLOP/s x "
                        f"{p.compute.expected:.3g} ({p.compute.key})")
        if cls == "attention":
            d = self._dtype(dtype)
            p = pricing(Attention(name="sdpa", dtype=d, batch=1, heads=32, q_len=4096, kv_len=4096, head_dim=128,
                                  causal=True), self.board, self.eff)
            return Rate(p.peak * p.compute.expected, p.fixed_s * 1e6, f"{d} {p.peak / 1e12:.4g} TFLOP/s x "
                        f"{p.compute.expected:.3g} ({p.compute.key})")
        kind = _MEMORY_KIND.get(cls, "copy")
        p = pricing(MemoryOp(name=kind, bytes=1 << 30, kind=kind, reduction=cls == "reduction"), self.board, self.eff)
        bw = self.board.bandwidth * p.memory.expected
        return Rate(bw, p.fixed_s * 1e6, f"{self.board.bandwidth / 1e9:.0f} GB/s x {p.memory.expected:.3g} "
                    f"({p.memory.key})")


def source_profile(windows: dict[int, Window], from_profile: str | None) -> Profile:
    """The board the trace ran on: --from-profile, else the trace's deviceProperties name."""
    catalog = load_catalog()
    if from_profile is not None:
        return catalog.get(from_profile)
    names = {w.trace.device_name for w in windows.values()} - {None}
    for name in names:
        found = catalog.find(name)
        if found is not None:
            return found
    seen = ", ".join(sorted(names)) or "none (no deviceProperties)"
    raise UsageError(f"cannot tell which board the trace ran on (its device: {seen}); name it with --from-profile")


def _is_pcie_copy(name: str) -> bool:
    return any(k in name for k in ("HtoD", "DtoH", "HtoH", "Pageable", "Pinned"))


def retime(dur_us: float, src: Rate, dst: Rate) -> float:
    """A kernel of `dur_us` on the source at the target's rate; its start-and-drain part at the target's."""
    fixed = min(dur_us, src.fixed_us)
    share = fixed / src.fixed_us if src.fixed_us else 0.0
    return share * dst.fixed_us + (dur_us - fixed) * src.rate / dst.rate


def what_if(windows: dict[int, Window], target: Profile, *, from_profile: str | None = None, dtype: str = "bf16",
            pricer: CollectivePricer = bandwidth_ratio_pricer) -> dict[str, Any]:
    """The what-if section: per-rank replayed span on the source (a check of the replay) and on the target."""
    if dtype not in DTYPES:
        raise UsageError(f"--dtype: {dtype!r} is not one of {', '.join(DTYPES)}")
    if not any(w.kept for w in windows.values()):
        raise UsageError("nothing to re-time: no GPU activity (kernels, copies, memsets) in the window; the "
                         "report without --profile says why")
    eff = load()
    source = source_profile(windows, from_profile)
    fabric = pricer if isinstance(pricer, FabricPricer) else None
    if fabric is not None:
        fabric.check(source, target)
    src, dst = Rates(source, dtype, eff), Rates(target, dtype, eff)
    pcie = pcie_gb_s(source) / pcie_gb_s(target)
    colls = {r: {c.index: c for c in collectives(r, w)} for r, w in windows.items()}

    by_class: dict[str, list[float]] = {}  # class -> [recorded us, re-timed us], collectives by their transfer

    def new_duration(w: Window, i: int) -> float:
        name, cat = w.trace.names[w.trace.name_id[i]]
        cls = kernel_class(name, cat)
        d = w.trace.dur[i]
        if cls == "memcpy" and _is_pcie_copy(name):
            cls, new = PCIE, d * pcie
        elif cls == "sync":
            new = d  # a wait, not work: what it waited for is re-timed instead
        else:
            new = retime(d, src.of(cls, name), dst.of(cls, name))
        slot = by_class.setdefault(cls, [0.0, 0.0])
        slot[0] += d
        slot[1] += new
        return new

    def new_transfer(c: Collective, us: float) -> float:
        new = pricer(c, source, target, us)
        slot = by_class.setdefault(NCCL, [0.0, 0.0])
        slot[0] += us
        slot[1] += new
        return new

    same = replay(windows, colls, lambda w, i: w.trace.dur[i], lambda c, us: us)
    new = replay(windows, colls, new_duration, new_transfer)
    classes_used = sorted({kernel_class(*w.trace.names[w.trace.name_id[i]]) for w in windows.values()
                           for i in w.kept})
    rows = []
    for r, w in windows.items():
        steps = max(1, w.steps)
        a, b = same[r].span_us, new[r].span_us
        rows.append({"rank": r, "replayed_source_us": a, "predicted_us": b, "replayed_source_step_us": a / steps,
                     "predicted_step_us": b / steps, "speedup": a / b if b else None,
                     "launch_bound_pct": {"source": same[r].launch_bound_pct, "target": new[r].launch_bound_pct}})
    step = max(x["predicted_step_us"] for x in rows)
    mfu = _what_if_mfu(windows, rows, target)
    basis = {cls: {"source": src.of(cls, "").basis, "target": dst.of(cls, "").basis}
             for cls in classes_used if cls not in ("nccl", "sync")}
    basis[NCCL] = fabric.basis() if fabric is not None else {"source": ratio_basis(source),
                                                              "target": ratio_basis(target)}
    basis[PCIE] = {"source": f"PCIe {pcie_gb_s(source):.1f} GB/s", "target": f"PCIe {pcie_gb_s(target):.1f} GB/s"}
    notes = sorted(src.substituted | dst.substituted) + (fabric.notes() if fabric is not None else [])
    notes.append("the host's own time is kept as recorded (after a synchronizing call it resumes when the GPU "
                 "work it waited for ends): a launch-bound step speeds up less than its kernels")
    return {
        "source_profile": source.id,
        "target_profile": target.id,
        "dtype_default": dtype,
        "predicted_step_us": step,
        "source_step_us": max(x["replayed_source_step_us"] for x in rows),
        "ranks": rows,
        "classes": {k: {"recorded_us": a, "predicted_us": b} for k, (a, b) in sorted(by_class.items())},
        "basis": basis,
        "fabric": fabric.section() if fabric is not None else None,
        "mfu": mfu,
        "notes": notes,
    }


def _what_if_mfu(windows: dict[int, Window], rows: list[dict[str, Any]], target: Profile) -> dict[str, Any]:
    """MFU at the predicted step on the target: each rank's FLOPs per step (trace_flops) over its predicted step
    and the target's peak for the rank's dominant dtype; the job's over the slowest rank's step. Sets each row's
    mfu_pct."""
    flops, peaks = 0.0, 0.0
    for row in rows:
        counted = count_flops(windows[row["rank"]])
        per_step = counted.flops / counted.steps
        p = peak(target, counted.dominant)
        row["mfu_pct"] = mfu_pct(per_step, row["predicted_step_us"], p)
        flops += per_step
        peaks = peaks + p if p is not None and peaks is not None else None
    step = max(r["predicted_step_us"] for r in rows)
    return {"flops_per_step": flops, "step_us": step, "mfu_pct": mfu_pct(flops, step, peaks)}
