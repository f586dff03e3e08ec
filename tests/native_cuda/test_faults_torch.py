"""PyPI's CUDA torch on a run whose cuda:1 falls off the bus after 20 allocations (a fault plan): the next call
on it raises what PyTorch raises for a lost GPU, `CUDA error: unknown error` (the driver's CUDA_ERROR_UNKNOWN,
cudaErrorUnknown), while cuda:0 keeps working, and nvidia-smi reports the GPU lost."""

from __future__ import annotations

import json
import sys
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


PRESSURE = """
import json, torch
free0 = torch.cuda.mem_get_info(0)[0]
held = [torch.empty(1 << 30, dtype=torch.uint8, device="cuda:0") for _ in range(3)]  # the 3rd allocation fires it
free1 = torch.cuda.mem_get_info(0)[0]
try:
    torch.empty(20 << 30, dtype=torch.uint8, device="cuda:0")
    oom = None
except torch.OutOfMemoryError as e:
    oom = str(e).splitlines()[0]
print(json.dumps({"free0": free0, "taken": free0 - free1, "oom": oom, "cuda1": torch.cuda.mem_get_info(1)[0]}))
"""


@pytest.mark.parametrize("mode", ["native", "fakecuda"])
def test_memory_pressure_after_3_allocations_leaves_pytorch_short(cuda_build, torch_python, mode: str,
                                                                   tmp_path: Path) -> None:
    """`memory_pressure: 60GiB` on cuda:0 once the run's third cudaMalloc there: PyTorch sees the memory go
    (mem_get_info) and a 20 GiB tensor no longer fits, with PyTorch's own message; cuda:1 is untouched."""
    script = tmp_path / "pressure.py"
    script.write_text(PRESSURE)
    memory = ["--memory", "accounting"] if mode == "native" else []
    proc = run_fakegpu(["--devices", "a100:2", "--mode", mode, *memory, "--fault",
                        "memory_pressure=60GiB,device=0,after_allocations=3", "--", torch_python, str(script)],
                       complete=stdout_json())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # the three 1 GiB segments (and the context's first growth) and the 60 GiB held outside the run
    assert 63 << 30 <= out["taken"] < 64 << 30, out
    assert out["oom"] is not None and out["oom"].startswith("CUDA out of memory. Tried to allocate 20.00 GiB. "
                                                            "GPU 0 has a total capacity of "), out
    assert "Process " not in out["oom"]  # nothing in the run's process lists holds it
    assert out["cuda1"] == out["free0"]  # a fresh context on cuda:1, as cuda:0's was


TRAIN = """
import torch
m = torch.nn.Linear(8, 8).cuda(1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range(1, 7):
    try:
        m(torch.randn(4, 8, device="cuda:1")).sum().backward()
        opt.step()
        opt.zero_grad()
    except RuntimeError as exc:
        print("step", step, str(exc).splitlines()[0], flush=True)
        break
    print("step", step, "ok", flush=True)
print("cuda0", torch.ones(2, device="cuda:0").sum().item())
"""


def test_gpu_lost_after_3_training_steps_under_fakecuda(cuda_build, tmp_path: Path) -> None:
    """`after_steps: 3`: fakecuda sees torch.optim's steps, so cuda:1 is lost from the end of the third on."""
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    proc = run_fakegpu(["--devices", "a100:2", "--mode", "fakecuda", "--fault", "xid=79,device=1,after_steps=3",
                        "--", sys.executable, str(script)], complete=lambda p: "cuda0" in p.stdout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == ["step 1 ok", "step 2 ok", "step 3 ok", "step 4 CUDA error: unknown error",
                                        "cuda0 2.0"], proc.stdout
