"""One schema'd report per process (native/cuda/report.schema.json), merged at exit from every library's part."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest

from tests.native_cuda.conftest import REPO, run_fakegpu

pytestmark = [pytest.mark.native, pytest.mark.torch]
SCHEMA = json.loads((REPO / "native" / "cuda" / "report.schema.json").read_text())
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
        jsonschema.validate(r, SCHEMA)
    return out


def test_training_step_report_validates(cuda_build, cuda_torch, tmp_path: Path) -> None:
    rep = tmp_path / "reports"
    proc = run_fakegpu(["--devices", "a100:2", "--report-dir", str(rep), "--", sys.executable, "-c", STEP])
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
    proc = run_fakegpu(["--memory", "accounting", "--report-dir", str(rep), "--", sys.executable, "-c", code])
    assert proc.returncode == 0, proc.stderr[-3000:]
    (r,) = reports(rep)
    assert r["memory_mode"] == "accounting"
    assert r["devices"][0]["peak_bytes"] == 20 << 20  # the caching allocator's 20 MiB segment for 4 MiB
