"""What each piece of recorded GPU work would take on a board: the prices of the simulated timeline.

    GEMMs (cuBLAS, cuBLASLt: shape and dtypes recorded)   the roofline: `roofline.estimate_op` of the GEMM, its
                                                           device time (the host's issue time is the recorded one)
    NCCL collectives (bytes, group size recorded)         the topology model: the fastest algorithm and protocol
                                                           `collectives` finds for the group on one node of the board
                                                           (several nodes of 8 over InfiniBand NDR400 past 8 ranks)
    copies                                                host<->device at the board's PCIe link rate; device to
                                                           device as a copy kernel's traffic on the roofline
    fills                                                 a fill kernel's writes on the roofline
    any other kernel                                      estimated, flagged so: a launch does not say how much data
                                                           a kernel touches, only its grid and block
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from fakegpu.errors import UsageError
from fakegpu.perf.ops import _DEFAULT_OUT, Gemm, MemoryOp, elem_bytes
from fakegpu.perf.roofline import Board, estimate_op, pricing
from fakegpu.perf.trace_kernels import _CLASS_RULES, kernel_class
from fakegpu.perf.trace_whatif import pcie_gb_s
from fakegpu.profiles import Profile
from fakegpu.profiles.efficiency import Efficiency, load

# cudaDataType values (library_types.h) -> the roofline's dtype of the math.
_DATA_TYPES = {0: "fp32", 1: "fp64", 2: "fp16", 3: "int8", 4: "fp32", 5: "fp64", 14: "bf16", 28: "fp8", 29: "fp8"}
# cublasComputeType_t values that change the math of fp32 data: FAST_16F, FAST_16BF, FAST_TF32.
_FAST_COMPUTE = {74: "fp16", 75: "bf16", 77: "tf32"}
# The routine's letter when no data type is recorded (cublasSgemm_v2, cublasDgemmStridedBatched, ...).
_ROUTINE_LETTER = {"S": "fp32", "D": "fp64", "C": "fp32", "Z": "fp64", "H": "fp16"}
UNKNOWN_TYPE = 0xFFFF
GEMM_TF32 = 1

# The estimate for a kernel whose data the launch does not reveal. ATen's elementwise and reduction loops give each
# thread 4 elements (its thread_work_size); an fp32 binary op reads two and writes one: 12 bytes per element.
# cuDNN's stand-ins are launched with one thread per element of their output (native/cuda/dnn/record.c).
ELEMENTS_PER_THREAD = 4
BYTES_PER_ELEMENT = 12
# cuDNN's stand-ins (names "cudnn:...") are launched with one thread per element of their output
# (native/cuda/dnn/record.c).
ONE_ELEMENT_PER_THREAD = "cudnn:"
ESTIMATE_BASIS = (f"estimated: grid x block threads x {ELEMENTS_PER_THREAD} elements x {BYTES_PER_ELEMENT} bytes "
                  "(an fp32 binary elementwise op) at the roofline's bandwidth share; the launch does not reveal "
                  "the kernel's data")

# NCCL's operations in the order native/cuda/nccl/coll.c numbers them, as the topology model, PyTorch's
# record_param_comms and NCCL's kernel names spell them.
COLLECTIVES = (("all-reduce", "allreduce", "AllReduce"), ("broadcast", "broadcast", "Broadcast"),
               ("reduce", "reduce", "Reduce"), ("all-gather", "_allgather_base", "AllGather"),
               ("reduce-scatter", "_reduce_scatter_base", "ReduceScatter"), ("all-to-all", "all_to_all", "AllToAll"),
               ("send-recv", "send", "SendRecv"), ("send-recv", "recv", "SendRecv"))
# ncclDataType_t -> (bytes, the name PyTorch writes in its collective metadata, NCCL's kernel-name spelling)
NCCL_TYPES = {0: (1, "Char", "i8"), 1: (1, "Byte", "u8"), 2: (4, "Int", "i32"), 3: (4, "UInt32", "u32"),
              4: (8, "Long", "i64"), 5: (8, "UInt64", "u64"), 6: (2, "Half", "f16"), 7: (4, "Float", "f32"),
              8: (8, "Double", "f64"), 9: (2, "BFloat16", "bf16")}
NCCL_OPS = {0: "Sum", 1: "Prod", 2: "Max", 3: "Min", 4: "Avg"}
GPUS_PER_NODE = 8
INTER_NODE_NETWORK = "ib-ndr400"


@dataclass(frozen=True)
class Price:
    """One piece of work on the board: its device time and what the trace's args say of how it was priced."""

    seconds: float
    args: dict[str, Any]
    estimated: bool = False
    flops: float = 0.0
    dtype: str | None = None


