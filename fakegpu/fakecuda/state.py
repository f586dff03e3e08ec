"""Publishing this process's device memory to the shared state, so nvidia-smi and NVML list it.

The format and the folder are native/README.md's "Shared state" (the C writer is fg_state_publish): one
`<pid>.proc` file in $FAKEGPU_STATE_DIR, else /run/fakegpu when it exists, else $TMPDIR/fakegpu-<uid>; one line
per device in use, `proc<TAB>pid=..<TAB>device=..<TAB>used_bytes=..<TAB>type=C<TAB>name=..`; replaced
atomically (temp file in the folder, rename). used_bytes is what nvidia-smi shows for a torch process: the CUDA
context plus the caching allocator's segments (memory_reserved), not memory_allocated.

Usage changes only when a segment is created or released (or a context is created), not on every tensor; the
runtime calls notify() then. A rise is published at once, so a reader never sees less than the process holds at
its peak; falls are published at most every 50 ms (a timer catches the last one); the file goes at exit.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time

from fakegpu.fakecuda.runtime import Runtime

INTERVAL_S = 0.05
NAME_LEN = 63  # the C reader keeps 64 bytes with the terminator


def state_dir(environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    if env.get("FAKEGPU_STATE_DIR"):
        return env["FAKEGPU_STATE_DIR"]
    if os.path.isdir("/run/fakegpu"):
        return "/run/fakegpu"
    return os.path.join(env.get("TMPDIR") or "/tmp", f"fakegpu-{os.getuid()}")


def process_name() -> str:
    """The command line as nvidia-smi shows it for this process ("python3 train.py")."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        argv = [sys.executable, *sys.argv]
    if argv:
        argv[0] = os.path.basename(argv[0])
    name = " ".join(argv).replace("\t", " ").replace("\n", " ").replace("\r", " ")
    return name[:NAME_LEN]


class Publisher:
    def __init__(self, runtime: Runtime, directory: str | None = None) -> None:
        self.runtime = runtime
        self.dir = directory or state_dir()
        self.pid = os.getpid()
        self.path = os.path.join(self.dir, f"{self.pid}.proc")
        self.name = process_name()
        self.published: list[int] = []
        self.last = 0.0
        self.timer: threading.Timer | None = None
        self.lock = threading.Lock()
        self.closed = False
        atexit.register(self.close)

    def usage(self) -> list[int]:
        return [self.runtime.process_used_bytes(d.index) if d.initialized else 0 for d in self.runtime.devices]

    def notify(self) -> None:
        """Called by the runtime when a segment or a context came or went."""
        with self.lock:
            if self.closed:
                return
            used = self.usage()
            if used == self.published:
                return
            before = self.published + [0] * (len(used) - len(self.published))
            rise = any(u > p for u, p in zip(used, before, strict=True))
            wait = self.last + INTERVAL_S - time.monotonic()
            if rise or wait <= 0:
                self._write(used)
            elif self.timer is None:
                self.timer = threading.Timer(wait, self._flush)
                self.timer.daemon = True
                self.timer.start()

    def _flush(self) -> None:
        with self.lock:
            self.timer = None
            if not self.closed:
                self._write(self.usage())

    def _write(self, used: list[int]) -> None:
        self.published, self.last = used, time.monotonic()
        if not any(used):
            self._remove()
            return
        lines = "".join(f"proc\tpid={self.pid}\tdevice={i}\tused_bytes={u}\ttype=C\tname={self.name}\n"
                        for i, u in enumerate(used) if u)
        tmp = os.path.join(self.dir, f".{self.pid}.proc.tmp")
        try:
            os.makedirs(self.dir, exist_ok=True)
            with open(tmp, "w") as f:
                f.write(lines)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a read-only or missing state folder must not break the training run

    def _remove(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            if self.timer is not None:
                self.timer.cancel()
            self._remove()
        atexit.unregister(self.close)
