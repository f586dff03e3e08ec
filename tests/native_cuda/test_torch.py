"""Unmodified CUDA-built PyTorch under `fakegpu run` (native mode): devices, caching allocator, OOM, a step.

Each test runs twice (fixture torch_python): torch 2.15+cu132 on the CUDA 13 libraries and torch 2.10+cu128 on
the CUDA 12 ones."""

from __future__ import annotations

import json
import sys

import pytest

from fakegpu.profiles.workspace_profiles import cuda_context_bytes, non_pytorch_bytes
from tests.native_cuda.conftest import run_fakegpu
from tests.subprocess_torch import all_of, stdout_json, stdout_lines

pytestmark = [pytest.mark.native, pytest.mark.torch]

ACCEPT = """
import re, torch
p = torch.cuda.get_device_properties(0)
print("avail", torch.cuda.is_available(), torch.cuda.device_count())
print("props", p.name, p.total_memory, p.major, p.minor, p.multi_processor_count)
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
free, total = torch.cuda.mem_get_info()
print("mem", torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), free, total)
maps = open("/proc/self/maps").read()
print("nvidia", sorted(set(re.findall(r"nvidia/\\S*/lib/(libcu\\S*|libnccl\\S*)", maps))))
print("cuda", torch.version.cuda)
"""


def lines(out: str) -> dict[str, list[str]]:
    return {ln.split()[0]: ln.split()[1:] for ln in out.splitlines() if ln.strip()}


def test_acceptance_a100x2(cuda_build, torch_python) -> None:
    complete = stdout_lines("avail", "props", "mem", "nvidia", "cuda")
    proc = run_fakegpu(["--devices", "a100:2", "--", torch_python, "-c", ACCEPT], complete=complete)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = lines(proc.stdout)
    assert out["avail"] == ["True", "2"]
    assert out["props"] == ["NVIDIA", "A100-SXM4-80GB", "84986036224", "8", "0", "108"]
    allocated, reserved, free, total = map(int, out["mem"])
    assert allocated == 1 << 30 and reserved == 1 << 30
    assert total == 84986036224 and free == total - cuda_context_bytes((8, 0)) - reserved  # no kernel ran yet
    assert out["nvidia"] == ["[]"], "no NVIDIA CUDA library may be mapped"
    assert out["cuda"][0].split(".")[0] == ("13" if torch_python == sys.executable else "12")


def test_oom_past_capacity_and_fits_on_a100_not_t4(cuda_build, torch_python) -> None:
    code = """
import torch
try:
    torch.empty(20 << 30, dtype=torch.uint8, device="cuda")
    print("fits")
except torch.OutOfMemoryError:
    print("oom")
"""
    fits = run_fakegpu(["--devices", "a100", "--", torch_python, "-c", code], complete=stdout_lines("fits"))
    oom = run_fakegpu(["--devices", "t4", "--", torch_python, "-c", code], complete=stdout_lines("oom"))
    assert (fits.returncode, fits.stdout.strip()) == (0, "fits"), fits.stderr[-3000:]
    assert (oom.returncode, oom.stdout.strip()) == (0, "oom"), oom.stderr[-3000:]


def test_mlp_training_step_and_nvidia_smi(cuda_build, torch_python) -> None:
    code = """
import os, subprocess, torch
m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.AdamW(m.parameters())
x = torch.randn(64, 256, device="cuda"); y = torch.randint(0, 10, (64,), device="cuda")
loss = torch.nn.functional.cross_entropy(m(x), y); loss.backward(); opt.step(); torch.cuda.synchronize()
print("peak", torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved())
smi = os.path.join(os.environ["LD_LIBRARY_PATH"].split(":")[0], "..", "bin", "nvidia-smi")
import time; time.sleep(0.1)
print(subprocess.run([smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip())
"""
    # complete: the "peak" line and nvidia-smi's line
    complete = all_of(stdout_lines("peak"), lambda p: len(p.stdout.strip().splitlines()) == 2)
    proc = run_fakegpu(["--devices", "a100:2", "--", torch_python, "-c", code], complete=complete)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, smi = proc.stdout.strip().splitlines()[:2]
    peak, reserved = map(int, first.split()[1:])
    assert 0 < peak <= reserved
    pid, used = smi.split(", ")
    # the context as a process that launched kernels and ran cuBLAS holds it, and torch's reserve
    assert int(pid) > 0 and int(used.split()[0]) == (non_pytorch_bytes((8, 0)) + reserved) // (1 << 20)


def test_transformer_encoder_adamw_steps_run_to_the_end(cuda_build, torch_python) -> None:
    # Control flow only: kernels are not executed in native mode, so no value is checked, only that torch's
    # real code path (attention, layer norm, AdamW's fused/foreach paths) runs and its allocator accounts.
    code = """
import torch
layer = torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, batch_first=True)
model = torch.nn.Sequential(torch.nn.Embedding(1000, 128), torch.nn.TransformerEncoder(layer, num_layers=2),
                            torch.nn.Linear(128, 1000)).to("cuda")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
tokens = torch.randint(0, 1000, (8, 64), device="cuda")
for _ in range(2):
    logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 1000), tokens.reshape(-1))
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
params = sum(p.numel() * p.element_size() for p in model.parameters())
print("mem", params, torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated())
"""
    proc = run_fakegpu(["--devices", "a100", "--", torch_python, "-c", code], complete=stdout_lines("mem"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    params, allocated, peak = map(int, lines(proc.stdout)["mem"])
    # parameters plus AdamW's two moment buffers stay allocated after the step; the peak held activations too
    assert allocated >= 3 * params
    assert peak > allocated


def test_device_properties_come_from_the_profile_in_either_layout(cuda_build, torch_python) -> None:
    # torch 2.10 reads CUDA 12's cudaDeviceProp (clockRate, memoryClockRate are fields there; CUDA 13 removed
    # them and torch 2.15 asks the driver): every property must come out the same, from the profile.
    code = """
import json, torch
p = torch.cuda.get_device_properties(0)
print(json.dumps({k: str(getattr(p, k)) for k in dir(p) if not k.startswith("_") and k != "uuid"}))
"""
    proc = run_fakegpu(["--devices", "a100", "--", torch_python, "-c", code], complete=stdout_json())
    assert proc.returncode == 0, proc.stderr[-3000:]
    props = json.loads(proc.stdout)
    assert (props["clock_rate"], props["memory_clock_rate"]) == ("1410000", "1593000")  # kHz: 1410 / 1593 MHz
    assert (props["memory_bus_width"], props["L2_cache_size"]) == ("5120", "41943040")
    assert (props["shared_memory_per_block_optin"], props["regs_per_multiprocessor"]) == ("166912", "65536")
