"""Publishing this process's device memory to the shared state, so nvidia-smi and NVML list it.

The file and its folder are fakegpu/shared_state.py's. used bytes are what nvidia-smi shows for a torch process:
the CUDA context plus the caching allocator's segments (memory_reserved), not memory_allocated. Usage changes only
when a segment is created or released (or a context is created), not on every tensor; the runtime calls notify()
then, and the new figure is in the mapping, for every reader, before notify() returns. The file appears at the
first use and goes at exit.
"""

from __future__ import annotations

import atexit
import functools
import os
import threading
import time
from typing import Any

from fakegpu import shared_state
from fakegpu.fakecuda.runtime import Runtime
from fakegpu.shared_state import (
    BUSY_GAP_NS,
    SLOT_NS,
    SUFFIX,
    WORK_COMPUTE,
    WORK_MEMORY,
    StateFile,
    UsageReader,
    process_name,
    state_dir,
)

# The state file's layout and busy-time rules as the C++ writer takes them (busy_ring.cpp)
RING_LAYOUT = {name: getattr(shared_state, name) for name in (
    "OFF_BUSY", "BUSY_SLOTS", "SLOT_NS", "SLOT_US", "US_BITS", "SLOT_BITS", "KERNEL_NS", "BUSY_GAP_NS",
    "WORK_COMPUTE", "WORK_MEMORY", "MAX_DEVICES")}


def gpu_instances(runtime: Runtime) -> dict[int, int]:
    """{board index: GPU instance ID} of the MIG devices this process's CUDA sees."""
    migs = [d for d in runtime.devices if d.device.uuid.startswith("MIG-")]
    if not migs or not runtime.spec:
        return {}
    from fakegpu.devices import resolve_devices

    boards = resolve_devices(runtime.spec)  # as Runtime.from_spec resolved them
    return {d.board: m.gi_id for d in migs for m in boards[d.board].mig or () if m.uuid == d.device.uuid}


