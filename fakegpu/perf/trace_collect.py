"""One rank's trace reduced to what the replay needs, event by event, so that memory grows with the number of GPU
activities (a few machine words each, in arrays) and not with the file.

Kineto's layout, as PyTorch writes it: host events (`cpu_op`, `user_annotation`, `cuda_runtime`, `cuda_driver`,
...) on the process's pid; GPU activities (`kernel`, `gpu_memcpy`, `gpu_memset`, `cuda_sync`) on a device pid and
a stream tid, with `args.stream` and `args.correlation`; the launch that queued an activity carries the same
correlation; `[memory]` instant events (`ph: i`) with the allocator's totals after each allocation or free;
`ac2g` flow arrows and `ph: M` track names. An activity is "on the GPU" when it carries an integer `args.stream`,
the test HTA uses as well.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from typing import Any

from fakegpu.perf.trace_kernels import kernel_class, kernel_dtype
from fakegpu.perf.trace_read import TraceFile

STEP_PREFIX = "ProfilerStep"
FLOPS_ARG, INPUT_DIMS = "cpu_op flops", "cpu_op Input Dims"
# The matrix ops whose FLOPs count toward MFU (model FLOPs: GEMMs and convolutions), and where a GEMM's two
# operands sit in its Input Dims: (index of A, index of B, their rank). aten::matmul and aten::linear are left
# out: they dispatch to one of these, which carries the count.
_GEMM_OPERANDS = {"aten::mm": (0, 1, 2), "aten::addmm": (1, 2, 2), "aten::bmm": (0, 1, 3),
                  "aten::baddbmm": (1, 2, 3), "aten::addbmm": (1, 2, 3), "aten::_scaled_mm": (0, 1, 2)}
MATRIX_OPS = frozenset({*_GEMM_OPERANDS, "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution",
                        "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d"})
MATH_DTYPES = frozenset({"fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8"})
# An op's first input's dtype, as the profiler spells it (record_shapes' Input type)
_TORCH_DTYPES = {"float": "fp32", "double": "fp64", "BFloat16": "bf16", "Half": "fp16", "Float8_e4m3fn": "fp8",
                 "Float8_e5m2": "fp8", "signed char": "int8", "int8": "int8"}
MAX_ANNOTATION_NAMES = 4096
# Host calls that block until the GPU has finished earlier work: after one, the host's timing follows the GPU's.
SYNC_CALLS = frozenset({"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
                        "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize"})
# Copies may block until their own copy is done (to or from pageable memory, even the Async ones): the replay
# treats such a call as blocking when its copy, found by correlation id, ended before the call returned.
COPY_CALLS = ("cudaMemcpy", "cuMemcpy")
# Metadata PyTorch's record_param_comms writes on the collective's host op and (since 2.1) on the NCCL kernel.
COLLECTIVE_ARGS = {
    "Collective name": "collective", "In msg nelems": "in_nelems", "Out msg nelems": "out_nelems",
    "In msg size": "in_bytes", "Out msg size": "out_bytes", "dtype": "dtype", "Group size": "group_size",
    "Process Group Name": "pg_name", "Process Group Description": "pg_desc", "Process Group Ranks": "pg_ranks",
    "In split size": "in_split", "Out split size": "out_split",
}


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def _num(value: Any) -> float | None:
    # NaN and Infinity are JSON to Python's reader; one such time would turn every sum over the trace into NaN.
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


@dataclass
class Annotation:
    count: int = 0
    total_us: float = 0.0


@dataclass
class MemorySeries:
    """One allocator's `[memory]` samples: totals after each allocation or free."""

    ts: array = field(default_factory=lambda: array("d"))
    allocated: array = field(default_factory=lambda: array("q"))
    reserved: array = field(default_factory=lambda: array("q"))
    devices: set[int] = field(default_factory=set)


@dataclass
class FlopOp:
    """A host op (cpu_op) whose FLOPs are known: torch's `flops` arg (with_flops=True), else a GEMM's from its
    `Input Dims` (record_shapes=True)."""

    name: str
    ts: float
    end: float
    flops: float
    source: str  # FLOPS_ARG or INPUT_DIMS
    dtype: str | None