def gemm_dtype(routine: str, types: int) -> str:
    """The roofline dtype of a recorded GEMM: A's data type, unless the compute type or the handle's TF32 mode
    changes the math of fp32 data; the routine's letter when no data type was recorded."""
    atype, compute, flags = types & 0xFFFF, (types >> 16) & 0xFFFF, types >> 48
    if atype != UNKNOWN_TYPE and atype in _DATA_TYPES:
        dtype = _DATA_TYPES[atype]
    else:
        letter = routine.removeprefix("cublas")[:1]
        dtype = _ROUTINE_LETTER.get(letter, "fp32")
    if dtype == "fp32":
        if compute in _FAST_COMPUTE:
            return _FAST_COMPUTE[compute]
        if flags & GEMM_TF32:
            return "tf32"
    return dtype


class Pricer:
    """Prices of one board (a catalog profile), with the roofline's efficiency factors."""

    def __init__(self, profile: Profile, eff: Efficiency | None = None) -> None:
        self.profile = profile
        self.eff = eff or load()
        self.board = Board.of(profile)
        self.pcie_bytes_s = pcie_gb_s(profile) * 1e9
        self.fixed_s = self.eff.kernel_fixed_s(self.board.arch)

    def gemm(self, routine: str, m: int, n: int, k: int, batch: int, types: int) -> Price:
        dtype = gemm_dtype(routine, types)
        op = Gemm(name=routine, dtype=dtype, m=m, n=n, k=k, batch=max(1, batch), batched=batch > 1)
        row = estimate_op(op, self.board, self.eff)
        return Price(row["device_seconds"]["expected"],
                     {"m": m, "n": n, "k": k, "batch": max(1, batch), "dtype": dtype, "flops": row["flops"],
                      "priced by": f"roofline {self.profile.id} {dtype} ({row['device_bound']}-bound)"},
                     flops=row["flops"], dtype=dtype)

    def kernel(self, name: str, threads: int) -> Price:
        """A kernel whose work the launch does not reveal: estimated from its threads."""
        elements = threads if name.startswith(ONE_ELEMENT_PER_THREAD) else threads * ELEMENTS_PER_THREAD
        cls = kernel_class(name)
        kind = "reduction" if cls == "reduction" else "elementwise"
        op = MemoryOp(name=name, bytes=float(elements * BYTES_PER_ELEMENT), kind=kind, reduction=kind == "reduction")
        row = estimate_op(op, self.board, self.eff)
        return Price(row["device_seconds"]["expected"], {"estimated bytes": elements * BYTES_PER_ELEMENT,
                                                          "priced by": ESTIMATE_BASIS}, estimated=True)

    def memcpy(self, direction: str, nbytes: int) -> Price:
        if direction == "DtoD":
            row = estimate_op(MemoryOp(name="copy", bytes=2.0 * nbytes, kind="copy"), self.board, self.eff)
            return Price(row["device_seconds"]["expected"], {"priced by": f"roofline {self.profile.id} copy"})
        if direction == "HtoH":
            return Price(self.fixed_s, {"priced by": "host to host: the copy engine's start only"})
        return Price(self.fixed_s + nbytes / self.pcie_bytes_s,
                     {"priced by": f"PCIe {self.pcie_bytes_s / 1e9:.1f} GB/s one way"})

    def memset(self, nbytes: int) -> Price:
        row = estimate_op(MemoryOp(name="fill", bytes=float(nbytes), kind="fill"), self.board, self.eff)
        return Price(row["device_seconds"]["expected"], {"priced by": f"roofline {self.profile.id} fill"})

    def collective(self, kind: int, nbytes: int, ranks: int) -> Price:
        name = COLLECTIVES[kind][0] if 0 <= kind < len(COLLECTIVES) else "all-reduce"
        if ranks < 2 or nbytes <= 0:
            return Price(self.fixed_s, {"priced by": "one rank: no transfer, the kernel's start only"})
        seconds, algorithm, protocol = _collective_time(self.profile, name, ranks, float(nbytes))
        return Price(seconds, {"priced by": f"topology model: {algorithm}/{protocol} over {ranks} GPUs"})


