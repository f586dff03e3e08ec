"""libcudart through ctypes: devices, capacity-enforced memory, errors, driver entry points."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.profiles import load_catalog
from fakegpu.profiles.workspace_profiles import cuda_context_bytes

pytestmark = pytest.mark.native
PROBE = Path(__file__).with_name("cuda_probe.py")
PAGE = 2 << 20


def probe(env: dict[str, str], **extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(PROBE)], env={**env, **extra}, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("major", [13, 12])
def test_devices_memory_and_errors(cuda_env: dict[str, str], major: int) -> None:
    a100 = load_catalog().get("a100-sxm4-80gb")
    total = a100.data["memory"]["cuda_total_bytes"]
    context = cuda_context_bytes((8, 0))  # the C model must agree with the Python one
    r = probe(cuda_env, PROBE_CUDART=f"libcudart.so.{major}")
    assert (r["count_rc"], r["count"], r["set_rc"]) == (0, 2, 0)
    assert r["total"] == total
    assert r["free0"] == total - context
    assert r["malloc_rc"] == 0 and r["free1"] == r["free0"] - 2 * PAGE  # 3 MiB takes two 2 MiB pages
    assert r["oom_rc"] == 2 and r["oom_name"] == "cudaErrorMemoryAllocation"
    assert r["last_error"] == 2 and r["last_error_after"] == 0  # sticky until read
    assert r["free_rc"] == 0 and r["free2"] == r["free0"]
    assert r["sms"] == 108 and r["smem_optin"] == 166912
    assert r["runtime"] // 1000 == major and r["driver"] >= 13000  # 12.8 for libcudart.so.12
    assert r["entry_rc"] == 0 and r["entry_found"]
    assert r["graph_rc"] == 0
    assert r["unsupported_rc"] == 801  # cudaErrorNotSupported


def test_unsupported_policy_error_aborts(cuda_env: dict[str, str]) -> None:
    proc = subprocess.run(
        [sys.executable, str(PROBE)],
        env={**cuda_env, "FAKEGPU_UNSUPPORTED_API": "error"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "cudaGraphClone is not supported" in proc.stderr


def test_no_devices_is_no_device(cuda_env: dict[str, str]) -> None:
    env = {k: v for k, v in cuda_env.items() if k != "FAKEGPU_DEVICE_TABLE"}
    env["FAKEGPU_DEVICES"] = "void"
    r = probe(env)
    assert (r["count_rc"], r["count"]) == (100, 0)  # cudaErrorNoDevice


def test_proc_address_follows_the_callers_cuda_version(cuda_env: dict[str, str]) -> None:
    # cuda.h renames differ by CUDA major: 12.x callers get the _v2 capture query (no edge data), 13.x the _v3.
    code = """
import ctypes, os
lib = ctypes.CDLL(os.path.join(os.environ["FAKEGPU_LIB"], "libcuda.so.1"))
def resolve(name, version):
    fn = ctypes.c_void_p()
    rc = lib.cuGetProcAddress_v2(name.encode(), ctypes.byref(fn), version, ctypes.c_uint64(0), None)
    return rc, fn.value
addr = lambda n: ctypes.cast(getattr(lib, n), ctypes.c_void_p).value
print(resolve("cuStreamGetCaptureInfo", 12080) == (0, addr("cuStreamGetCaptureInfo_v2")),
      resolve("cuStreamGetCaptureInfo", 13000) == (0, addr("cuStreamGetCaptureInfo_v3")),
      resolve("cuMemAlloc", 12080) == (0, addr("cuMemAlloc_v2")))
"""
    proc = subprocess.run([sys.executable, "-c", code], env=cuda_env, capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["True", "True", "True"], proc.stderr
