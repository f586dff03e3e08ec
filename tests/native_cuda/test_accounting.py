"""Accounting-only memory (FAKEGPU_MEMORY=accounting, `fakegpu run --memory accounting`): device memory is
reserved and counted, bytes written to it are not kept, so an 8B-parameter model loads in little host RAM."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.native_cuda.conftest import run_fakegpu
from tests.subprocess_torch import stdout_lines

pytestmark = [pytest.mark.native, pytest.mark.torch]
LOAD_8B = Path(__file__).with_name("scripts") / "load_8b.py"
READBACK = "import torch; print(*torch.tensor([1.0, 2.0], device='cuda').cpu().tolist())"


def out(proc) -> dict[str, list[str]]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {ln.split()[0]: ln.split()[1:] for ln in proc.stdout.splitlines() if ln.strip()}


def test_8b_bf16_model_loads_under_2_gb_rss(cuda_build, cuda_torch, tmp_path: Path) -> None:
    ckpt = tmp_path / "model.safetensors"
    args = ["--memory", "accounting", "--devices", "a100", "--", sys.executable, str(LOAD_8B), str(ckpt)]
    r = out(run_fakegpu(args, complete=stdout_lines("params", "allocated", "maxrss_kb", "readback")))
    params = int(r["params"][0])
    assert params > 8_000_000_000
    assert int(r["allocated"][0]) >= 2 * params  # every byte is on the (fake) device's account
    assert int(r["maxrss_kb"][0]) < 2 * 1024 * 1024, "peak RSS must stay under 2 GB"
    assert r["readback"] == ["0.0", "0.0"]  # values are not kept in this mode
    assert ckpt.stat().st_blocks * 512 < 1 << 20  # the checkpoint is sparse: nothing was written to disk


def test_full_mode_keeps_bytes_and_bad_mode_is_usage_error(cuda_build, cuda_torch) -> None:
    read = stdout_lines("1.0")
    assert out(run_fakegpu(["--", sys.executable, "-c", READBACK], complete=read))["1.0"] == ["2.0"]
    assert out(run_fakegpu(["--memory", "full", "--", sys.executable, "-c", READBACK], complete=read))["1.0"] == ["2.0"]
    bad = run_fakegpu(["--memory", "bogus", "--", "true"])
    assert bad.returncode == 2 and "unknown memory mode" in bad.stderr
