"""The shared state: one small file per process that uses a fake GPU, which NVML and nvidia-smi read.

A real driver knows every context's memory the moment it is allocated, so `nvidia-smi` run right after a
`cudaMalloc` shows it. Ours does too: each process's file is mapped into its own memory (MAP_SHARED), an
allocation is a store into the mapping, and a reader maps the same file and loads the counters on every query.
Nothing is rewritten, flushed or rate-limited.

The folder is `$FAKEGPU_STATE_DIR`, else /run/fakegpu when it exists (a container's), else
`$TMPDIR/fakegpu-<uid>`. The file is `<pid>.proc`, created complete (a temp file renamed into place, so a reader
never sees half a header) and unlinked at exit; readers delete the files of pids that no longer exist, as a
real driver reaps a killed process's context. Layout (native byte order, fixed offsets):

    0   magic     8 bytes  MAGIC
    8   pid       u32      the writer's pid (in its own pid namespace: the container's)
    12  type      1 byte   C (compute) or G (graphics)
    16  name      64 bytes what nvidia-smi shows, NUL-terminated, no tab or newline
    80  used      u64[64]  bytes in use per device index: 0 = this process does not use that device
    592 busy      u64[64][BUSY_SLOTS] per device, how long this process kept it busy in each recent time slot
    ... instance  u8[64]   per device, the MIG GPU instance the process's memory is in: its GPU instance ID + 1;
                           0 = the whole board (a board not in MIG mode)

A process that uses a MIG device (CUDA_VISIBLE_DEVICES=MIG-...) has its slice's memory, which other slices'
processes do not compete for: readers charge a process's bytes to its instance (NVML's MIG handles, nvidia-smi's
MIG devices table and process list), and a slice's allocator leaves only what its own instance's processes hold.

Busy time is what utilization, power, temperature and clocks follow (native/nvml/model.c). Time is cut into slots
of SLOT_NS (CLOCK_MONOTONIC, which every process and container of a host shares); a device's ring holds the last
BUSY_SLOTS of them (4 s: the temperature's memory). The word for slot k sits at busy[device][k % BUSY_SLOTS] and
packs k (its low SLOT_BITS bits) with the microseconds of compute-bound and of memory-bound work in it
(US_BITS each): compute in bits 14-27, memory in bits 0-13. A word whose k is not the slot a reader asks about is
an old one, so a reader needs no history of its own and a stale entry never passes for a recent one; each word is
one 8-byte store, so a reader never sees half of one.

How busy time is told, with no kernel run. A writer reports each piece of work when it is handed to the device
(a launch, a copy), with the time the device needs for it where that is known: native mode's libcuda models a
GEMM from its FLOPs and a device copy from its bytes at the board's achieved rates (its profile's telemetry.*),
and gives any other kernel KERNEL_NS; fakecuda's ops take real time on the CPU, and report that span. Work queues
behind the work before it, as on a stream, at most BUSY_AHEAD_NS ahead of the wall clock (beyond that the device
is saturated and the surplus is dropped); a synchronisation takes back what is queued after it, since the program
went on as if the device had finished. Work reported less than BUSY_GAP_NS after the device's previous work
ended continues it, the gap counting as busy with that work's kind: a program that keeps launching keeps the GPU
fed, as its kernels would on a real one (the fake's launches are quicker than the real kernels they stand for).
A longer pause is idle time. Kinds: WORK_COMPUTE for what runs on the tensor cores (cuBLAS GEMMs, cuDNN
convolutions, matmuls and attention, fakecuda's matrix products, convolutions and attention), WORK_MEMORY for
everything else (copies, fills, elementwise kernels, reductions): a real H200 draws and heats very differently for
the two (tests/data/gpu/h200/telemetry.json).

The C writer (the CUDA shims) and reader (NVML) take these numbers from native/build/gen/fg_contract.h, which
tools/gen_contract.py writes from this module; fakecuda writes through StateFile below.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
import time

from fakegpu.devices import MAX_DEVICES

MAGIC = b"FGSTATE4"  # 4: a MIG instance per device (3: busy words carry time by kind; 2: a busy bit per slot)
# Also hook/fakegpu_hook/contract.py's CONTAINER_DIR (the hook may not import this package): gen_contract checks.
CONTAINER_DIR = "/run/fakegpu"
NAME_LEN = 64
OFF_PID = 8
OFF_TYPE = 12
OFF_NAME = 16
OFF_USED = OFF_NAME + NAME_LEN
OFF_BUSY = OFF_USED + 8 * MAX_DEVICES
BUSY_SLOTS = 256
SLOT_NS = 1_000_000_000 // 64  # 15.625 ms: NVML's windows (0.2 s utilization, 1 s power) are whole slots or near
SLOT_US = SLOT_NS // 1000
US_BITS = 14  # microseconds of one kind in one slot: at most SLOT_US = 15625 < 2**14
SLOT_BITS = 64 - 2 * US_BITS  # 36 bits of slot number: wraps after 34 years of uptime
WORK_COMPUTE = 0
WORK_MEMORY = 1
# Launches closer than this are back-to-back work: longer than the gaps of a CPU-bound PyTorch loop (tens of
# microseconds between launches), shorter than a sleep, a data-loading stall or a step's host-side pause.
BUSY_GAP_NS = 2_000_000
KERNEL_NS = 10_000  # a kernel of unknown size: the H200's smallest fills, adds and copies took 9-11 us (perf.json)
BUSY_AHEAD_NS = 100_000_000  # how far queued work may run ahead of the wall clock
OFF_INSTANCE = OFF_BUSY + 8 * BUSY_SLOTS * MAX_DEVICES
SIZE = OFF_INSTANCE + MAX_DEVICES
SUFFIX = ".proc"


_SLOT_MASK = (1 << SLOT_BITS) - 1
_US_MASK = (1 << US_BITS) - 1
_WORD = struct.Struct("Q")  # native order: one 8-byte store, so a reader never sees half a word


def busy_word(word: int, k: int) -> tuple[int, int]:
    """(compute us, memory us) a ring word holds for slot k: (0, 0) when it holds another slot."""
    if word >> (2 * US_BITS) != k & _SLOT_MASK:
        return 0, 0
    return (word >> US_BITS) & _US_MASK, word & _US_MASK


def add_busy(word: int, k: int, kind: int, us: int) -> int:
    """The word for slot k with `us` more microseconds of `kind` (a stale word starts from zero)."""
    compute, memory = busy_word(word, k)
    if kind == WORK_COMPUTE:
        compute = min(SLOT_US, compute + us)
    else:
        memory = min(SLOT_US, memory + us)
    return (k & _SLOT_MASK) << (2 * US_BITS) | compute << US_BITS | memory


class _Track:
    """A writer's memory of a device's last work (the process's own, not shared): when it ended, its kind, and the
    nanoseconds short of a whole microsecond per kind. fakecuda reports spans of time already spent, so nothing is
    ever queued ahead here (native mode's writer, common/fg_state.c, also queues and takes back)."""

    __slots__ = ("carry", "end", "kind")

    def __init__(self) -> None:
        self.end = -(1 << 62)
        self.kind = WORK_MEMORY
        self.carry = [0, 0]


def state_dir(environ: dict[str, str] | None = None) -> str:
    """The folder this process publishes to and reads from."""
    env = os.environ if environ is None else environ
    if env.get("FAKEGPU_STATE_DIR"):
        return env["FAKEGPU_STATE_DIR"]
    if os.path.isdir(CONTAINER_DIR):
        return CONTAINER_DIR
    return os.path.join(env.get("TMPDIR") or "/tmp", f"fakegpu-{os.getuid()}")


def process_name() -> str:
    """argv[0] as this process was started: what real NVML and nvidia-smi show for it ("python3" for
    `python3 train.py`, tests/data/gpu/h200/smi/holding_default.txt)."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            argv0 = f.read().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        argv0 = ""
    return clean_name(argv0 or sys.executable)


def clean_name(name: str) -> str:
    """A name that fits the field: tabs and newlines become spaces, cut to NAME_LEN - 1 bytes of UTF-8."""
    text = name.replace("\t", " ").replace("\n", " ").replace("\r", " ")
    return text.encode()[:NAME_LEN - 1].decode(errors="ignore")


class StateFile:
    """One process's entry, mapped. set() is a store into shared memory: readers see it at once."""

    def __init__(self, directory: str, pid: int, name: str, kind: str = "C") -> None:
        if kind not in ("C", "G"):
            raise ValueError(f"process type {kind!r}: expected 'C' (compute) or 'G' (graphics)")
        self.path = os.path.join(directory, f"{pid}{SUFFIX}")
        self._tracks: dict[int, _Track] = {}
        header = bytearray(OFF_USED)
        header[:len(MAGIC)] = MAGIC
        struct.pack_into("=I", header, OFF_PID, pid)
        header[OFF_TYPE] = ord(kind)
        encoded = clean_name(name).encode()
        header[OFF_NAME:OFF_NAME + len(encoded)] = encoded
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{pid}{SUFFIX}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.ftruncate(fd, SIZE)
            self._map = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            self._map[:OFF_USED] = bytes(header)
            os.replace(tmp, self.path)
        except BaseException:
            os.unlink(tmp)
            raise
        finally:
            os.close(fd)

    @property
    def mapping(self) -> mmap.mmap:
        """The file's mapping, for a writer of its busy rings in another language (fakecuda's busy_ring.cpp)."""
        return self._map

    def set(self, device: int, used_bytes: int) -> None:
        if not 0 <= device < MAX_DEVICES:
            raise ValueError(f"device index {device}: expected 0..{MAX_DEVICES - 1}")
        # Native format "Q" packs with one 8-byte memcpy straight into the mapping (the standard-size "=Q" writes
        # byte by byte), so a reader never sees half a counter.
        struct.pack_into("Q", self._map, OFF_USED + 8 * device, used_bytes)

    def set_instance(self, device: int, gpu_instance: int | None) -> None:
        """The MIG GPU instance (its ID) this process's memory on `device` is in; None: the whole board."""
        if not 0 <= device < MAX_DEVICES:
            raise ValueError(f"device index {device}: expected 0..{MAX_DEVICES - 1}")
        self._map[OFF_INSTANCE + device] = 0 if gpu_instance is None else gpu_instance + 1

    def busy(self, device: int, kind: int = WORK_MEMORY, start_ns: int | None = None,
             end_ns: int | None = None) -> None:
        """Work of `kind` ran on the device from start_ns to end_ns (CLOCK_MONOTONIC; both default to now: a moment's
        work, which counts KERNEL_NS). Its time, and the gap since the previous work when that is short, goes into
        the device's ring. fakecuda calls this at every op: the common case (back-to-back work of one kind within a
        slot) is one read and one write of the mapping."""
        if not 0 <= device < MAX_DEVICES:
            raise ValueError(f"device index {device}: expected 0..{MAX_DEVICES - 1}")
        t1 = time.monotonic_ns() if end_ns is None else end_ns
        t0 = t1 if start_ns is None or start_ns > t1 else start_ns
        track = self._tracks.get(device)
        if track is None:
            track = self._tracks[device] = _Track()
        end = track.end
        start = t0 if t0 > end else end
        stop = start + KERNEL_NS if t0 == t1 else t1
        if stop < t1:
            stop = t1
        if end < t0 < end + BUSY_GAP_NS:  # continues the previous work: the gap was busy with it
            if track.kind == kind:
                start = end
            else:
                self._accrue(device, track, track.kind, end, t0)
        if stop > start:
            self._accrue(device, track, kind, start, stop)
        if stop > end:
            track.end = stop
        track.kind = kind

    def _accrue(self, device: int, track: _Track, kind: int, a: int, b: int) -> None:
        """[a, b) was busy with `kind`: each slot it overlaps gets its share, in whole microseconds (the remainder
        carries to the next share, so many short intervals add up exactly)."""
        carry = track.carry
        k, last = a // SLOT_NS, (b - 1) // SLOT_NS
        if last - k >= BUSY_SLOTS:
            k = last - BUSY_SLOTS + 1
        base = OFF_BUSY + 8 * device * BUSY_SLOTS
        while k <= last:
            lo = k * SLOT_NS
            ns = (b if b < lo + SLOT_NS else lo + SLOT_NS) - (a if a > lo else lo) + carry[kind]
            us, carry[kind] = divmod(ns, 1000)
            if us:
                offset = base + 8 * (k % BUSY_SLOTS)
                (word,) = _WORD.unpack_from(self._map, offset)
                _WORD.pack_into(self._map, offset, add_busy(word, k, kind, us))
            k += 1

    def close(self, remove: bool = True) -> None:
        if remove:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        self._map.close()


def read_file(path: str) -> tuple[int, str, str, list[int]] | None:
    """(pid, type, name, used bytes per device) of one state file; None when it is not one."""
    try:
        with open(path, "rb") as f:
            data = f.read(SIZE)
    except OSError:
        return None
    if len(data) < SIZE or data[:len(MAGIC)] != MAGIC:
        return None
    (pid,) = struct.unpack_from("=I", data, OFF_PID)
    name = data[OFF_NAME:OFF_USED].split(b"\0", 1)[0].decode(errors="replace")
    used = list(struct.unpack_from(f"={MAX_DEVICES}Q", data, OFF_USED))
    return pid, chr(data[OFF_TYPE]), name, used


# A folder changed this recently may change again within its timestamp's granularity: scan it again next time.
SETTLE_NS = 20_000_000


class UsageReader:
    """What the other processes of a state folder hold on a board: their files mapped once, the folder rescanned
    when it changes (a process starts using a GPU, or goes) or every `ttl_s` (a killed process's file stays until a
    reader reaps it; this one only skips it), the counters loaded at every call. native/common/fg_state.c's
    reader is the same for the C libraries."""

    def __init__(self, directory: str, ttl_s: float = 0.05) -> None:
        self.dir = directory
        self.ttl_ns = int(ttl_s * 1e9)
        self._maps: list[tuple[int, mmap.mmap]] = []
        self._mtime_ns: int | None = None
        self._scanned_ns = 0

    def used(self, board: int, except_pid: int, gpu_instance: int | None = None) -> list[tuple[int, int]]:
        """(pid, bytes) of every live process but `except_pid` that holds memory on `board` (with `gpu_instance`:
        in that MIG instance only), by pid (NVML's order); empty without a folder."""
        if not 0 <= board < MAX_DEVICES:
            return []
        try:
            mtime = os.stat(self.dir).st_mtime_ns
        except OSError:
            self._drop()
            return []
        now = time.monotonic_ns()
        if mtime != self._mtime_ns or now - self._scanned_ns >= self.ttl_ns:
            self._scan(mtime, now)
        at = OFF_USED + 8 * board
        maps = [(pid, m) for pid, m in self._maps if pid != except_pid]
        if gpu_instance is not None:
            maps = [(pid, m) for pid, m in maps if m[OFF_INSTANCE + board] == gpu_instance + 1]
        found = ((pid, struct.unpack_from("=Q", m, at)[0]) for pid, m in maps)
        return [(pid, used) for pid, used in found if used]

    def close(self) -> None:
        self._drop()

    def _drop(self) -> None:
        for _, m in self._maps:
            m.close()
        self._maps = []

    def _scan(self, mtime: int, now: int) -> None:
        self._drop()
        self._mtime_ns, self._scanned_ns = mtime, now
        if time.time_ns() - mtime < SETTLE_NS:  # a second change in the same timestamp tick would go unseen
            self._scanned_ns = -self.ttl_ns
        try:
            names = os.listdir(self.dir)
        except OSError:
            return
        for name in names:
            stem = name[:-len(SUFFIX)] if name.endswith(SUFFIX) else ""
            if not stem.isdigit() or not _alive(int(stem)):
                continue
            try:
                fd = os.open(os.path.join(self.dir, name), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                if os.fstat(fd).st_size >= SIZE:
                    m = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ)
                    if m[:len(MAGIC)] == MAGIC:
                        self._maps.append((struct.unpack_from("=I", m, OFF_PID)[0], m))
                    else:
                        m.close()
            except (OSError, ValueError):
                pass
            finally:
                os.close(fd)
        self._maps.sort(key=lambda e: e[0])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True
