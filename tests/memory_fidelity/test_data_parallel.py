"""nn.DataParallel across two fake devices: fakecuda's memory (comm.py) against native mode's, where PyTorch's own
C++ broadcast, scatter, gather and single-process NCCL run on simulated device memory. Static shapes, so each
device's allocated, peak allocated and reserved bytes must agree exactly at every checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.memory_fidelity.harness import REPO

pytestmark = [pytest.mark.torch, pytest.mark.native]

SCRIPT = r"""
import json, torch, torch.nn as nn
marks = {}
def mark(name):
    marks[name] = [[torch.cuda.memory_allocated(i), torch.cuda.max_memory_allocated(i), torch.cuda.memory_reserved(i)]
                   for i in range(torch.cuda.device_count())]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.BatchNorm1d(512), nn.ReLU(), nn.Linear(512, 128)).cuda()
dp = nn.DataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
mark("setup")
inside = {}
def probe(module, args, out):
    inside.setdefault(out.device.index, torch.cuda.memory_allocated(out.device.index))
model[0].register_forward_hook(probe)
for step in range(2):
    # scattered from the host (on background streams), then from cuda:0
    x = torch.randn(64, 256) if step == 0 else torch.randn(64, 256, device="cuda")
    y = dp(x)
    mark(f"forward{step}")
    y.pow(2).mean().backward()
    mark(f"backward{step}")
    opt.step()
    opt.zero_grad()
    mark(f"step{step}")
marks["inside_first_forward"] = [inside[i] for i in sorted(inside)]
print("MARKS " + json.dumps(marks))
"""


def _run(mode: str, python: str) -> dict:
    sys.path.insert(0, str(REPO))
    from fakegpu.launcher import prepare

    launch = prepare("a100:2", mode, memory="accounting" if mode == "native" else None)
    try:
        env = {**launch.env, "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [launch.env.get("PYTHONPATH"), str(REPO)]))}
        proc = subprocess.run([python, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600,
                              cwd=REPO)
    finally:
        launch.cleanup()
    found = [line for line in proc.stdout.splitlines() if line.startswith("MARKS ")]
    assert proc.returncode == 0 and found, f"{mode} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return json.loads(found[0][len("MARKS "):])


def test_data_parallel_memory_matches_native_mode_per_device_and_checkpoint(cuda_torch, cuda_build):
    native, fake = _run("native", sys.executable), _run("fakecuda", sys.executable)
    assert list(fake) == list(native)
    assert native["forward0"][1][1] > 0  # the replica on cuda:1 took memory: the comparison is not of zeros
    for name in native:
        assert fake[name] == native[name], name
