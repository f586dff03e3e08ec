"""Reader of native mode's timeline log: the `<pid>.fgtl` file each process of a `fakegpu run --timeline` appends
its stream-ordered work to (native/cuda/common/fgc_timeline.h has the format and the writer's rules).

A log is a 64-byte header (pid, $RANK, $WORLD_SIZE, $LOCAL_RANK, one instant on the monotonic and the real-time
clock) and 72-byte records in the order the work was handed to the GPU, each call timed on the wall clock and on
the process's CPU time; names (kernels, cuBLAS routines) come once,
as a NAME record followed by their bytes. A log cut short (the process was killed between two writes) is read up to
its last whole record, and says so.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from fakegpu.errors import TraceError

MAGIC = b"FGTL\x01\x00\x00\x00"
HEADER = struct.Struct("<8siiiiqq24x")
RECORD = struct.Struct("<BBHIqqIIQQQQQ")

KERNEL, MEMCPY, MEMSET, SYNC, EVENT_RECORD, STREAM_WAIT, STREAM_CREATE, GEMM, COLL, NAME, TRUNCATED = range(1, 12)
HTOD, DTOH, DTOD, HTOH = 1, 2, 3, 4
SYNC_DEVICE, SYNC_STREAM, SYNC_EVENT = 1, 2, 3
GEMM_TF32, GEMM_BATCHED, GEMM_CAPTURED = 1, 2, 4


@dataclass(frozen=True)
class Record:
    kind: int
    sub: int
    device: int
    tid: int
    t0: int  # CLOCK_MONOTONIC ns when the call began
    cpu0: int  # the process's CPU time (ns) when it began
    dur: int  # ns the call took on the wall clock
    cpu_dur: int  # ... and in CPU time
    stream: int
    a: int
    b: int
    c: int
    d: int
    name: str | None = None  # a kernel's name, a GEMM's routine

    @property
    def t1(self) -> int:
        return self.t0 + self.dur


@dataclass
class TimelineLog:
    path: Path
    pid: int
    rank: int | None
    world: int | None
    local_rank: int | None
    t0_monotonic_ns: int
    t0_realtime_ns: int
    records: list[Record] = field(default_factory=list)
    dropped: int = 0  # records past the writer's limit (FAKEGPU_TIMELINE_MAX_RECORDS)
    cut_short: bool = False  # the file ends inside a record: the process ended between two writes


def _opt(v: int) -> int | None:
    return None if v < 0 else v


def read_log(path: str | Path) -> TimelineLog:
    """One process's log; TraceError when the file is not a timeline log."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(str(path), f"cannot read the timeline log: {exc.strerror or exc}") from exc
    if len(data) < HEADER.size or data[:8] != MAGIC:
        raise TraceError(str(path), "not a FakeGPU timeline log (no FGTL header)")
    _, pid, rank, world, local, t_mono, t_real = HEADER.unpack_from(data, 0)
    log = TimelineLog(path, pid, _opt(rank), _opt(world), _opt(local), t_mono, t_real)
    names: dict[int, str] = {}
    pos, size = HEADER.size, RECORD.size
    while pos + size <= len(data):
        kind, sub, dev, tid, t0, cpu0, dur, cpu_dur, stream, a, b, c, d = RECORD.unpack_from(data, pos)
        pos += size
        if kind == NAME:
            end = pos + b
            if end > len(data):
                log.cut_short = True
                return log
            names[a] = data[pos:end].decode("utf-8", "replace")
            pos = end + (-b % 8)
            continue
        if kind == TRUNCATED:
            log.dropped += a
            continue
        name = names.get(c if kind == GEMM else a) if kind in (KERNEL, GEMM) else None
        log.records.append(Record(kind, sub, dev, tid, t0, cpu0, dur, cpu_dur, stream, a, b, c, d, name))
    log.cut_short = pos != len(data)
    return log


def logs_in(folder: str | Path) -> list[TimelineLog]:
    """Every process's log in a run's timeline folder, by pid."""
    return [read_log(p) for p in sorted(Path(folder).glob("*.fgtl"), key=lambda p: int(p.stem))]
