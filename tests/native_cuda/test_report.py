"""One schema'd report per process (fakegpu/reports: native-process), merged at exit from every library's part."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.reports import validate
from tests.native_cuda.conftest import run_fakegpu
from tests.subprocess_torch import reports as reports_written

pytestmark = [pytest.mark.native, pytest.mark.torch]
STEP = """
import torch
m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.AdamW(m.parameters())
x = torch.randn(64, 256, device="cuda"); y = torch.randint(0, 10, (64,), device="cuda")
torch.nn.functional.cross_entropy(m(x), y).backward(); opt.step(); torch.cuda.synchronize()
"""


def reports(folder: Path) -> list[dict]:
    files = sorted(folder.iterdir())
    assert all(f.name.startswith("fakegpu-native-") and f.suffix == ".json" for f in files), files
    out = [json.loads(f.read_text()) for f in files]
    for r in out:
        validate(r, "native-process")
    return out


def test_training_step_report_validates(cuda_build, cuda_torch, tmp_path: Path) -> None:
    rep = tmp_path / "reports"
    args = ["--devices", "a100:2", "--report-dir", str(rep), "--", sys.executable, "-c", STEP]
    proc = run_fakegpu(args, complete=reports_written(rep))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (r,) = reports(rep)  # one file for the process, no per-library files, no parts folder left
    assert (r["mode"], r["memory_mode"]) == ("native", "full")
    d0, d1 = r["devices"]
    assert d0["active"] and not d1["active"] and d0["allocations"] > 0 and 0 < d0["used_bytes"] <= d0["peak_bytes"]
    assert d0["capacity_bytes"] + d0["context_bytes"] == 84986036224
    assert r["kernels"]["launches"] > 0 and r["kernels"]["top"][0]["launches"] >= r["kernels"]["top"][-1]["launches"]
    # forward: 2 GEMMs; backward: 3 (the first layer's input needs no gradient)
    assert r["gemm"]["calls"] == 5
    assert r["gemm"]["flops"] == sum(v["flops"] for v in r["gemm"]["by_library"].values()) > 2 * 64 * 256 * 512


def test_accounting_mode_is_reported(cuda_build, cuda_torch, tmp_path: Path) -> None:
    rep = tmp_path / "reports"
    code = "import torch; torch.empty(1 << 20, device='cuda')"
    args = ["--memory", "accounting", "--report-dir", str(rep), "--", sys.executable, "-c", code]
    proc = run_fakegpu(args, complete=reports_written(rep))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (r,) = reports(rep)
    assert r["memory_mode"] == "accounting"
    assert r["devices"][0]["peak_bytes"] == 20 << 20  # the caching allocator's 20 MiB segment for 4 MiB


TWO_RUNTIMES = """
import ctypes, os
class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]
lib = os.environ["FAKEGPU_LIB"]
libc = ctypes.CDLL(None)
libc.strdup.restype = ctypes.c_void_p
stubs = []
for major, name, launches in ((12, b"kernel_of_cuda12", 3), (13, b"kernel_of_cuda13", 2)):
    rt = ctypes.CDLL(os.path.join(lib, f"libcudart.so.{major}"))
    rt.__cudaRegisterFatBinary.restype = ctypes.c_void_p
    handle = rt.__cudaRegisterFatBinary(None)
    stub = ctypes.create_string_buffer(1)  # the host stub's address is the key a program launches by
    kname = ctypes.c_void_p(libc.strdup(name))  # never freed: the report is written after Python's finalization
    stubs.append(stub)
    rt.__cudaRegisterFunction(ctypes.c_void_p(handle), stub, kname, kname, -1, None, None, None, None, None)
    for _ in range(launches):
        assert rt.cudaLaunchKernel(stub, dim3(1, 1, 1), dim3(32, 1, 1), None, ctypes.c_size_t(0), None) == 0
"""


def test_kernels_of_both_runtimes_are_merged(cuda_env: dict[str, str], tmp_path: Path) -> None:
    # torch 2.10 uses libcudart.so.12 while a library linked against .13 (our cuDNN) uses the other: one report.
    rep = tmp_path / "reports"
    env = {**cuda_env, "FAKEGPU_REPORT_DIR": str(rep)}
    proc = subprocess.run([sys.executable, "-c", TWO_RUNTIMES], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (r,) = reports(rep)
    k = r["kernels"]
    assert (k["registered"], k["launched_kernels"], k["launches"]) == (2, 2, 5)
    assert [(t["name"], t["launches"]) for t in k["top"]] == [("kernel_of_cuda12", 3), ("kernel_of_cuda13", 2)]
