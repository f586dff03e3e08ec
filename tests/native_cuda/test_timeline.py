"""`fakegpu run --timeline`: a small transformer's training steps, run by PyPI's CUDA torch on FakeGPU's libraries,
written as a Kineto trace of an H100's predicted timeline, and read by the peers nobody here wrote.

- HolisticTraceAnalysis (tests/perf/hta_peer.py, in a process of its own) loads the trace and runs its temporal
  breakdown and communication/computation overlap; replay-trace agrees with it within 1 percentage point.
- Each GEMM lasts what the roofline prices for the shape and dtype libcublas recorded (the log is read on its own
  here, not through the trace's args); the shapes are the ones PyTorch's layers give cuBLAS.
- Launches and GPU work are linked by correlation ids; ProfilerStep annotations mark the steps.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.perf import timeline_log as tl
from fakegpu.perf.ops import Gemm
from fakegpu.perf.roofline import Board, estimate_op
from fakegpu.perf.trace_replay import analyse
from fakegpu.profiles import load_catalog
from fakegpu.profiles.efficiency import load
from tests.native_cuda.conftest import run_fakegpu

pytestmark = [pytest.mark.native, pytest.mark.torch]
REPO = Path(__file__).resolve().parents[2]
D_MODEL, TOKENS = 64, 8 * 32
STEP = f"""
import torch
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(d_model={D_MODEL}, nhead=4, dim_feedforward=128, batch_first=True,
                                         dropout=0.0)
model = torch.nn.TransformerEncoder(layer, num_layers=2).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 32, {D_MODEL}, device="cuda")

def step():
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()

step()  # warm-up, before the first synchronize: not a step of the trace
torch.cuda.synchronize()
for _ in range(3):
    step()
    torch.cuda.synchronize()
print("done")
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory, cuda_build, cuda_torch) -> dict:
    root = tmp_path_factory.mktemp("timeline")
    trace, reports = root / "traces" / "step.json", root / "reports"
    proc = run_fakegpu(["--devices", "h100:1", "--report-dir", str(reports), "--timeline", str(trace), "--",
                        sys.executable, "-c", STEP])
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr[-3000:]
    (log,) = tl.logs_in(reports / "timeline")
    return {"trace": trace, "doc": json.loads(trace.read_text()), "log": log, "stderr": proc.stderr}


def test_hta_loads_and_analyses_the_trace(run) -> None:
    done = subprocess.run([sys.executable, "-m", "tests.perf.hta_peer", str(run["trace"].parent)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    peer = json.loads(done.stdout.strip().splitlines()[-1])["0"]
    assert peer["compute_pct"] > 0 and peer["span_us"] > 0
    report, _ = analyse([run["trace"]], round_us=True)
    (ours,) = report["ranks"]
    for key in ("compute_pct", "non_compute_pct", "idle_pct"):
        assert abs(ours[key] - peer[key]) <= 1.0, (key, ours[key], peer[key])
    assert ours["window"]["steps"] == 2  # three ProfilerSteps, the last cut off as the profiler's stop cuts it
    assert {"gemm", "elementwise"} <= set(ours["classes"])


def test_gemms_last_what_the_roofline_prices(run) -> None:
    records = run["log"].records
    gemms = [r for r in records if r.kind == tl.GEMM]
    shapes = {(r.a & 0xFFFFFFFF, r.a >> 32, r.b & 0xFFFFFFFF) for r in gemms}
    # the attention's input projection as PyTorch hands it to cuBLAS (column-major): 3 x d_model by the tokens
    assert (3 * D_MODEL, TOKENS, D_MODEL) in shapes, shapes
    first = next(r for r in gemms if (r.a & 0xFFFFFFFF, r.a >> 32, r.b & 0xFFFFFFFF) == (3 * D_MODEL, TOKENS,
                                                                                           D_MODEL))
    assert first.d & 0xFFFF == 0  # CUDA_R_32F: fp32 data, and torch leaves TF32 off for matmuls by default
    board = Board.of(load_catalog().get("h100"))
    op = Gemm(name="in_proj", dtype="fp32", m=3 * D_MODEL, n=TOKENS, k=D_MODEL)
    price_us = estimate_op(op, board, load())["device_seconds"]["expected"] * 1e6
    kernels = [e for e in run["doc"]["traceEvents"] if e.get("cat") == "kernel" and e["name"] == first.name
               and (e["args"].get("m"), e["args"].get("n"), e["args"].get("k")) == (3 * D_MODEL, TOKENS, D_MODEL)]
    assert kernels
    for k in kernels:
        assert k["dur"] == pytest.approx(price_us, abs=1e-3)
        assert "estimated" not in k["args"]


def test_launches_link_to_work_and_unknown_kernels_are_flagged(run) -> None:
    events = run["doc"]["traceEvents"]
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"
                and "correlation" in e["args"]}
    work = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert work and all(e["args"]["correlation"] in launches for e in work)
    for e in work:  # the GPU never starts a piece before its launch
        assert e["ts"] >= launches[e["args"]["correlation"]]["ts"]
    by_stream: dict[int, list[dict]] = {}
    for e in work:
        by_stream.setdefault(e["tid"], []).append(e)
    for track in by_stream.values():  # a stream runs one piece at a time
        track.sort(key=lambda e: e["ts"])
        assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-3 for a, b in itertools.pairwise(track))
    elementwise = [e for e in work if "elementwise_kernel" in e["name"]]
    assert elementwise and all(e["args"]["estimated"] is True for e in elementwise)
    steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
    assert len(steps) == 3
    assert "predicted step" in run["stderr"]
