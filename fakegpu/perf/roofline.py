"""The roofline: each op's FLOPs and bytes against a board's peaks, with a latency interval.

    lower     the datasheet roofline: max(FLOPs / peak, bytes / bandwidth), nothing else;
    expected  each side at the share its class reaches (efficiency.yaml), plus the kernel's start and drain, and
              never faster than the host can issue the op (`launch`: graph or eager);
    upper     the same at the pessimistic shares and issue times.

Ops are issued asynchronously, so a sequence takes as long as the busier of host and GPU: the total's expected
time is max(sum of host issue times, sum of GPU times), not the sum of the ops' own times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fakegpu.errors import UsageError
from fakegpu.perf.ops import Attention, Custom, Gemm, MemoryOp, Op
from fakegpu.profiles import Profile
from fakegpu.profiles.efficiency import Efficiency, Factor, load
from fakegpu.reports import schema_id

SCHEMA = schema_id("estimate-roofline")
# Dtypes whose GEMMs run on the matrix units; fp64 uses the FP64 tensor rate where the board publishes one.
_TENSOR_PEAK = {"fp64": ("fp64_tensor", "fp64")}
# FlashAttention-2's limits, as torch 2.11 checks them before picking it (sm80+, half types, head_dim <= 256).
_FLASH_DTYPES = ("fp16", "bf16")
_FLASH_MIN_CC = (8, 0)
_FLASH_MAX_HEAD_DIM = 256
SMALL_HEAD_DIM = 64


@dataclass(frozen=True)
class Board:
    """One profile's roofline: per-dtype dense peaks (FLOP/s), memory bandwidth (B/s) and L2 size."""

    profile: Profile
    bandwidth: float
    l2_bytes: int
    tflops: dict[str, float]

    @classmethod
    def of(cls, profile: Profile) -> Board:
        data = profile.data
        return cls(profile, float(data["memory"]["bandwidth_gb_s"]) * 1e9, int(data["l2_cache_bytes"]),
                   {k: float(v) for k, v in data.get("tflops", {}).items()})

    @property
    def arch(self) -> str:
        return self.profile.architecture

    def matrix_peak(self, dtype: str) -> float:
        """Dense FLOP/s of a GEMM in `dtype`; UsageError when the catalog has no such peak for the board."""
        for key in _TENSOR_PEAK.get(dtype, (dtype,)):
            if key in self.tflops:
                return self.tflops[key] * 1e12
        have = ", ".join(k for k in self.tflops if not k.endswith("_tensor")) or "none"
        raise UsageError(f"{self.profile.id} ({self.profile.name}) has no published {dtype} rate in the catalog "
                         f"(it lists: {have})")

    def vector_peak(self, dtype: str) -> float:
        """FLOP/s of arithmetic off the matrix units: the fp64 rate for fp64, else the fp32 rate."""
        return self.matrix_peak("fp64" if dtype == "fp64" and "fp64" in self.tflops else "fp32")

    def peaks(self, eff: Efficiency) -> dict[str, dict[str, float | None]]:
        out: dict[str, dict[str, float | None]] = {}
        for dtype in ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4"):
            try:
                dense = self.matrix_peak(dtype)
            except UsageError:
                continue
            speedup = eff.sparse_speedup(self.arch, dtype)
            out[dtype] = {"dense_tflops": dense / 1e12, "sparse_tflops": dense * speedup / 1e12 if speedup else None,
                          "ridge_point": dense / self.bandwidth}
        return out


@dataclass(frozen=True)
class Pricing:
    """How one op is priced on one board: the peaks it runs against and the shares it reaches."""

    peak: float  # FLOP/s the op's lower bound uses (the sparse rate for a sparse GEMM)
    dense_peak: float  # the dtype's dense FLOP/s, the MFU denominator
    compute: Factor | None
    memory: Factor
    fixed_s: float
    backend: str | None = None


def default_backend(board: Board, op: Attention, eff: Efficiency) -> str:
    """The SDPA kernel PyTorch picks when none is named: FlashAttention where it runs, else memory-efficient."""
    for backend in eff.attention_order():
        if backend != "flash":
            return backend
        if (op.dtype in _FLASH_DTYPES and board.profile.compute_capability >= _FLASH_MIN_CC
                and op.head_dim <= _FLASH_MAX_HEAD_DIM):
            return backend
    return eff.attention_order()[-1]