@dataclass
class RankTrace:
    """The reduced trace of one file (one rank)."""

    path: str
    header: dict[str, Any] = field(default_factory=dict)
    compressed: bool = False
    events: int = 0
    # GPU activities, one slot per activity in each array
    start: array = field(default_factory=lambda: array("d"))
    dur: array = field(default_factory=lambda: array("d"))
    stream: array = field(default_factory=lambda: array("q"))
    name_id: array = field(default_factory=lambda: array("l"))
    corr: array = field(default_factory=lambda: array("q"))
    names: list[tuple[str, str]] = field(default_factory=list)  # (name, cat) per name_id
    collectives: dict[int, dict[str, Any]] = field(default_factory=dict)  # activity index -> metadata
    launches: dict[int, float] = field(default_factory=dict)  # correlation -> host launch start (us)
    steps: list[tuple[str, float, float]] = field(default_factory=list)  # host ProfilerStep#N (name, ts, end)
    # host calls that may block: (ts, end, correlation of the copy they issued, or -1 for a synchronize call)
    syncs: list[tuple[float, float, int]] = field(default_factory=list)
    annotations: dict[str, Annotation] = field(default_factory=dict)
    gpu_annotations: dict[str, Annotation] = field(default_factory=dict)
    # FLOPs, for MFU (trace_flops): a kernel's own `flops` arg and dtype; the External id of a GEMM-class kernel
    # without one (its host op may say); host ops that carry FLOPs or a GEMM's shapes, by External id; host ops
    # whose FLOPs are not matrix math (torch's with_flops counts aten::mul and aten::add too), by name
    kernel_flops: dict[int, tuple[float, str | None]] = field(default_factory=dict)
    gemm_index: array = field(default_factory=lambda: array("q"))  # arrays, not a dict: a large trace has millions
    gemm_ext: array = field(default_factory=lambda: array("q"))
    flop_ops: dict[int, FlopOp] = field(default_factory=dict)
    other_flops: dict[str, list[float]] = field(default_factory=dict)
    memory: dict[str, MemorySeries] = field(default_factory=dict)  # "device" (CUDA) and "host" allocators
    used: dict[str, int] = field(default_factory=dict)
    ignored: dict[str, int] = field(default_factory=dict)
    unusable: dict[str, int] = field(default_factory=dict)
    first_ts: float | None = None
    last_ts: float | None = None

    @property
    def rank(self) -> int | None:
        return _int((self.header.get("distributedInfo") or {}).get("rank"))

    @property
    def world_size(self) -> int | None:
        return _int((self.header.get("distributedInfo") or {}).get("world_size"))

    @property
    def device_name(self) -> str | None:
        props = self.header.get("deviceProperties")
        if isinstance(props, list) and props and isinstance(props[0], dict):
            name = props[0].get("name")
            return name if isinstance(name, str) else None
        return None

    def activity(self, i: int) -> tuple[str, str]:
        return self.names[self.name_id[i]]


