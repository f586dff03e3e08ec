"""CUDA graphs under native mode: torch.cuda.CUDAGraph captures a training step as recorded no-ops and replays it.

Launches into a capturing stream are recorded (the report's kernels.captured_launches), not executed; each
replay counts the captured kernels as launched (graphs.replayed_kernel_launches, and kernels.launches). Runs for
torch 2.15 (CUDA 13 libraries) and torch 2.10 (CUDA 12 libraries), fixture torch_python.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakegpu.profiles.workspace_profiles import non_pytorch_bytes
from tests.native_cuda.conftest import run_fakegpu
from tests.subprocess_torch import all_of, reports, stdout_lines

pytestmark = [pytest.mark.native, pytest.mark.torch]

STEP = """
import os, torch
m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).cuda()
opt = torch.optim.SGD(m.parameters(), lr=0.1)
x = torch.randn(16, 64, device="cuda"); y = torch.randn(16, 8, device="cuda")
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):  # warm-up on a side stream, as torch's docs ask before capture
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(m(x), y).backward(); opt.step()
torch.cuda.current_stream().wait_stream(s)
torch.cuda.synchronize()
# Host data reaches the device by real copies (kernels, randn's included, do not run in native mode).
x.copy_(torch.ones(16, 64).cuda())
out = torch.zeros(16, 64).cuda()
g = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=True)
with torch.cuda.graph(g):
    loss = torch.nn.functional.mse_loss(m(x), y); loss.backward(); opt.step()
    out.copy_(x)  # a device-to-device cudaMemcpyAsync: recorded, not done
print("capturing_after", torch.cuda.is_current_stream_capturing())
print("out_after_capture", out.cpu().sum().item())  # read back by a copy, summed on the host
fresh = torch.arange(16 * 64, dtype=torch.float32).reshape(16, 64).cuda()
for _ in range(int(os.environ["REPLAYS"])):
    x.copy_(fresh)  # a device-to-device copy, no kernel
    g.replay()
torch.cuda.synchronize()
print("out_after_replay", out.cpu().sum().item())
free, total = torch.cuda.mem_get_info()
print("mem", torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), free, total)
g.reset()
"""


def run_step(torch_python: str, rep: Path, replays: int) -> tuple[dict[str, list[str]], dict]:
    args = ["--devices", "a100", "--report-dir", str(rep), "--", "env", f"REPLAYS={replays}", torch_python, "-c", STEP]
    lines = stdout_lines("capturing_after", "out_after_capture", "out_after_replay", "mem")
    proc = run_fakegpu(args, complete=all_of(lines, reports(rep)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = {ln.split()[0]: ln.split()[1:] for ln in proc.stdout.splitlines() if ln.strip()}
    (report,) = [json.loads(f.read_text()) for f in rep.glob("fakegpu-native-*.json")]
    return out, report


def test_cuda_graph_capture_and_replay_are_recorded(cuda_build, torch_python, tmp_path: Path) -> None:
    out, report = run_step(torch_python, tmp_path / "three", 3)
    assert out["capturing_after"] == ["False"]
    # the captured copy did nothing at capture time and is done again at each replay, with the new input
    assert out["out_after_capture"] == ["0.0"] and out["out_after_replay"] == [str(float(sum(range(16 * 64))))]
    allocated, reserved, free, total = map(int, out["mem"])
    # the graph's private pool is part of torch's reserve, and the driver's account agrees with it
    assert 0 < allocated <= reserved and free == total - non_pytorch_bytes((8, 0)) - reserved
    graphs, kernels = report["graphs"], report["kernels"]
    assert graphs["captures"] == 1 and graphs["instantiated"] == 1 and graphs["launches"] == 3
    captured = kernels["captured_launches"]
    assert captured >= 5, "forward, backward and the optimizer step launch kernels"
    assert graphs["replayed_kernel_launches"] == 3 * captured
    assert graphs["replayed_copies"] >= 3
    assert report["unsupported"].get("cudart", {}) == {}

    # Without replays: the same warm-up, the same capture, none of the captured work counted as executed.
    control_out, control = run_step(torch_python, tmp_path / "none", 0)
    assert control["kernels"]["captured_launches"] == captured and control["graphs"]["launches"] == 0
    assert control_out["out_after_replay"] == ["0.0"]
    assert kernels["launches"] - control["kernels"]["launches"] == 3 * captured
    # GEMMs: two warm-up steps were executed; the captured step's GEMMs count once per replay (3 times)
    gemm, gemm0 = report["gemm"]["calls"], control["gemm"]["calls"]
    assert gemm0 > 0 and 2 * gemm == 5 * gemm0