def pricing(op: Op, board: Board, eff: Efficiency) -> Pricing:
    arch = board.arch
    if isinstance(op, Gemm):
        peak = dense = board.matrix_peak(op.dtype)
        key = f"gemm.impl.{op.impl}.{op.dtype}" if op.impl else f"gemm.compute.{op.dtype}"
        if op.impl and not eff.has(arch, key):
            raise UsageError(f"{op.name}: impl {op.impl!r} has no {op.dtype} factor; known: {', '.join(eff.impls())}")
        compute = eff.factor(arch, key)
        if op.sparse:
            speedup = eff.sparse_speedup(arch, op.dtype)
            if speedup is None:
                raise UsageError(f"{op.name}: {board.profile.id} has no 2:4 sparse {op.dtype} rate (sparse tensor "
                                 "cores: Ampere and later, tf32 and narrower)")
            peak = dense * speedup
            share, why = eff.sparse_realised_share()
            compute = Factor(compute.key + "+sparse", compute.expected * share, compute.pessimistic * share,
                             f"{compute.source}; sparse: {why}", True, compute.architecture)
        memory = eff.factor(arch, "bmm.memory" if op.batched else "gemm.memory")
        return Pricing(peak, dense, compute, memory, eff.kernel_fixed_s(arch))
    if isinstance(op, Attention):
        backend = op.backend or default_backend(board, op, eff)
        peak = board.matrix_peak(op.dtype)
        key = ("backward" if op.backward else "forward") + ("_small_head" if op.head_dim <= SMALL_HEAD_DIM else "")
        return Pricing(peak, peak, eff.factor(arch, f"attention.{backend}.{key}"),
                       eff.factor(arch, f"attention.{backend}.memory"), eff.kernel_fixed_s(arch), backend)
    if isinstance(op, MemoryOp):
        peak = board.vector_peak(op.dtype)
        # Arithmetic in an elementwise kernel runs on the CUDA cores: the share the fp32 GEMM reaches there is the
        # best measured figure for them.
        compute = eff.factor(arch, "gemm.compute.fp32") if op.flops else None
        return Pricing(peak, peak, compute, eff.factor(arch, f"memory.{op.kind}"), eff.kernel_fixed_s(arch, op.kind))
    if isinstance(op, Custom):
        peak = board.matrix_peak(op.dtype)
        return Pricing(peak, peak, eff.factor(arch, f"gemm.compute.{op.dtype}"), eff.factor(arch, "memory.copy"),
                       eff.kernel_fixed_s(arch))
    raise TypeError(f"not an op: {op!r}")


def estimate_op(op: Op, board: Board, eff: Efficiency, launch: str = "graph") -> dict[str, Any]:
    """One op on one board: intensity, bound, latency interval (seconds for one run), achieved rates, MFU."""
    flops, nbytes = op.work()
    p = pricing(op, board, eff)
    host = eff.launch(launch, op.launch_class)
    bw = board.bandwidth

    def device(share_c: float, share_m: float) -> tuple[float, float, float]:
        t_c = flops / (p.peak * share_c) if flops and share_c else 0.0
        t_m = nbytes / (bw * share_m) if nbytes else 0.0
        return t_c, t_m, p.fixed_s + max(t_c, t_m)

    t_c, t_m, dev = device(p.compute.expected if p.compute else 0.0, p.memory.expected)
    _, _, dev_upper = device(p.compute.pessimistic if p.compute else 0.0, p.memory.pessimistic)
    lower = max(flops / p.peak if flops else 0.0, nbytes / bw)
    expected = max(host.expected_s, dev)
    upper = max(host.pessimistic_s, dev_upper)
    if p.fixed_s >= max(t_c, t_m):
        device_bound = "launch"  # the kernel's start and drain outweigh its work
    else:
        device_bound = "compute" if t_c >= t_m else "memory"
    ai = flops / nbytes if nbytes else None
    ridge = p.peak / bw
    out: dict[str, Any] = {
        "name": op.name,
        "op": op.op,
        "dtype": op.dtype,
        "count": op.count,
        "flops": flops,
        "bytes": nbytes,
        "arithmetic_intensity": ai,
        "ridge_point": ridge,
        "roofline_bound": "compute" if ai is None or ai >= ridge else "memory",
        "bound": "launch" if host.expected_s >= dev else device_bound,
        "device_bound": device_bound,
        "peak_tflops": p.peak / 1e12,
        "peak_bandwidth_gb_s": bw / 1e9,
        "seconds": {"lower": lower, "expected": expected, "upper": upper},
        "device_seconds": {"expected": dev, "upper": dev_upper},
        "host_seconds": {"expected": host.expected_s, "upper": host.pessimistic_s},
        "achieved_tflops": flops / expected / 1e12,
        "achieved_bandwidth_gb_s": nbytes / expected / 1e9,
        "mfu": flops / expected / p.dense_peak,
        "fits_l2": nbytes <= board.l2_bytes,
        "efficiency": {
            "compute": p.compute.to_dict() if p.compute else None,
            "memory": p.memory.to_dict(),
            "kernel_fixed_s": p.fixed_s,
            "launch": {"mode": launch, "class": op.launch_class, "source": host.source, "assumed": host.assumed},
        },
    }
    if p.backend:
        out["backend"] = p.backend
    return out


