"""Model FLOPs and MFU in replay-trace (fakegpu/perf/trace_flops.py): on a trace written by hand with each source
of FLOPs a PyTorch trace has (a kernel's flops arg, the launching cpu_op's flops arg, a GEMM op's Input Dims, a
convolution's flops on the op around the launch) and what is not counted; and on real torch.profiler traces
recorded here on the CPU with with_flops=True and with record_shapes=True, against the FLOPs of the matmuls the
script does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.perf.trace_replay import analyse
from fakegpu.perf.trace_whatif import what_if
from fakegpu.profiles import load_catalog
from fakegpu.reports import validate
from tests.perf.kineto import GEMM, Trace

H100_BF16_DENSE = 989e12  # NVIDIA H100 SXM datasheet: 1,979 TFLOP/s bf16 with sparsity, half that dense
MM = 2 * 64 * 256 * 512
ADDMM, OWN, CONV = 1e9, 5e8, 2e9
STEP_US = 1000.0


def _hand_trace(tmp_path: Path) -> Path:
    t = Trace()
    for n in range(3):
        base = n * STEP_US
        t.step(n, base, STEP_US)
        ext = t._ext
        t.host("aten::mm", base + 10, 20, **{"External id": 9000 + 10 * n, "Input Dims": [[64, 256], [256, 512]],
                                              "Input type": ["c10::BFloat16", "c10::BFloat16"]})
        t.kernel(GEMM, base + 100, 50, launch=base + 15, **{"External id": 9000 + 10 * n})
        t.host("aten::addmm", base + 40, 20, **{"External id": 9001 + 10 * n, "flops": ADDMM,
                                                 "Input type": ["c10::BFloat16"] * 3})
        for k in range(2):  # one op, two kernels (split-K): its FLOPs count once
            t.kernel(GEMM, base + 160 + 60 * k, 50, launch=base + 45 + k, **{"External id": 9001 + 10 * n})
        t.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x64", base + 300, 40, launch=base + 70, flops=OWN)
        t.host("aten::conv2d", base + 80, 30, **{"External id": 9002 + 10 * n, "flops": CONV,
                                                  "Input type": ["c10::BFloat16"] * 2})
        t.host("aten::cudnn_convolution", base + 85, 20, **{"External id": 9003 + 10 * n})
        t.kernel("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", base + 400, 60,
                 launch=base + 90, **{"External id": 9003 + 10 * n})
        t.kernel(GEMM, base + 500, 30, launch=base + 120, **{"External id": 5 + ext})  # linked to nothing
        t.host("aten::mul", base + 130, 5, flops=1000)
    return t.write(tmp_path / "t.json")


def test_every_source_of_flops_and_what_is_not_counted(tmp_path: Path) -> None:
    report, _ = analyse([_hand_trace(tmp_path)])
    (row,) = report["ranks"]
    f = row["flops"]
    assert row["window"]["steps"] == 2
    assert f["sources"] == {"kernel args": {"ops": 2, "flops": 2 * OWN},
                            "cpu_op flops": {"ops": 4, "flops": 2 * (ADDMM + CONV)},
                            "cpu_op Input Dims": {"ops": 2, "flops": 2.0 * MM}}
    assert f["per_step"] == MM + ADDMM + OWN + CONV
    assert f["dtypes"] == {"bf16": 2 * (MM + ADDMM + OWN + CONV)} and f["dominant_dtype"] == "bf16"
    assert f["not_counted"]["gemm_kernels"] == 2 and f["not_counted"]["gemm_kernels_us"] == 60.0
    assert f["not_counted"]["non_matrix_ops"] == {"aten::mul": {"ops": 3, "flops": 3000.0}}
    assert f["step_basis"] == "ProfilerStep period" and f["step_us"] == pytest.approx(STEP_US)
    assert f["peak_tflops"] == pytest.approx(H100_BF16_DENSE / 1e12, rel=0.001)
    assert f["mfu_pct"] == pytest.approx(100 * f["per_step"] / (STEP_US * 1e-6 * H100_BF16_DENSE), rel=0.001)
    assert report["mfu"]["mfu_pct"] == pytest.approx(f["mfu_pct"])
    assert any("2 GEMM kernel(s) without FLOPs" in n for n in report["notes"])
    validate(report, "replay-trace")


def test_the_what_if_gives_mfu_at_the_predicted_step(tmp_path: Path) -> None:
    report, windows = analyse([_hand_trace(tmp_path)])
    a100 = load_catalog().get("a100")
    w = what_if(windows, a100)
    (row,) = w["ranks"]
    per_step = report["ranks"][0]["flops"]["per_step"]
    a100_bf16 = 312e12  # NVIDIA A100 datasheet, dense bf16
    assert row["mfu_pct"] == pytest.approx(100 * per_step / (row["predicted_step_us"] * 1e-6 * a100_bf16),
                                           rel=0.001)
    assert w["mfu"]["mfu_pct"] == pytest.approx(row["mfu_pct"])
    report["what_if"] = w
    validate(report, "replay-trace")


def test_a_board_the_catalog_does_not_know_leaves_mfu_unknown(tmp_path: Path) -> None:
    path = _hand_trace(tmp_path)
    path.write_text(path.read_text().replace("NVIDIA H100 80GB HBM3", "Imaginary GPU 9000"))
    report, _ = analyse([path])
    f = report["ranks"][0]["flops"]
    assert f["per_step"] == MM + ADDMM + OWN + CONV and f["mfu_pct"] is None and f["profile"] is None
    assert report["mfu"]["mfu_pct"] is None
    assert any("MFU unknown" in n and "--from-profile" in n for n in report["notes"])
    report_named, _ = analyse([path], from_profile="h100")
    assert report_named["ranks"][0]["flops"]["mfu_pct"] == pytest.approx(
        100 * f["per_step"] / (STEP_US * 1e-6 * H100_BF16_DENSE), rel=0.001)


RECORD = """
import json, sys, torch
from torch.profiler import ProfilerActivity, profile, schedule
flops, out = sys.argv[1] == "1", sys.argv[2]
a, b = torch.randn(64, 256), torch.randn(256, 512)
x, y = torch.randn(4, 32, 64), torch.randn(4, 64, 16)
bias = torch.randn(512)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=4, repeat=1),
             with_flops=flops, record_shapes=True, on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
    for _ in range(6):
        torch.mm(a, b)
        torch.bmm(x, y)
        torch.addmm(bias, a, b)
        a * 2.0
        prof.step()