def price_sheet(profile: Profile, eff: Efficiency | None = None) -> str:
    """The rates Pricer prices with, as text for FakeGPU's CUPTI, which gives torch.profiler's kernel records
    the durations `fakegpu run --timeline` gives them: per GEMM dtype the compute and memory rates at the roofline's
    expected shares, the kernel's fixed cost and the operand and result sizes (a batched GEMM's rates apart), the
    estimated kernels', copies' and fills' rates, the PCIe link, the dtype tables gemm_dtype reads, and each
    collective's topology-model prices (collective_sheet).
    `key=v,v,...` items joined by ';'. The C side adds the roofline's max(compute, memory) + fixed."""
    pricer = Pricer(profile, eff)
    board, eff = pricer.board, pricer.eff
    items = []
    for dtype in sorted(set(_DATA_TYPES.values()) | set(_FAST_COMPUTE.values())):
        try:
            rates = []
            for batched in (False, True):
                p = pricing(Gemm(name="sheet", dtype=dtype, m=1, n=1, k=1, batched=batched), board, eff)
                rates.append((p.peak * p.compute.expected if p.compute else 0.0, board.bandwidth * p.memory.expected,
                              p.fixed_s))
        except UsageError:  # the board has no such rate
            continue
        (c, m, fixed), (bc, bm, _) = rates
        e = elem_bytes(dtype)
        items += [f"gemm.{dtype}={c!r},{m!r},{fixed!r},{e!r},{float(_DEFAULT_OUT.get(dtype, e))!r}",
                  f"bmm.{dtype}={bc!r},{bm!r}"]
    for kind in ("elementwise", "reduction"):
        p = pricing(MemoryOp(name="sheet", bytes=1.0, kind=kind, reduction=kind == "reduction"), board, eff)
        items.append(f"{kind}={board.bandwidth * p.memory.expected!r},{p.fixed_s!r}")
    # kernel_class's rules in order, as POSIX extended expressions: the first that matches a name says whether
    # the kernel is priced as a reduction (r) or not (o).
    for cls, rule in _CLASS_RULES:
        pattern = rule.pattern.replace(r"\d", "[0-9]")
        if "\\" in pattern or ";" in pattern or not rule.flags & re.I:
            raise ValueError(f"kernel class rule {rule.pattern!r} has no POSIX spelling here")
        items.append(f"class={'r' if cls == 'reduction' else 'o'}:{pattern}")
    copy = pricing(MemoryOp(name="sheet", bytes=1.0, kind="copy"), board, eff)
    fill = pricing(MemoryOp(name="sheet", bytes=1.0, kind="fill"), board, eff)
    items += [f"thread={float(ELEMENTS_PER_THREAD)!r},{float(BYTES_PER_ELEMENT)!r},{ONE_ELEMENT_PER_THREAD}",
              f"copy={board.bandwidth * copy.memory.expected!r},{copy.fixed_s!r}",
              f"fill={board.bandwidth * fill.memory.expected!r},{fill.fixed_s!r}",
              f"pcie={pricer.pcie_bytes_s!r},{pricer.fixed_s!r}",
              "types=" + ",".join(f"{k}:{v}" for k, v in _DATA_TYPES.items()),
              "fast=" + ",".join(f"{k}:{v}" for k, v in _FAST_COMPUTE.items()),
              "letters=" + ",".join(f"{k}:{v}" for k, v in _ROUTINE_LETTER.items())]
    items += collective_sheet(pricer)
    return ";".join(items)


