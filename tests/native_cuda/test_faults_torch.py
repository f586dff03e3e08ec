"""PyPI's CUDA torch on a run whose cuda:1 falls off the bus after 20 allocations (a fault plan): the next call
on it raises what PyTorch raises for a lost GPU, `CUDA error: unknown error` (the driver's CUDA_ERROR_UNKNOWN,
cudaErrorUnknown), while cuda:0 keeps working, and nvidia-smi reports the GPU lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.native_cuda.conftest import run_fakegpu
from tests.subprocess_torch import stdout_json

pytestmark = [pytest.mark.native, pytest.mark.torch]

PROBE = Path(__file__).resolve().parents[1] / "data" / "probes" / "lost_gpu.py"


@pytest.mark.parametrize("mode", ["native", "fakecuda"])
def test_gpu_lost_after_20_allocations(cuda_build, torch_python, mode: str) -> None:
    memory = ["--memory", "accounting"] if mode == "native" else []
    proc = run_fakegpu(["--devices", "a100:2", "--mode", mode, *memory, "--fault",
                        "xid=79,device=1,after_allocations=20", "--", torch_python, str(PROBE)],
                       complete=stdout_json())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for what in ("alloc", "op"):
        assert out[what] is not None, f"{what} on the lost GPU succeeded"
        name, is_runtime_error, message = out[what]
        assert is_runtime_error and message == "CUDA error: unknown error", out[what]
        assert name in ("AcceleratorError", "RuntimeError")  # AcceleratorError from torch 2.8 on
    if mode == "fakecuda":
        assert out["cuda0"] == 999000.0
    code, line = out["smi"]
    assert code == 15 and line.startswith("Unable to determine the device handle for GPU1: ")
