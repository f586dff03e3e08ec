"""The simulated timeline: a native-mode process's recorded GPU work (timeline_log) played on a board's prices
(timeline_price), as the GPU would have run it.

    host     the recorded calls, in their order and with their spacing, delayed only where the program waited for
             the GPU (a device, stream or event synchronisation, a synchronous copy): there the host resumes when
             the simulated GPU gets there, and everything after moves by that wait. The spacing is the process's
             CPU time by default (HOST_CLOCKS: "cpu"), which leaves out the time this machine ran other programs,
             so a loaded machine predicts what an idle one would; "wall" keeps the wall clock's spacing, sleeps
             and waits for other processes included;
    streams  each stream runs its work in order, each piece starting once its launch returned and the stream's
             previous piece ended; the legacy default stream waits for every blocking stream of its device and they
             for it (CUDA's implicit synchronisation), non-blocking streams do not; cudaStreamWaitEvent holds a
             stream until the event's work is done, an event being done when the work queued before its record is.

The result (Simulated) holds Kineto-shaped pieces that timeline_kineto writes as a trace, and the steps: the
intervals between the program's device-wide synchronisations (torch.cuda.synchronize()), which is how a training
script usually marks the end of a step when nothing else does.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from fakegpu.perf import timeline_log as tl
from fakegpu.perf.timeline_price import COLLECTIVES, NCCL_OPS, NCCL_TYPES, Price, Pricer

LEGACY, PER_THREAD = 0, 2
# Correlation ids start high, as CUPTI's do in a real process: HolisticTraceAnalysis stores a trace's row indexes
# in a column typed after the correlation ids, so ids that fit int8 (a small trace) make it fail on row 128.
FIRST_CORRELATION = 1 << 20
HOST_CLOCKS = ("cpu", "wall")
NON_BLOCKING = 1  # CU_STREAM_NON_BLOCKING
_DIRECTIONS = {tl.HTOD: ("HtoD", "Pageable -> Device"), tl.DTOH: ("DtoH", "Device -> Pageable"),
               tl.DTOD: ("DtoD", "Device -> Device"), tl.HTOH: ("HtoH", "Pageable -> Pageable")}
_SYNC_CALLS = {tl.SYNC_DEVICE: "cudaDeviceSynchronize", tl.SYNC_STREAM: "cudaStreamSynchronize",
               tl.SYNC_EVENT: "cudaEventSynchronize"}


@dataclass
class HostCall:
    """A runtime call on the host's track (Kineto cat cuda_runtime)."""

    name: str
    tid: int
    start_ns: float
    end_ns: float
    correlation: int | None = None


@dataclass
class GpuWork:
    """A kernel, copy or fill on a stream's track, linked to its launch by `correlation`."""

    name: str
    cat: str  # kernel, gpu_memcpy, gpu_memset
    device: int
    stream: int  # the stream handle as recorded
    start_ns: float
    end_ns: float
    correlation: int
    args: dict[str, Any]
    estimated: bool = False
    flops: float = 0.0
    dtype: str | None = None


@dataclass
class Simulated:
    pid: int
    rank: int | None
    world: int | None
    base_realtime_ns: int  # the real-time instant of simulated time 0 (the log's first instant; a job's: its first)
    host: list[HostCall] = field(default_factory=list)
    gpu: list[GpuWork] = field(default_factory=list)
    steps: list[tuple[float, float]] = field(default_factory=list)  # (start, end) ns of each step, host time
    main_tid: int = 0
    host_wait_ns: float = 0.0  # how long the host waited for the simulated GPU in all
    notes: list[str] = field(default_factory=list)


