"""The fault board: the faults of one run, in one small file of its state folder that every process on the run's
GPUs reads (NVML and nvidia-smi in C, through native/common/fg_faults.c) and that the launcher and
`fakegpu fault inject` write.

A fault is a record with the wall-clock time it takes effect, so a planned fault ("Xid 79 on GPU 1 after 20 s")
and an injected one ("now") are the same thing, and every reader decides alone, with one clock read, whether it
has happened: nothing has to wake the readers or rewrite their state. Writers append under an flock; a record is
complete before the count that publishes it is stored, so lock-free readers never see half of one.

The file is `faults.board` in the state folder (fakegpu/shared_state.py). Layout (native byte order):

    0   magic    8 bytes  MAGIC
    8   count    u32      records published
    12  (zero)   u32
    16  record[MAX_RECORDS], RECORD_SIZE bytes each:
        0   fire_ns  u64  CLOCK_REALTIME nanoseconds at which the fault takes effect
        8   kind     u32  KIND_XID, KIND_CORRECTED_ECC (correctable errors: no event, only the counters move),
                          KIND_MEMORY_PRESSURE (device memory held outside the run from then on) or KIND_THROTTLE
                          (clocks held back from then on) or KIND_NCCL (a rank's NCCL operations hang or fail from
                          then on)
        12  device   u32  index in the run's device table (NVML's index); with FLAG_RANK the global rank
                          ($RANK) of the process it is for
        16  code     u32  KIND_XID: the Xid; KIND_CORRECTED_ECC: how many errors the ECC corrected;
                          KIND_MEMORY_PRESSURE: how many MiB are held; KIND_THROTTLE: the clock-event reason bits
                          (NVML's, low 8 bits) and the SM clock it holds to above them (MHz, or with
                          FLAG_CLOCK_PERCENT a percentage of the board's boost clock); KIND_NCCL: NCCL_HANG or
                          NCCL_REMOTE_ERROR
        20  flags    u32  FLAG_LOST: the device is lost from fire_ns on; FLAG_AFTER_ALLOCATIONS,
                          FLAG_AFTER_COLLECTIVES and FLAG_AFTER_STEPS: see below; FLAG_CLOCK_PERCENT: see code;
                          FLAG_RANK: see device
        24  data     u64  low 32 bits: with FLAG_AFTER_ALLOCATIONS (FLAG_AFTER_COLLECTIVES, FLAG_AFTER_STEPS) the
                          allocation (NCCL operation, training step) count that fires it, else 0;
                          high 32 bits: how many ms a memory pressure or throttle lasts once fired (0: until
                          the run ends)

A record with FLAG_AFTER_ALLOCATIONS waits with fire_ns NEVER until a process's own count of device-memory
allocations on that GPU reaches `data` (native mode's libcuda counts them); that process then stores the time
into fire_ns (a compare-and-swap, so it fires once), and from then on it is a fault like any other. A record
with FLAG_AFTER_COLLECTIVES (always a FLAG_RANK one) waits the same way for the process of its rank to start its
Nth NCCL operation (a collective, a send or a receive: what its process report counts), in native mode's libnccl
and in fakecuda's "nccl" backend alike. One with FLAG_AFTER_STEPS waits for a process of the run (of its rank,
with FLAG_RANK) to finish its Nth training step: an optimizer step, which only fakecuda sees (torch.optim's
global step hook); native mode runs no Python of its own in the program.

Standard library only: tools/gen_contract.py reads these constants into the C readers' header.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import mmap
import os
import secrets
import stat
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass

MAGIC = b"FGFAULT1"
FILE_NAME = "faults.board"
OFF_COUNT = 8
OFF_RECORDS = 16
RECORD_SIZE = 32
MAX_RECORDS = 64
SIZE = OFF_RECORDS + RECORD_SIZE * MAX_RECORDS
KIND_XID = 1
KIND_CORRECTED_ECC = 2
KIND_MEMORY_PRESSURE = 3
KIND_THROTTLE = 4
KIND_NCCL = 5
NCCL_HANG = 1  # the operation never completes: torch's watchdog times it out
NCCL_REMOTE_ERROR = 2  # the operation fails with ncclRemoteError
MIB = 1 << 20
CLOCK_STEP_MHZ = 15  # NVML's supported SM clocks are 15 MHz apart
FLAG_LOST = 1
FLAG_AFTER_ALLOCATIONS = 2
FLAG_CLOCK_PERCENT = 4
FLAG_RANK = 8
FLAG_AFTER_COLLECTIVES = 16
FLAG_AFTER_STEPS = 32
NEVER = (1 << 64) - 1  # the fire time of a record whose trigger has not happened
_RECORD = struct.Struct("=QIIIIQ")
_COUNT = struct.Struct("=I")
assert _RECORD.size == RECORD_SIZE


class BoardFull(Exception):
    """MAX_RECORDS faults are on the board already."""


@dataclass(frozen=True)
class Record:
    fire_ns: int
    device: int
    code: int
    kind: int = KIND_XID
    flags: int = 0
    data: int = 0

    @property
    def lost(self) -> bool:
        return bool(self.flags & FLAG_LOST)

    @property
    def allocations(self) -> int:
        """The allocation (NCCL operation, training step) count that fires it (FLAG_AFTER_ALLOCATIONS,
        _COLLECTIVES, _STEPS)."""
        return self.data & 0xFFFF_FFFF

    @property
    def for_rank(self) -> bool:
        """`device` is a rank (FLAG_RANK)."""
        return bool(self.flags & FLAG_RANK)

    @property
    def lasts_ns(self) -> int:
        """How long it lasts once fired; 0 until the run ends."""
        return (self.data >> 32) * 1_000_000

    def active(self, now_ns: int) -> bool:
        """Fired by `now_ns` (CLOCK_REALTIME) and not over."""
        return self.fire_ns <= now_ns and (not self.lasts_ns or now_ns < self.fire_ns + self.lasts_ns)


def throttle_mhz(r: Record, boost_mhz: int) -> int:
    """The SM clock a throttle record holds its GPU to (at least 1 MHz): native/common/fg_faults.c's rule."""
    value = r.code >> 8
    mhz = boost_mhz * value // 100 // CLOCK_STEP_MHZ * CLOCK_STEP_MHZ if r.flags & FLAG_CLOCK_PERCENT else value
    return max(1, min(mhz, boost_mhz) if boost_mhz else mhz)