def _total(rows: list[dict[str, Any]], board: Board) -> dict[str, Any]:
    def summed(get) -> float:
        return sum(get(r) * r["count"] for r in rows)

    flops, nbytes = summed(lambda r: r["flops"]), summed(lambda r: r["bytes"])
    host, dev = summed(lambda r: r["host_seconds"]["expected"]), summed(lambda r: r["device_seconds"]["expected"])
    host_up, dev_up = summed(lambda r: r["host_seconds"]["upper"]), summed(lambda r: r["device_seconds"]["upper"])
    expected = max(host, dev)
    by_bound = {b: summed(lambda r, b=b: r["device_seconds"]["expected"] if r["device_bound"] == b else 0.0)
                for b in ("compute", "memory", "launch")}
    # MFU against the peak of the dtype that carries most of the FLOPs (a bf16 model's bf16 rate).
    by_dtype: dict[str, float] = {}
    for r in rows:
        by_dtype[r["dtype"]] = by_dtype.get(r["dtype"], 0.0) + r["flops"] * r["count"]
    main = max(by_dtype, key=by_dtype.get) if by_dtype else "fp32"
    try:
        main_peak = board.matrix_peak(main)
    except UsageError:
        main_peak = board.vector_peak(main)
    return {
        "flops": flops,
        "bytes": nbytes,
        "arithmetic_intensity": flops / nbytes if nbytes else None,
        "dtype": main,
        "ridge_point": main_peak / board.bandwidth,
        "seconds": {"lower": summed(lambda r: r["seconds"]["lower"]), "expected": expected,
                    "upper": max(host_up, dev_up)},
        "host_seconds": {"expected": host, "upper": host_up},
        "device_seconds": {"expected": dev, "upper": dev_up},
        "device_seconds_by_bound": by_bound,
        "bound": "launch" if host > dev else max(by_bound, key=by_bound.get),
        "achieved_tflops": flops / expected / 1e12 if expected else 0.0,
        "achieved_bandwidth_gb_s": nbytes / expected / 1e9 if expected else 0.0,
        "mfu": flops / expected / main_peak if expected else 0.0,
        "peak_tflops": main_peak / 1e12,
        "peak_bandwidth_gb_s": board.bandwidth / 1e9,
    }


def estimate_profile(ops: Sequence[Op], profile: Profile, launch: str = "graph",
                     eff: Efficiency | None = None) -> dict[str, Any]:
    """Every op and their total on one board."""
    eff = eff or load()
    board = Board.of(profile)
    rows = [estimate_op(op, board, eff, launch) for op in ops]
    return {
        "profile": profile.id,
        "name": profile.name,
        "architecture": profile.architecture,
        "compute_capability": profile.data["compute_capability"],
        "bandwidth_gb_s": board.bandwidth / 1e9,
        "l2_cache_bytes": board.l2_bytes,
        "peaks": board.peaks(eff),
        "ops": rows,
        "total": _total(rows, board),
    }


def estimate(ops: Sequence[Op], profiles: Sequence[Profile], *, launch: str = "graph",
             source: dict[str, Any] | None = None, model: dict[str, Any] | None = None,
             notes: Sequence[str] = ()) -> dict[str, Any]:
    """The estimate-roofline report: the ops once, then each board's prices side by side."""
    if not ops:
        raise UsageError("nothing to estimate: the op list is empty")
    if not profiles:
        raise UsageError("name at least one board with --profile")
    if launch not in ("graph", "eager"):
        from fakegpu.profiles.documents import not_one_of

        raise UsageError(f"--launch: {not_one_of(launch, ['graph', 'eager'])}")
    eff = load()
    boards = [estimate_profile(ops, p, launch, eff) for p in profiles]
    assumed = sorted({f"{b['profile']}: {r['efficiency'][side]['key']}" for b in boards for r in b["ops"]
                      for side in ("compute", "memory") if r["efficiency"][side] and r["efficiency"][side]["assumed"]})
    all_notes = list(notes)
    if launch == "graph":
        all_notes.append("launch graph: each kernel costs the host 0.92 us, as in a CUDA graph or a host that keeps "
                         "ahead of the GPU; --launch eager prices PyTorch's per-op dispatch from Python instead")
    else:
        all_notes.append("launch eager: each op costs the host what PyTorch eager dispatch from Python took on the "
                         "capture's host (10-22 us by op class); a property of that CPU and torch, not of the board")
    if assumed:
        all_notes.append(f"{len(assumed)} efficiency factor(s) are assumed rather than measured for the board's "
                         "architecture; each op's efficiency section says which and why")
    return {
        "schema": SCHEMA,
        "input": source or {},
        "launch": launch,
        "model": model,
        "ops": [op.describe() for op in ops],
        "profiles": boards,
        "notes": all_notes,
    }