class _Streams:
    """When each stream of each device is free, with CUDA's ordering rules between them."""

    def __init__(self) -> None:
        self.free: dict[tuple[int, int], float] = {}
        self.flags: dict[int, int] = {}
        self.waits: dict[tuple[int, int], float] = {}  # cudaStreamWaitEvent holds, until the stream's next piece

    def _key(self, device: int, stream: int, tid: int) -> tuple[int, int]:
        return (device, stream if stream != PER_THREAD else -tid - 1)

    def blocking(self, stream: int) -> bool:
        return stream == LEGACY or not self.flags.get(stream, 0) & NON_BLOCKING

    def ready(self, device: int, stream: int, tid: int) -> float:
        """When work queued now on the stream may start."""
        key = self._key(device, stream, tid)
        at = max(self.free.get(key, 0.0), self.waits.get(key, 0.0))
        if stream == LEGACY:
            at = max([at, *(t for (d, s), t in self.free.items() if d == device and self.blocking(s))])
        elif self.blocking(stream):
            at = max(at, self.free.get((device, LEGACY), 0.0))
        return at

    def run(self, device: int, stream: int, tid: int, end: float) -> None:
        key = self._key(device, stream, tid)
        self.free[key] = end
        self.waits.pop(key, None)

    def wait(self, device: int, stream: int, tid: int, until: float) -> None:
        key = self._key(device, stream, tid)
        self.waits[key] = max(self.waits.get(key, 0.0), until)

    def device_done(self, device: int) -> float:
        return max([0.0, *(t for (d, _), t in self.free.items() if d == device)])


def _nccl_inner_copies(records: list[tl.Record]) -> set[int]:
    """Indexes of the device-to-device copies FakeGPU's NCCL makes inside a collective (so its output carries the
    input's account of written memory, native/cuda/nccl/coll.c): no real NCCL makes them, so the timeline drops
    them."""
    spans: dict[int, list[tuple[int, int]]] = {}
    for r in records:
        if r.kind == tl.COLL:
            spans.setdefault(r.tid, []).append((r.t0, r.t1))
    inner: set[int] = set()
    for i, r in enumerate(records):
        if r.kind == tl.MEMCPY and r.sub == tl.DTOD and any(a <= r.t0 and r.t1 <= b for a, b in spans.get(r.tid, ())):
            inner.add(i)
    return inner


def _clock(log: tl.TimelineLog, host_clock: str):
    """(start, end) of a record on the host clock, from the log's first instant."""
    if host_clock == "wall":
        origin = log.t0_monotonic_ns
        return lambda r: (r.t0 - origin, r.t0 - origin + r.dur)
    # CPU time has no instant in the header: the first record's start is the origin, at its wall-clock offset
    first = min(log.records, key=lambda r: r.t0)
    origin = first.cpu0 - (first.t0 - log.t0_monotonic_ns)
    return lambda r: (r.cpu0 - origin, r.cpu0 - origin + r.cpu_dur)


@dataclass(frozen=True)
class Arrival:
    """A rank reaching a collective on its stream: the moment its kernel could start, and what the log says of
    the collective, to match it with the other ranks' (timeline_ranks)."""

    group: tuple[int, int]  # (communicator tag, ranks): the communicator, as every rank of it records it
    seq: int  # the collective's place among this rank's collectives on that communicator
    kind: int  # the collective (timeline_price.COLLECTIVES' order)
    count: int
    dtype_op: int
    nbytes: int
    at_ns: float


SEND, RECV = 6, 7  # point to point: paired between two ranks, not across the group in order


def simulate(log: tl.TimelineLog, pricer: Pricer, host_clock: str = "cpu") -> Simulated:
    """Play one process's log on the pricer's board, the host spaced by `host_clock` (HOST_CLOCKS), each
    collective starting when this rank reaches it (the others' arrival unknown: timeline_ranks plays them
    together)."""
    run = play(log, pricer, host_clock)
    try:
        arrival = next(run)
        while True:
            arrival = run.send(arrival.at_ns)
    except StopIteration as done:
        return done.value