# torch's own count (with_flops), per active step: the peer of the Input Dims formula
print(json.dumps(sum(e.flops for e in prof.events() if e.name in ("aten::mm", "aten::bmm", "aten::addmm")) / 4))
"""
PER_STEP = 2 * 64 * 256 * 512 * 2 + 2 * 4 * 32 * 64 * 16  # mm + addmm + bmm


@pytest.mark.torch
@pytest.mark.parametrize("with_flops", [True, False])
def test_a_real_cpu_trace_counts_its_matmuls(tmp_path: Path, with_flops: bool) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "cpu.json"
    done = subprocess.run([sys.executable, "-c", RECORD, str(int(with_flops)), str(out)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report, _ = analyse([out])
    (row,) = report["ranks"]
    f = row["flops"]
    assert row["window"]["steps"] == 3
    assert f["counted_from"] == "host ops in the steps (no GPU activity)"
    # torch 2.10-2.15 compute with_flops but leave it out of the chrome trace on the CPU: the shapes count then
    written = '"flops"' in out.read_text()
    source = "cpu_op flops" if written else "cpu_op Input Dims"
    assert f["sources"] == {source: {"ops": 9, "flops": 3.0 * PER_STEP}}
    assert f["per_step"] == PER_STEP and f["dominant_dtype"] == "fp32"
    if with_flops:
        assert json.loads(done.stdout.strip().splitlines()[-1]) == PER_STEP
    assert f["mfu_pct"] is None and f["step_us"] is None  # no GPU: no GPU step time to divide by
    validate(report, "replay-trace")
