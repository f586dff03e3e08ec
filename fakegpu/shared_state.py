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
    592 busy      u64[64][BUSY_SLOTS] per device, the recent time slots in which this process kept it busy

Busy time is what utilization, power, temperature and clocks follow (native/nvml/model.c): the second before a
query is cut into BUSY_SLOTS slots of SLOT_NS (CLOCK_MONOTONIC, which every process and container of a host
shares), and a process that launches a kernel or copies in slot k stores k into busy[device][k % BUSY_SLOTS].
Slot k was busy when some process's ring holds k there, so a reader needs no history of its own and a stale
entry can never pass for a recent one.

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

MAGIC = b"FGSTATE2"
# Also hook/fakegpu_hook/contract.py's CONTAINER_DIR (the hook may not import this package): gen_contract checks.
CONTAINER_DIR = "/run/fakegpu"
NAME_LEN = 64
OFF_PID = 8
OFF_TYPE = 12
OFF_NAME = 16
OFF_USED = OFF_NAME + NAME_LEN
OFF_BUSY = OFF_USED + 8 * MAX_DEVICES
BUSY_SLOTS = 64
SLOT_NS = 1_000_000_000 // BUSY_SLOTS  # 15.625 ms: the window is the last second, as NVML's sample period
SIZE = OFF_BUSY + 8 * BUSY_SLOTS * MAX_DEVICES
SUFFIX = ".proc"


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

    def set(self, device: int, used_bytes: int) -> None:
        if not 0 <= device < MAX_DEVICES:
            raise ValueError(f"device index {device}: expected 0..{MAX_DEVICES - 1}")
        # Native format "Q" packs with one 8-byte memcpy straight into the mapping (the standard-size "=Q" writes
        # byte by byte), so a reader never sees half a counter.
        struct.pack_into("Q", self._map, OFF_USED + 8 * device, used_bytes)

    def mark_busy(self, device: int, now_ns: int | None = None) -> None:
        """The device is busy now (a kernel or a copy of this process): one store into the device's ring."""
        k = (time.monotonic_ns() if now_ns is None else now_ns) // SLOT_NS
        struct.pack_into("Q", self._map, OFF_BUSY + 8 * (device * BUSY_SLOTS + k % BUSY_SLOTS), k)

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