def play(log: tl.TimelineLog, pricer: Pricer, host_clock: str = "cpu",
         origin_ns: int | None = None) -> Generator[Arrival, float, Simulated]:
    """simulate(), yielding at each group collective when this rank arrives; what is sent back is when the
    collective's transfer starts (the last rank's arrival), which holds this rank's NCCL kernel until then.
    `origin_ns`: the job's time 0 on the monotonic clock (the processes of one host share it), so that the ranks'
    times compare; by default the log's own first instant."""
    records = log.records
    at = _clock(log, host_clock)
    offset = 0 if origin_ns is None else log.t0_monotonic_ns - origin_ns
    # FakeGPU's NCCL moves the data before its call returns, waiting for the peers; a real one queues a kernel and
    # returns. Played together the wait is modelled on the GPU, so a collective's host call costs what this
    # process's kernel launches cost, and the rest of its recorded time comes off the host's later calls.
    enqueue = _launch_cost(records, host_clock) if origin_ns is not None else None
    removed = 0.0
    sim = Simulated(log.pid, log.rank, log.world, log.t0_realtime_ns - offset)
    streams = _Streams()
    events: dict[int, float] = {}
    pending_gemm: dict[int, tl.Record] = {}  # tid -> the GEMM record its stand-in kernel launch follows
    skip = _nccl_inner_copies(records)
    shift = float(offset)  # this process started `offset` after the job's time 0
    corr = FIRST_CORRELATION - 1
    tids: dict[int, int] = {}
    syncs: list[float] = []  # host end of each device-wide synchronisation
    last = float("-inf")
    coll_seq: dict[tuple[int, int], int] = {}
    for i, r in enumerate(records):
        if i in skip:
            continue
        tids[r.tid] = tids.get(r.tid, 0) + 1
        t0, t1 = at(r)
        t0, t1 = t0 - removed, t1 - removed
        if enqueue is not None and r.kind == tl.COLL:
            kept = min(t1 - t0, enqueue)
            removed += t1 - t0 - kept
            t1 = t0 + kept
        # The log's order is the order the calls reached the GPU: a clock reading that runs behind it (two threads'
        # stamps taken in one order and appended in the other) is moved up to its predecessor, and what follows a
        # synchronisation in the log began after it returned.
        if t0 < last:
            t0, t1 = last, last + (t1 - t0)
        last = t1 if r.kind == tl.SYNC else t0
        t0, t1 = t0 + shift, t1 + shift
        if r.kind == tl.STREAM_CREATE:
            streams.flags[r.stream] = r.a
            continue
        if r.kind == tl.GEMM:
            pending_gemm[r.tid] = r
            continue
        if r.kind == tl.EVENT_RECORD:
            events[r.a] = max(t1, streams.ready(r.device, r.stream, r.tid))
            sim.host.append(HostCall("cudaEventRecord", r.tid, t0, t1))
            continue
        if r.kind == tl.STREAM_WAIT:
            streams.wait(r.device, r.stream, r.tid, events.get(r.a, 0.0))
            sim.host.append(HostCall("cudaStreamWaitEvent", r.tid, t0, t1))
            continue
        if r.kind == tl.SYNC:
            if r.sub == tl.SYNC_DEVICE:
                done = streams.device_done(r.device)
            elif r.sub == tl.SYNC_STREAM:
                done = streams.ready(r.device, r.stream, r.tid)
            else:
                done = events.get(r.a, 0.0)
            wait = max(0.0, done - t1)
            shift += wait
            sim.host_wait_ns += wait
            sim.host.append(HostCall(_SYNC_CALLS.get(r.sub, "cudaDeviceSynchronize"), r.tid, t0, t1 + wait))
            if r.sub == tl.SYNC_DEVICE:
                syncs.append(t1 + wait)
            continue
        work = _work(r, pricer, pending_gemm)
        if work is None:
            continue
        name, cat, price, call = work
        corr += 1
        start = max(t1, streams.ready(r.device, r.stream, r.tid))
        begin = start
        if r.kind == tl.COLL and r.sub not in (SEND, RECV):
            group = (r.d >> 32, r.c & 0xFFFFFFFF)
            seq = coll_seq[group] = coll_seq.get(group, -1) + 1
            # The kernel starts when this rank arrives and moves data once every rank has: it spins till then
            begin = max(start, (yield Arrival(group, seq, r.sub, r.b, r.d & 0xFFFFFFFF, r.a, start)))
        end = begin + price.seconds * 1e9
        streams.run(r.device, r.stream, r.tid, end)
        args = dict(price.args)
        if cat == "kernel" and r.kind == tl.KERNEL:
            args |= _launch_args(r)
        if price.estimated:
            args["estimated"] = True
        sim.gpu.append(GpuWork(name, cat, r.device, r.stream, start, end, corr, args, price.estimated, price.flops,
                               price.dtype))
        blocking_copy = r.kind == tl.MEMCPY and not r.b
        wait = max(0.0, end - t1) if blocking_copy else 0.0
        shift += wait
        sim.host_wait_ns += wait
        sim.host.append(HostCall(call, r.tid, t0, t1 + wait, corr))
    sim.main_tid = max(tids, key=tids.get) if tids else log.pid
    sim.steps = list(itertools.pairwise(syncs))
    if log.dropped:
        sim.notes.append(f"the log stopped after its record limit: {log.dropped} later record(s) are missing "
                         "(FAKEGPU_TIMELINE_MAX_RECORDS raises it)")
    if log.cut_short:
        sim.notes.append("the log ends inside a record: the process ended before its last write")
    return sim


