"""Another process sees device memory the moment it is allocated, as on a real driver (issue 21, point 5).

A writer drives libcuda through ctypes; a long-running reader holds NVML (nvidia-ml-py) open across the
writer's whole life, so its cached view of the state folder is exercised: first use, an allocation, a free, and a
SIGKILL. Every read follows the writer's answer directly: no sleep anywhere but the bounded wait for the reaping
of a killed process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.native_cuda.conftest import REPO

GiB = 1 << 30
SMI = REPO / "native" / "build" / "bin" / "nvidia-smi"

WRITER = r"""
import ctypes, os, sys
cu = ctypes.CDLL(os.path.join(os.environ["FAKEGPU_LIB"], "libcuda.so.1"))
ptr, ctx = ctypes.c_uint64(), ctypes.c_void_p()
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "ctx":
        rc = cu.cuInit(0) or cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 1) or cu.cuCtxSetCurrent(ctx)
    elif cmd == "alloc":
        rc = cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 30))
    elif cmd == "free":
        rc = cu.cuMemFree_v2(ptr)
    print(cmd, rc, flush=True)
"""

READER = r"""
import sys, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(1)
for line in sys.stdin:
    pids = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
    print(pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used, ",".join(map(str, pids)), flush=True)
"""


class Peer:
    def __init__(self, code: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)

    def ask(self, line: str = "") -> str:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().rstrip("\n")
        assert answer, f"peer ended (exit {self.proc.poll()})"
        return answer

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture
def nvml_env(cuda_env: dict[str, str]) -> dict[str, str]:
    pytest.importorskip("pynvml")
    lib = cuda_env["FAKEGPU_LIB"]
    return {**cuda_env, "LD_LIBRARY_PATH": f"{lib}:{cuda_env.get('LD_LIBRARY_PATH', '')}".rstrip(":")}


def test_allocation_free_and_kill_show_in_another_process_at_once(nvml_env: dict[str, str]) -> None:
    reader, writer = Peer(READER, nvml_env), Peer(WRITER, nvml_env)
    try:
        idle_used, pids = reader.ask().split(" ")
        assert pids == ""                                   # the reader has scanned an empty folder
        assert writer.ask("ctx") == "ctx 0"
        ctx_used, pids = reader.ask().split(" ")            # a new process's first use: no stale cache
        assert pids == str(writer.proc.pid) and int(ctx_used) > int(idle_used)
        assert writer.ask("alloc") == "alloc 0"
        used, _ = reader.ask().split(" ")
        assert int(used) - int(ctx_used) == GiB             # right after cuMemAlloc returned
        smi = subprocess.run([str(SMI), "-i", "1", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, env=nvml_env, timeout=30)
        assert smi.returncode == 0, smi.stderr
        assert int(smi.stdout) == int(used) >> 20           # and to a fresh nvidia-smi, in MiB
        assert writer.ask("free") == "free 0"
        assert reader.ask().split(" ")[0] == ctx_used       # a fall shows at once too
        assert writer.ask("alloc") == "alloc 0"
        writer.proc.send_signal(signal.SIGKILL)
        writer.proc.wait(timeout=30)
        deadline = time.monotonic() + 1.0                   # the driver reaps a killed process within a second
        while (answer := reader.ask()) != f"{idle_used} " and time.monotonic() < deadline:
            time.sleep(0.01)
        assert answer == f"{idle_used} ", f"killed pid {writer.proc.pid} still shown: {answer}"
        apps = subprocess.run([str(SMI), "--query-compute-apps=pid", "--format=csv,noheader"], capture_output=True,
                              text=True, env=nvml_env, timeout=30)
        assert apps.returncode == 0 and str(writer.proc.pid) not in apps.stdout
        assert os.listdir(Path(nvml_env["FAKEGPU_STATE_DIR"])) == []   # its file was reaped
    finally:
        writer.stop()
        reader.stop()


def test_fork_child_does_not_write_its_parents_entry(nvml_env: dict[str, str]) -> None:
    """A forked child inherits the mapping; its own allocations must not land in the parent's file."""
    script = r"""
import ctypes, os, sys
cu = ctypes.CDLL(os.path.join(os.environ["FAKEGPU_LIB"], "libcuda.so.1"))
ptr, ctx = ctypes.c_uint64(), ctypes.c_void_p()
assert cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 1) == 0 and cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 30)) == 0
pid = os.fork()
if pid == 0:
    cu.cuMemFree_v2(ptr)              # the child's free is its own business
    cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 1); cu.cuCtxSetCurrent(ctx)
    cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(3 << 30))
    os.write(1, b"child\n")          # one write each: parent and child share the pipe
    sys.stdin.readline()
    os._exit(0)
os.write(1, f"parent {pid}\n".encode())
sys.stdin.readline()
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=nvml_env)
    reader = Peer(READER, nvml_env)
    child = 0
    try:
        assert proc.stdout and proc.stdin
        lines = sorted(proc.stdout.readline().strip() for _ in range(2))
        assert lines[0] == "child" and lines[1].startswith("parent "), (lines, proc.poll())
        child = int(lines[1].split()[1])
        smi = subprocess.run([str(SMI), "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, env=nvml_env, timeout=30)
        rows = dict(line.split(", ") for line in smi.stdout.splitlines())
        assert set(rows) == {str(proc.pid), str(child)}, smi.stdout
        context = int(rows[str(child)]) - 3 * 1024            # the child: its own context and 3 GiB
        assert int(rows[str(proc.pid)]) == context + 1024       # the parent still shows its 1 GiB
        assert reader.ask().split(" ")[1] == f"{min(proc.pid, child)},{max(proc.pid, child)}"
    finally:
        if child:
            os.kill(child, signal.SIGKILL)  # not our child to wait for: the parent's
        proc.kill()
        proc.wait(timeout=30)
        reader.stop()


SHARER = r"""
import ctypes, os, sys
cu = ctypes.CDLL(os.path.join(os.environ["FAKEGPU_LIB"], "libcuda.so.1"))
ctx, ptrs = ctypes.c_void_p(), []
assert cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0 and cu.cuCtxSetCurrent(ctx) == 0
for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    if cmd == "alloc":
        p = ctypes.c_uint64()
        rc = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(int(arg) << 30))
        if rc == 0:
            ptrs.append(p)
        print(rc, flush=True)
    elif cmd == "free":
        print(cu.cuMemFree_v2(ptrs.pop()), flush=True)
    elif cmd == "info":
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        assert cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
        print(free.value, total.value, flush=True)
