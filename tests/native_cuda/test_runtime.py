"""libcudart through ctypes: devices, capacity-enforced memory, errors, driver entry points."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.cuda_overheads import cuda_context_bytes
from fakegpu.profiles import load_catalog

pytestmark = pytest.mark.native
PROBE = Path(__file__).with_name("cuda_probe.py")
PAGE = 2 << 20


def probe(env: dict[str, str], **extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(PROBE)], env={**env, **extra}, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_devices_memory_and_errors(cuda_env: dict[str, str]) -> None:
    a100 = load_catalog().get("a100-sxm4-80gb")
    total = a100.data["memory"]["cuda_total_bytes"]
    context = cuda_context_bytes((8, 0))  # the C model must agree with the Python one
    r = probe(cuda_env)
    assert (r["count_rc"], r["count"], r["set_rc"]) == (0, 2, 0)
    assert r["total"] == total
    assert r["free0"] == total - context
    assert r["malloc_rc"] == 0 and r["free1"] == r["free0"] - 2 * PAGE  # 3 MiB takes two 2 MiB pages
    assert r["oom_rc"] == 2 and r["oom_name"] == "cudaErrorMemoryAllocation"
    assert r["last_error"] == 2 and r["last_error_after"] == 0  # sticky until read
    assert r["free_rc"] == 0 and r["free2"] == r["free0"]
    assert r["sms"] == 108 and r["smem_optin"] == 166912
    assert r["runtime"] // 1000 == 13 and r["driver"] >= 13000
    assert r["entry_rc"] == 0 and r["entry_found"]
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
    assert "cudaGraphCreate is not supported" in proc.stderr


def test_no_devices_is_no_device(cuda_env: dict[str, str]) -> None:
    env = {k: v for k, v in cuda_env.items() if k != "FAKEGPU_DEVICE_TABLE"}
    env["FAKEGPU_DEVICES"] = "void"
    r = probe(env)
    assert (r["count_rc"], r["count"]) == (100, 0)  # cudaErrorNoDevice
