"""In a container, memory shows the moment it is allocated (issue 21, point 5): a process started by
`docker exec` allocates 1 GiB through libcuda, and an nvidia-smi exec'd right after cuMemAlloc returned shows it;
SIGKILLed, the process is gone from --query-compute-apps within a second."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.container.conftest import BASE_IMAGE, LABEL, RUNTIME, docker
from tests.container.test_acceptance_docker import need_native

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("fakegpu_runtime")]

WRITER = r"""
import ctypes, sys
cu = ctypes.CDLL("libcuda.so.1")
ptr, ctx = ctypes.c_uint64(), ctypes.c_void_p()
assert cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0 and cu.cuCtxSetCurrent(ctx) == 0
print("ctx", flush=True)
sys.stdin.readline()
print("alloc", cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 30)), flush=True)
sys.stdin.readline()
"""


def smi(container: str, *args: str) -> str:
    out = docker("exec", container, "nvidia-smi", *args, check=True)
    return out.stdout.strip()


def test_allocation_and_kill_show_in_a_container_at_once() -> None:
    need_native()
    started = docker("run", "-d", "--rm", "--label", LABEL, f"--runtime={RUNTIME}", "-e", "FAKEGPU_DEVICES=a100:1",
                     BASE_IMAGE, "sleep", "300", check=True)
    container = started.stdout.strip()
    writer = subprocess.Popen(["docker", "exec", "-i", container, "python3", "-c", WRITER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout and writer.stdin
        assert writer.stdout.readline().strip() == "ctx"
        query = ("--query-gpu=memory.used", "--format=csv,noheader,nounits")
        before = int(smi(container, *query))
        pid = smi(container, "--query-compute-apps=pid", "--format=csv,noheader")
        assert pid.isdigit(), pid                                  # the context alone lists the process
        writer.stdin.write("\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "alloc 0"
        assert int(smi(container, *query)) - before == 1024        # right after cuMemAlloc returned
        docker("exec", container, "sh", "-c", f"kill -9 {pid}", check=True)
        deadline = time.monotonic() + 1.0
        while (apps := smi(container, "--query-compute-apps=pid", "--format=csv,noheader")) and \
                time.monotonic() < deadline:
            pass
        assert apps == "", f"killed pid {pid} still listed"
    finally:
        writer.kill()
        writer.wait(timeout=30)
        docker("rm", "-f", container)