# The group sizes and message sizes the price sheet samples the topology model at: every group on one node (the
# model's own past 8 ranks spans nodes and is not sampled: a profiler's collective over more ranks is unpriced),
# and 1 byte, 1 KiB to 4 GiB by powers of 16, and the sizes where the fastest algorithm or protocol changes.
SHEET_GROUPS = range(2, GPUS_PER_NODE + 1)
SHEET_SIZES = (*(float(1024 * 16**i) for i in range(6)), float(4 << 30))


def collective_samples(pricer: Pricer, kind: int, ranks: int) -> list[tuple[float, float]]:
    """(bytes, seconds) of one collective over `ranks` GPUs, priced by Pricer.collective (the timeline's price) at
    SHEET_SIZES and at each size where the model's pick changes. Each (algorithm, protocol) the model weighs costs
    a latency plus bytes at a rate (collectives.Plan.times), and it picks the fastest: the price is linear between
    those switch points, so linear interpolation between the samples gives the model's price at any size (log-log
    between powers of 4 missed it by up to 12%, where the pick changes)."""
    from fakegpu.perf import collectives

    fabric, plans = _plans(pricer.profile, COLLECTIVES[kind][0], ranks)
    lines = []  # (latency s, s per byte) of each (algorithm, protocol)
    for _algorithm, plan in plans:
        for protocol in collectives.protocols_for(plan, None):
            lat, far = (float(t) for t in plan.times(fabric, np.array([0.0, SHEET_SIZES[-1]]), protocol))
            lines.append((lat, (far - lat) / SHEET_SIZES[-1]))
    lo, hi = 1.0, SHEET_SIZES[-1]  # from one byte: below 1 KiB the pick can change too
    sizes = {lo, *SHEET_SIZES}
    at = lo
    current = min(lines, key=lambda ln: ln[0] + at * ln[1])
    while True:  # along the lower envelope: the next line of a lower rate that the current one crosses
        crossings = [((ln[0] - current[0]) / (current[1] - ln[1]), ln) for ln in lines if ln[1] < current[1]]
        crossings = [(x, ln) for x, ln in crossings if at < x < hi]
        if not crossings:
            break
        at, current = min(crossings)
        sizes.add(at)
    return [(s, pricer.collective(kind, s, ranks).seconds) for s in sorted(sizes)]


def collective_sheet(pricer: Pricer) -> list[str]:
    """The price sheet's collectives: `coll.<kind>.<ranks>=bytes:seconds,...` for each operation native/cuda/nccl
    logs (COLLECTIVES' order) and each group in SHEET_GROUPS."""
    rows: dict[tuple[str, int], str] = {}  # send and recv share a row's text
    items = []
    for kind, (name, _, _) in enumerate(COLLECTIVES):
        for ranks in SHEET_GROUPS:
            key = (name, ranks)
            if key not in rows:
                rows[key] = ",".join(f"{s!r}:{t!r}" for s, t in collective_samples(pricer, kind, ranks))
            items.append(f"coll.{kind}.{ranks}={rows[key]}")
    return items


@lru_cache(maxsize=256)
def _plans(profile: Profile, collective: str, ranks: int) -> tuple[Any, list[tuple[str, Any]]]:
    from fakegpu.perf import collectives
    from fakegpu.perf.topology import Fabric, generated

    nodes = -(-ranks // GPUS_PER_NODE)
    per_node = min(ranks, GPUS_PER_NODE)
    fabric = Fabric(generated(nodes, per_node, profile, INTER_NODE_NETWORK if nodes > 1 else None))
    return fabric, [(a, collectives.plan(fabric, collective, a)) for a in collectives.candidates(fabric, collective)]


@lru_cache(maxsize=65536)
def _collective_time(profile: Profile, collective: str, ranks: int, size: float) -> tuple[float, str, str]:
    """NCCL's pick as the topology model prices it: the fastest (algorithm, protocol) for this size."""
    from fakegpu.perf import collectives

    fabric, plans = _plans(profile, collective, ranks)
    best = (float("inf"), "", "")
    for algorithm, plan in plans:
        for protocol in collectives.protocols_for(plan, None):
            t = float(plan.times(fabric, np.array([size]), protocol)[0])
            best = min(best, (t, algorithm, protocol))
    return best