def _launch_cost(records: list[tl.Record], host_clock: str) -> float:
    """The median host time of the process's kernel launches (0 without any)."""
    costs = sorted(r.dur if host_clock == "wall" else r.cpu_dur for r in records if r.kind == tl.KERNEL)
    return float(costs[len(costs) // 2]) if costs else 0.0


def _work(r: tl.Record, pricer: Pricer, pending_gemm: dict[int, tl.Record]) -> tuple[str, str, Price, str] | None:
    """(name, Kineto category, price, the host call's name) of a record that queues GPU work; None otherwise."""
    if r.kind == tl.KERNEL:
        name = r.name or "(unnamed kernel)"
        gemm = pending_gemm.pop(r.tid, None)
        if gemm is not None and gemm.name == name:
            price = pricer.gemm(name, gemm.a & 0xFFFFFFFF, gemm.a >> 32, gemm.b & 0xFFFFFFFF, gemm.b >> 32, gemm.d)
            return name, "kernel", price, "cudaLaunchKernel"
        grid = (r.b & 0xFFFFFFFF) * (r.b >> 32) * (r.c & 0xFFFF)
        block = ((r.c >> 16) & 0xFFFF) * ((r.c >> 32) & 0xFFFF) * ((r.c >> 48) & 0xFFFF)
        return name, "kernel", pricer.kernel(name, grid * block), "cudaLaunchKernel"
    if r.kind == tl.MEMCPY:
        short, long_ = _DIRECTIONS.get(r.sub, ("HtoD", "Pageable -> Device"))
        price = pricer.memcpy(short, r.a)
        price = Price(price.seconds, {**price.args, "bytes": r.a})
        return f"Memcpy {short} ({long_})", "gpu_memcpy", price, "cudaMemcpyAsync" if r.b else "cudaMemcpy"
    if r.kind == tl.MEMSET:
        price = pricer.memset(r.a)
        return "Memset (Device)", "gpu_memset", Price(price.seconds, {**price.args, "bytes": r.a}), \
            "cudaMemsetAsync" if r.b else "cudaMemset"
    if r.kind == tl.COLL:
        ranks = r.c & 0xFFFFFFFF
        dtype, op = r.d & 0xFFFF, (r.d >> 16) & 0xFFFF
        _size, torch_name, nccl_type = NCCL_TYPES.get(dtype, (4, "Float", "f32"))
        _, record_name, kernel_name = COLLECTIVES[r.sub] if r.sub < len(COLLECTIVES) else COLLECTIVES[0]
        price = pricer.collective(r.sub, r.a, ranks)
        out_elems = r.b * ranks if r.sub == 3 else r.b
        args = {**price.args, "Collective name": record_name, "In msg nelems": r.b, "Out msg nelems": out_elems,
                "Group size": ranks, "dtype": torch_name, "bytes": r.a}
        name = f"ncclDevKernel_{kernel_name}_{NCCL_OPS.get(op, 'Sum')}_{nccl_type}_RING_LL"
        return name, "kernel", Price(price.seconds, args), "cudaLaunchKernel"
    return None


def _launch_args(r: tl.Record) -> dict[str, Any]:
    return {"grid": [r.b & 0xFFFFFFFF, r.b >> 32, r.c & 0xFFFF],
            "block": [(r.c >> 16) & 0xFFFF, (r.c >> 32) & 0xFFFF, (r.c >> 48) & 0xFFFF], "shared memory": r.d}