def board_path(state_dir: str) -> str:
    return os.path.join(state_dir, FILE_NAME)


class UnsafeBoard(ValueError):
    """The board's name in the state folder is not a plain file (a link, a FIFO, a truncated file): refused, as a
    container's processes can plant anything in its state folder and the host writes there as root."""


def _open(state_dir: str) -> int:
    """The board's descriptor, the file created empty (complete: renamed into place) if it is not there.

    A container's state folder is written by the host and by the container's processes (fakegpu_hook.statedir):
    the name is opened relative to the folder's descriptor without following a link (native/container's
    statedir.c and write_log refuse links the same way), and only a regular file of the board's size is kept,
    so nothing planted there makes the host write elsewhere."""
    dir_fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return _open_in(dir_fd, board_path(state_dir))
    finally:
        os.close(dir_fd)


def _checked(fd: int, path: str) -> int:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size < SIZE:
        os.close(fd)
        raise UnsafeBoard(f"{path} is not a fault board (not a regular file of {SIZE} bytes); refused")
    return fd


def _existing(dir_fd: int, path: str) -> int:
    # O_NONBLOCK: a FIFO planted under the name must not hang the open.
    try:
        fd = os.open(FILE_NAME, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeBoard(f"{path} is a symbolic link; refused") from exc
        raise
    return _checked(fd, path)


def _open_in(dir_fd: int, path: str) -> int:
    try:
        return _existing(dir_fd, path)
    except FileNotFoundError:
        pass
    tmp = f"{FILE_NAME}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
    try:
        os.fchmod(fd, 0o644)  # not the umask's: every user of a container reads its board
        os.write(fd, MAGIC + bytes(SIZE - len(MAGIC)))
        # fails if another writer created it meanwhile: then theirs is the board
        os.link(tmp, FILE_NAME, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        os.close(fd)
        return _existing(dir_fd, path)
    except BaseException:
        os.close(fd)
        raise
    finally:
        os.unlink(tmp, dir_fd=dir_fd)
    return fd


def append(state_dir: str, records: Iterable[Record]) -> int:
    """Publish records on the run's board (created if absent); returns how many the board holds now."""
    os.makedirs(state_dir, exist_ok=True)
    fd = _open(state_dir)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        # pread/pwrite, not a mapping: a board truncated under us (by a container's process) then fails a write
        # instead of killing the writer with SIGBUS. Each record is in place before the count that publishes it
        # (one system call after the other; x86 keeps stores in order).
        head = os.pread(fd, OFF_RECORDS, 0)
        if head[:len(MAGIC)] != MAGIC:
            raise UnsafeBoard(f"{board_path(state_dir)} is not a fault board")
        (count,) = struct.unpack_from("=I", head, OFF_COUNT)
        for r in records:
            if count >= MAX_RECORDS:
                raise BoardFull(f"the run's fault board holds {MAX_RECORDS} faults already")
            os.pwrite(fd, _RECORD.pack(r.fire_ns, r.kind, r.device, r.code, r.flags, r.data),
                      OFF_RECORDS + count * RECORD_SIZE)
            count += 1
            os.pwrite(fd, struct.pack("=I", count), OFF_COUNT)
        return count
    finally:
        os.close(fd)  # releases the lock


def read(state_dir: str) -> list[Record]:
    """Every record on the board, fired or not; [] when the run has none."""
    try:
        with open(board_path(state_dir), "rb") as f:
            raw = f.read(SIZE)
    except FileNotFoundError:
        return []
    if raw[:len(MAGIC)] != MAGIC or len(raw) < SIZE:
        return []
    return _published(raw)


def _published(buffer: bytes | mmap.mmap) -> list[Record]:
    """The records a board's bytes publish (its count's first ones)."""
    (count,) = struct.unpack_from("=I", buffer, OFF_COUNT)
    out = []
    for i in range(min(count, MAX_RECORDS)):
        fire_ns, kind, device, code, flags, data = _RECORD.unpack_from(buffer, OFF_RECORDS + i * RECORD_SIZE)
        out.append(Record(fire_ns, device, code, kind, flags, data))
    return out


def fired(records: Iterable[Record], now_ns: int | None = None) -> list[Record]:
    now = time.time_ns() if now_ns is None else now_ns
    return [r for r in records if r.fire_ns <= now]


class Watch:
    """One process's view of its run's board, for Python readers that ask on every call (fakecuda): mapped once
    (read-write where allowed, to fire allocation-triggered faults), looked for again every 100 ms while the run
    has none, one count load per question while the board is empty. native/common/fg_faults.c is its C twin."""

    RETRY_S = 0.1

    def __init__(self, state_dir: str) -> None:
        self.path = board_path(state_dir)
        self._map: mmap.mmap | None = None
        self._fd = -1
        self._looked = -1.0
        self._writable = False
        # This process's counts, which threads bump concurrently (c10d and autograd threads run collectives and
        # allocate): next() of a C counter is one step under the GIL, where `n += 1` may lose an increment.
        self._allocations: dict[int, itertools.count] = {}
        self._collectives = itertools.count(1)
        self._steps = itertools.count(1)

    def _board(self) -> mmap.mmap | None:
        if self._map is not None:
            return self._map
        now = time.monotonic()
        if self._looked >= 0 and now - self._looked < self.RETRY_S:
            return None
        self._looked = now
        try:
            fd, prot = os.open(self.path, os.O_RDWR | os.O_CLOEXEC), mmap.PROT_READ | mmap.PROT_WRITE
        except PermissionError:
            fd, prot = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC), mmap.PROT_READ
        except FileNotFoundError:
            return None
        try:
            if os.fstat(fd).st_size < SIZE:
                os.close(fd)
                return None
            m = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, prot)
        except OSError:
            os.close(fd)
            return None
        if m[:len(MAGIC)] != MAGIC:
            m.close()
            os.close(fd)
            return None
        self._map, self._fd, self._writable = m, fd, bool(prot & mmap.PROT_WRITE)
        return m

    def _records(self) -> list[Record]:
        m = self._board()
        return [] if m is None else _published(m)

    def quiet(self) -> bool:
        """No fault can touch this process now: no board (looked for again every RETRY_S), or one with no records.
        The per-op question, answered with one count load; lost(), pressure() and slowdown() are all negative then."""
        m = self._map
        if m is None:
            looked = self._looked
            if looked >= 0 and time.monotonic() - looked < self.RETRY_S:
                return True  # _board() would not look again yet
            m = self._board()
            if m is None:
                return True
        return not _COUNT.unpack_from(m, OFF_COUNT)[0]

    def quiet_until_ns(self) -> int:
        """Until when (CLOCK_MONOTONIC ns) quiet() answers True without looking at anything: while no board is
        mapped, until it looks for one again. 0 where it must be asked (a board is mapped, or it never looked)."""
        if self._map is not None or self._looked < 0:
            return 0
        return int((self._looked + self.RETRY_S) * 1e9)

    def lost(self, device: int) -> bool:
        """The GPU (its table index) fell off the bus by now."""
        m = self._board()
        if m is None or not struct.unpack_from("=I", m, OFF_COUNT)[0]:
            return False
        now = time.time_ns()
        return any(r.device == device and r.lost and r.fire_ns <= now for r in self._records())

    def pressure(self, device: int) -> int:
        """Bytes held on the GPU (its table index) outside the run by now (memory-pressure faults)."""
        m = self._board()
        if m is None or not struct.unpack_from("=I", m, OFF_COUNT)[0]:
            return 0
        now = time.time_ns()
        return sum(r.code * MIB for r in self._records()
                   if r.device == device and r.kind == KIND_MEMORY_PRESSURE and r.active(now))

    def slowdown(self, device: int, boost_mhz: int) -> float:
        """How many times longer the GPU's work takes by now: its boost clock over the lowest clock a fired throttle
        holds it to (1.0 unthrottled)."""
        m = self._board()
        if m is None or not struct.unpack_from("=I", m, OFF_COUNT)[0]:
            return 1.0
        now = time.time_ns()
        caps = [throttle_mhz(r, boost_mhz) for r in self._records()
                if r.device == device and r.kind == KIND_THROTTLE and r.active(now)]
        return boost_mhz / min(caps) if caps and boost_mhz else 1.0

    def allocated(self, device: int) -> None:
        """This process allocated device memory on the GPU: faults waiting for its Nth allocation there fire."""
        n = next(self._allocations.setdefault(device, itertools.count(1)))
        m = self._board()
        if m is None or not self._writable:
            return
        self._stamp(m, [i for i, r in enumerate(self._records()) if r.device == device and not r.for_rank
                        and r.flags & FLAG_AFTER_ALLOCATIONS and r.fire_ns == NEVER and n >= r.allocations])

    def collective(self, rank: int) -> int:
        """This process, rank `rank`, starts an NCCL operation: faults waiting for its Nth one fire, and the
        answer is what the operation meets: NCCL_HANG or NCCL_REMOTE_ERROR (the earliest fired and not over) or
        0."""
        n = next(self._collectives)
        m = self._board()
        if m is None or not struct.unpack_from("=I", m, OFF_COUNT)[0]:
            return 0
        mine = [(i, r) for i, r in enumerate(self._records()) if r.kind == KIND_NCCL and r.for_rank
                and r.device == rank]
        if self._writable:
            self._stamp(m, [i for i, r in mine if r.flags & FLAG_AFTER_COLLECTIVES and r.fire_ns == NEVER
                            and n >= r.allocations])
            mine = [(i, r) for i, r in enumerate(self._records()) if r.kind == KIND_NCCL and r.for_rank
                    and r.device == rank]
        now = time.time_ns()
        fired = sorted((r.fire_ns, r.code) for _, r in mine if r.active(now))
        return fired[0][1] if fired else 0

    def stepped(self, rank: int | None) -> None:
        """This process (rank `rank`, None outside a distributed job) finished a training step: faults waiting
        for the Nth step of a process of the run, or of this rank, fire."""
        n = next(self._steps)
        m = self._board()
        if m is None or not self._writable or not struct.unpack_from("=I", m, OFF_COUNT)[0]:
            return
        self._stamp(m, [i for i, r in enumerate(self._records()) if r.flags & FLAG_AFTER_STEPS
                        and r.fire_ns == NEVER and n >= r.allocations
                        and (not r.for_rank or r.device == rank)])

    def _stamp(self, m: mmap.mmap, due: list[int]) -> None:
        """Fire the waiting records `due` (indexes) now, each once."""
        if not due:
            return
        # Python has no compare-and-swap on a mapping: the writers' lock makes the check and the stamp one step
        # (a C process stamping meanwhile only moves the time by the gap between the two).
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            for i in due:
                offset = OFF_RECORDS + i * RECORD_SIZE
                if struct.unpack_from("=Q", m, offset)[0] == NEVER:
                    struct.pack_into("=Q", m, offset, time.time_ns())
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