class Publisher:
    def __init__(self, runtime: Runtime, directory: str | None = None) -> None:
        self.runtime = runtime
        self.dir = directory or state_dir()
        self.pid = os.getpid()
        self.path = os.path.join(self.dir, f"{self.pid}{SUFFIX}")
        self.published: list[int] = []
        self.file: StateFile | None = None
        self.lock = threading.Lock()
        self.closed = False
        # One device's memory serves every process on it: each allocator leaves what the others hold. A MIG
        # instance has memory of its own: its allocator leaves what the processes in the same instance hold.
        self.reader = UsageReader(self.dir)
        self._reader_lock = threading.Lock()
        # The busy span not yet written (board, kind, start, end, end of start's slot): see busy()
        self._span: list[int] | None = None
        # The file's busy-time writer in C++ (busy_ring.cpp), made with the file where the runtime offers one:
        # busy() and flush() with the same arithmetic, without Python for the C++ hook's ops
        self.ring: Any = None
        self.instances = gpu_instances(runtime)
        for d in runtime.devices:
            d.allocator.others = functools.partial(self.others, d.board, self.instances.get(d.board))
        atexit.register(self.close)

    def others(self, board: int, gpu_instance: int | None = None) -> list[tuple[int | None, int]]:
        """(pid, bytes) of the run's other processes on the board now (their files, as NVML reads them; with
        `gpu_instance`, those in that MIG instance), and (None, bytes) for what memory-pressure faults hold outside
        the run (on a whole board: a fault takes the board's memory, not a slice's)."""
        with self._reader_lock:
            found: list[tuple[int | None, int]] = list(self.reader.used(board, os.getpid(), gpu_instance))
        if gpu_instance is not None:
            return found
        faults = self.runtime.faults
        held = faults.pressure(board) if faults is not None else 0
        return [*found, (None, held)] if held else found

    def usage(self) -> list[int]:
        """Bytes per board index (the state file's numbering), summed over the CUDA devices on each board."""
        used = [0] * (max((d.board for d in self.runtime.devices), default=-1) + 1)
        for d in self.runtime.devices:
            if d.initialized:
                used[d.board] += self.runtime.process_used_bytes(d.index)
        return used

    def notify(self) -> None:
        """Called by the runtime when a segment or a context came or went."""
        with self.lock:
            if self.closed or os.getpid() != self.pid:  # a forked child must not write its parent's entry
                return
            used = self.usage()
            before = self.published + [0] * (len(used) - len(self.published))
            if used == before:
                return
            if self.file is None:
                try:
                    self.file = StateFile(self.dir, self.pid, process_name())
                except OSError:
                    self.closed = True  # a read-only or missing state folder must not break the training run
                    return
                if self.runtime.busy_ring is not None:
                    self.ring = self.runtime.busy_ring(self.file.mapping, RING_LAYOUT, self.pid)
            for index, (now, then) in enumerate(zip(used, before, strict=True)):
                if now != then:
                    # the instance first: a reader that sees the bytes sees where they are
                    self.file.set_instance(index, self.instances.get(index) if now else None)
                    self.file.set(index, now)
            self.published = used

    def busy(self, board: int, compute: bool = False, started_ns: int | None = None,
             ended_ns: int | None = None) -> None:
        """An op ran on the board, from started_ns until now (or ended_ns): its time goes into the ring (no lock:
        the file only goes at close; two threads' ops on one board may lose a few microseconds to each other).

        Back-to-back ops of one kind on one board within one time slot are one span to the ring (StateFile.busy
        joins such work into one interval anyway, and its microseconds per slot carry their remainders, so one
        write of the joined span stores exactly what a write per op did): the span is written when work of
        another kind or board comes, after a gap, when a new slot begins, and at sync points (flush()). Readers
        see a slot's work at the latest when the next slot's first op runs, instead of a mapping write per op."""
        if self.ring is not None:
            self.ring.busy(board, compute, started_ns, ended_ns)
            return
        if self.file is None or self.closed:
            return
        now = time.monotonic_ns() if ended_ns is None else ended_ns
        kind = WORK_COMPUTE if compute else WORK_MEMORY
        span = self._span
        if span is not None:
            if (started_ns is not None and span[0] == board and span[1] == kind and now < span[4]
                    and started_ns < span[3] + BUSY_GAP_NS and started_ns != now):
                if now > span[3]:
                    span[3] = now
                return
            self.flush()
        if started_ns is None or started_ns >= now:  # a moment's work (StateFile.busy gives it a kernel's time)
            self._write(board, kind, started_ns, now)
        else:
            self._span = [board, kind, started_ns, now, (now // SLOT_NS + 1) * SLOT_NS]

    def flush(self) -> None:
        """Write the pending busy span (at a sync point: torch.cuda.synchronize, and at exit)."""
        if self.ring is not None:
            self.ring.flush()
            return
        span, self._span = self._span, None
        if span is not None:
            self._write(span[0], span[1], span[2], span[3])

    def _write(self, board: int, kind: int, start_ns: int | None, end_ns: int) -> None:
        f = self.file
        # A forked child shares the parent's file, and what it would write first is the parent's pending work
        # (the open span, the C++ fast path's records): written by the parent already or still to be.
        if f is not None and not self.closed and os.getpid() == self.pid:
            try:
                f.busy(board, kind, start_ns, end_ns)
            except ValueError:  # closed by another thread meanwhile (the process is exiting)
                pass

    def close(self) -> None:
        self.flush()
        with self.lock:
            if self.closed and self.file is None:
                return
            self.closed = True
            if self.ring is not None:  # (it holds the mapping: closed first)
                self.ring.close()
                self.ring = None
            if self.file is not None:
                self.file.close(remove=os.getpid() == self.pid)
                self.file = None
        atexit.unregister(self.close)