class _Collector:
    def __init__(self, trace: RankTrace, round_us: bool = False) -> None:
        self.t = trace
        self.round_us = round_us
        self._name_ids: dict[tuple[str, str], int] = {}
        self._host_collectives: dict[int, dict[str, Any]] = {}  # External id -> metadata of the host op
        self._pending: list[tuple[int, int]] = []  # (activity index, External id) of NCCL kernels without metadata

    def _count(self, table: dict[str, int], key: str) -> None:
        table[key] = table.get(key, 0) + 1

    def _name_id(self, name: str, cat: str) -> int:
        key = (name, cat)
        found = self._name_ids.get(key)
        if found is None:
            found = self._name_ids[key] = len(self.t.names)
            self.t.names.append(key)
        return found

    def add(self, e: Any) -> None:
        t = self.t
        if not isinstance(e, dict):
            self._count(t.unusable, "not a JSON object")
            return
        ph = e.get("ph")
        cat = e.get("cat")
        cat = cat if isinstance(cat, str) else ""
        if ph == "X":
            self._complete(e, cat)
        elif ph in ("i", "I") and e.get("name") == "[memory]":
            self._memory(e)
        elif ph == "M":
            self._count(t.used, "metadata (track names)")
        elif ph in ("s", "f", "t") and cat.startswith(("ac2g", "fwdbwd")):
            self._count(t.used, "flow (launch links, read through correlation ids)")
        else:
            self._count(t.ignored, f"ph={ph} cat={cat or '-'}")

    def _complete(self, e: dict[str, Any], cat: str) -> None:
        t = self.t
        ts, dur, name = _num(e.get("ts")), _num(e.get("dur")), e.get("name")
        if ts is None or dur is None or not isinstance(name, str) or dur < 0:
            self._count(t.unusable, "complete event without a number ts, dur >= 0 and a string name")
            return
        if self.round_us:
            # HTA's time base: each event shrunk to whole microseconds (start up, end down); a sub-microsecond
            # event that shrinks past nothing is kept empty rather than negative.
            end = math.floor(ts + dur)
            ts = float(math.ceil(ts))
            dur = max(0.0, end - ts)
        t.first_ts = ts if t.first_ts is None or ts < t.first_ts else t.first_ts
        end = ts + dur
        t.last_ts = end if t.last_ts is None or end > t.last_ts else t.last_ts
        args = e.get("args")
        args = args if isinstance(args, dict) else {}
        stream = _int(args.get("stream")) if "stream" in args and cat != "gpu_user_annotation" else None
        if stream is not None and stream >= 0:
            i = len(t.start)
            t.start.append(ts)
            t.dur.append(dur)
            t.stream.append(stream)
            t.name_id.append(self._name_id(name, cat))
            corr = _int(args.get("correlation"))
            t.corr.append(-1 if corr is None else corr)
            self._count(t.used, f"gpu {cat or 'activity'}")
            if cat == "kernel" and not name.startswith("nccl"):
                self._kernel_flops(i, name, args)
            if name.startswith("nccl"):
                meta = _collective_args(args)
                ext = _int(args.get("External id"))
                if meta:
                    t.collectives[i] = meta
                elif ext is not None:
                    self._pending.append((i, ext))
                else:
                    t.collectives[i] = {}
            return
        corr = _int(args.get("correlation"))
        if corr is not None and corr >= 0:
            # A runtime call and the driver call under it share one correlation: the earlier one launched it.
            if corr not in t.launches or ts < t.launches[corr]:
                t.launches[corr] = ts
            if name in SYNC_CALLS:
                t.syncs.append((ts, end, -1))
            elif name.startswith(COPY_CALLS):
                t.syncs.append((ts, end, corr))
            self._count(t.used, f"launch {cat or 'event'}")
            return
        if STEP_PREFIX in name:
            t.steps.append((name, ts, end))
        if cat == "gpu_user_annotation":
            self._annotate(t.gpu_annotations, name, dur)
            self._count(t.used, "gpu_user_annotation")
            return
        if cat == "user_annotation":
            self._annotate(t.annotations, name, dur)
        if cat == "cpu_op":
            self._host_flops(name, ts, end, args)
        meta = _collective_args(args)
        if meta:
            ext = _int(args.get("External id"))
            if ext is not None:
                self._host_collectives[ext] = meta
        self._count(t.used, f"host {cat or 'event'}")

    def _kernel_flops(self, i: int, name: str, args: dict[str, Any]) -> None:
        flops = _num(args.get("flops"))
        if flops is not None and flops > 0:
            dtype = args.get("dtype")
            self.t.kernel_flops[i] = (flops, dtype if dtype in MATH_DTYPES else kernel_dtype(name))
            return
        ext = _int(args.get("External id"))
        if ext is not None and kernel_class(name) == "gemm":
            self.t.gemm_index.append(i)
            self.t.gemm_ext.append(ext)

    def _host_flops(self, name: str, ts: float, end: float, args: dict[str, Any]) -> None:
        flops = _num(args.get("flops"))
        matrix = name in MATRIX_OPS
        if flops is not None and flops > 0 and not matrix:
            slot = self.t.other_flops.setdefault(name, [0, 0.0])
            slot[0] += 1
            slot[1] += flops
            return
        if not matrix:
            return
        ext = _int(args.get("External id"))
        if ext is None:
            return
        dtype = _input_dtype(args.get("Input type"))
        if flops is not None and flops > 0:
            self.t.flop_ops[ext] = FlopOp(name, ts, end, flops, FLOPS_ARG, dtype)
            return
        shaped = gemm_flops(name, args.get("Input Dims"))
        if shaped:
            self.t.flop_ops[ext] = FlopOp(name, ts, end, shaped, INPUT_DIMS, dtype)

    def _annotate(self, table: dict[str, Annotation], name: str, dur: float) -> None:
        slot = table.get(name)
        if slot is None:
            if len(table) >= MAX_ANNOTATION_NAMES:
                name = "(other annotations)"
            slot = table.setdefault(name, Annotation())
        slot.count += 1
        slot.total_us += dur

    def _memory(self, e: dict[str, Any]) -> None:
        t = self.t
        args = e.get("args")
        ts = _num(e.get("ts"))
        if not isinstance(args, dict) or ts is None:
            self._count(t.unusable, "[memory] event without ts or args")
            return
        alloc, reserved = _int(args.get("Total Allocated")), _int(args.get("Total Reserved"))
        kind = _int(args.get("Device Type"))
        if alloc is None:
            self._count(t.unusable, "[memory] event without Total Allocated")
            return
        # Device Type is c10's DeviceType: 0 the host allocator, 1 CUDA (others: other accelerators' allocators).
        series = t.memory.setdefault("host" if kind == 0 else "device", MemorySeries())
        series.ts.append(ts)
        series.allocated.append(alloc)
        series.reserved.append(reserved if reserved is not None else -1)
        device = _int(args.get("Device Id"))
        if device is not None and device >= 0:
            series.devices.add(device)
        self._count(t.used, "[memory] " + ("host" if kind == 0 else "device"))

    def finish(self) -> None:
        for i, ext in self._pending:
            self.t.collectives[i] = dict(self._host_collectives.get(ext, {}))