"""
OUT_OF_MEMORY = "2"  # CUDA_ERROR_OUT_OF_MEMORY


def test_processes_on_one_gpu_share_its_memory(nvml_env: dict[str, str]) -> None:
    """One GPU's memory serves every process on it: what one holds (its context and allocations) is not free for
    another, whose cuMemGetInfo and allocations see it at once; a free, or the holder's death, gives it back."""
    b = Peer(SHARER, nvml_env)
    a = None
    try:
        alone, total = map(int, b.ask("info").split())
        assert alone < total                                # b's own context
        a = Peer(SHARER, nvml_env)
        a_free, _ = map(int, a.ask("info").split())         # a's context now exists too
        free0, _ = map(int, b.ask("info").split())
        assert a_free == free0 and 0 < alone - free0 < GiB  # each sees both contexts
        assert a.ask("alloc 60") == "0"
        free1, _ = map(int, b.ask("info").split())
        assert free0 - free1 == 60 * GiB                    # a's allocation, the moment it returned
        assert b.ask("alloc 30") == OUT_OF_MEMORY and b.ask("alloc 10") == "0"
        assert a.ask("alloc 20") == OUT_OF_MEMORY           # and a sees b's in turn
        assert a.ask("free") == "0" and b.ask("alloc 30") == "0"
        a.proc.send_signal(signal.SIGKILL)                  # a's context goes with it
        a.proc.wait(timeout=30)
        deadline = time.monotonic() + 3.0                   # given back at the state folder's next rescan (50 ms)
        while (free := int(b.ask("info").split()[0])) != alone - 40 * GiB and time.monotonic() < deadline:
            time.sleep(0.05)
        assert free == alone - 40 * GiB, (free, alone)
    finally:
        if a is not None:
            a.stop()
        b.stop()