def _input_dtype(types: Any) -> str | None:
    if isinstance(types, list) and types and isinstance(types[0], str):
        return _TORCH_DTYPES.get(types[0].removeprefix("c10::"))
    return None


def _dims(value: Any, rank: int) -> list[int] | None:
    if isinstance(value, list) and len(value) == rank and all(isinstance(v, int) and v >= 0 for v in value):
        return value
    return None


def gemm_flops(name: str, dims: Any) -> float | None:
    """2 x m x n x k (x batch) of a GEMM op from its `Input Dims`, the count torch's with_flops gives it; None
    when the shapes are not a GEMM's."""
    where = _GEMM_OPERANDS.get(name)
    if where is None or not isinstance(dims, list) or len(dims) <= where[1]:
        return None
    a, b = _dims(dims[where[0]], where[2]), _dims(dims[where[1]], where[2])
    if a is None or b is None or a[-1] != b[-2] or a[:-2] != b[:-2]:
        return None
    batch = a[0] if where[2] == 3 else 1
    return 2.0 * batch * a[-2] * a[-1] * b[-1]


def _collective_args(args: dict[str, Any]) -> dict[str, Any]:
    return {short: args[raw] for raw, short in COLLECTIVE_ARGS.items() if raw in args}


def collect(path: str, chunk_bytes: int | None = None, round_us: bool = False) -> RankTrace:
    """Read one trace file to its end and reduce it; TraceError when it cannot be read. `round_us`: times in
    whole microseconds as HolisticTraceAnalysis reads them, to compare with it."""
    f = TraceFile(path) if chunk_bytes is None else TraceFile(path, chunk_bytes)
    trace = RankTrace(path=str(path))
    c = _Collector(trace, round_us)
    add = c.add
    for event in f.events():
        add(event)
    c.finish()
    trace.header = f.header
    trace.compressed = f.compressed
    trace.events = f.events_seen
    return trace
