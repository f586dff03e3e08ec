"""fakecuda's memory model held to a real H200 (torch 2.11.0+cu130, cuDNN 9.19): tests/data/gpu/h200/mem_workloads.json
and mem_opdb.json are tests/memory_fidelity/probe.py run on the GPU; here the same probe runs under
`fakegpu run --devices h200 --mode fakecuda` with the same torch (.venv-torch211), and the harness compares the two
(tests/memory_fidelity/harness.py: per checkpoint, allocated and the peaks within 2%; event by event where stated).

Exceptions are listed with their reasons, and each is checked to still be one (a strict xfail), so the list stays
exact.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.memory_fidelity import harness
from tests.real_gpu.conftest import REPO, real, under_fake

pytestmark = [pytest.mark.torch, pytest.mark.slow]

PROBE = str(REPO / "tests" / "memory_fidelity" / "probe.py")
CAPTURE = real("mem_workloads.json")
WORKLOADS = list(CAPTURE["cases"])

# Workloads off by more than the harness's 2%, and why.
OFF = {
    # cuDNN's convolution workspaces are not modeled: on the H200 the forward takes the input plus the weight plus
    # 512 bytes, the data gradient the output's and input's gradients plus the weight plus 512, the weight
    # gradient more than its operands (9602048 bytes here, 14722048 in cnn_step) by an amount two samples do not
    # explain; conv1d_layernorm's backward peak is that weight-gradient workspace (-12.8%)
    "conv1d_layernorm": "cuDNN convolution workspaces are not modeled",
}
# Workloads whose allocator events (action, bytes, segment and offset) differ from the H200's, and why.
OTHER_SEQUENCE = {
    # the same allocations and frees in the same order; a segment lies elsewhere: the driver put a later segment
    # below an earlier one of the same size, which fakecuda's address space (lowest free range first) does not
    "transformer_encoder": "placement",
    "embedding_cross_entropy_large_vocab": "placement",
    # the same allocations; placement as above, and after attention's backward the H200 frees key before query
    "gpt2_causal_lm": "placement and free order",
    # the same allocations; autocast's cast cache is a hash map keyed by address: its exit frees in no fixed order
    "amp_autocast_gradscaler": "free order",
    # cuDNN's convolution workspaces (see OFF)
    "cnn_step": "cuDNN workspaces",
    "conv1d_layernorm": "cuDNN workspaces",
}


@pytest.fixture(scope="module")
def fake_workloads(torch211, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("fakecuda") / "workloads.json"
    proc = under_fake([torch211, PROBE, "workloads", "--trace", "--out", str(out)], mode="fakecuda", timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def compared(fake_workloads) -> dict:
    return harness.compare(CAPTURE, fake_workloads)


def _diffs(row: dict) -> str:
    return "\n".join(f"{point} {metric}: H200 {n} fakecuda {f}" for point, metrics in row["points"].items()
                     for metric, (n, f) in metrics.items() if n != f)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=OFF[n])) if n in OFF
                                  else n for n in WORKLOADS])
def test_workload_within_tolerance_of_the_h200(compared, name):
    row = compared[name]
    assert row["status"] == "scored", row
    assert abs(row["worst_error"]) <= harness.TOLERANCE, f"{name}: worst {row['worst_error']:+.2%}\n{_diffs(row)}"


def _events(fake: dict, name: str) -> tuple[list, list]:
    return CAPTURE["cases"][name]["trace"], fake["cases"][name]["trace"]


@pytest.mark.parametrize("name", [n for n in WORKLOADS if n not in OTHER_SEQUENCE])
def test_allocation_sequence_equals_the_h200(fake_workloads, name):
    gpu, fake = _events(fake_workloads, name)
    assert gpu, f"{name}: no trace in the capture"
    assert harness.sequence(gpu) == harness.sequence(fake), f"{name}:\n{harness.diverge(gpu, fake)}"


@pytest.mark.parametrize("name", sorted(OTHER_SEQUENCE))
def test_listed_sequences_differ_only_as_stated(fake_workloads, name):
    gpu, fake = _events(fake_workloads, name)
    assert harness.sequence(gpu) != harness.sequence(fake), f"{name} now equals the H200's: drop it from the list"
    sizes = [[(e[0], e[1]) for e in events] for events in (gpu, fake)]
    why = OTHER_SEQUENCE[name]
    if why == "placement":
        assert sizes[0] == sizes[1], f"{name}:\n{harness.diverge(gpu, fake)}"
    elif why in ("free order", "placement and free order"):
        assert Counter(sizes[0]) == Counter(sizes[1])
        allocations = [[s for s in seq if s[0] == "alloc"] for seq in sizes]
        assert allocations[0] == allocations[1], f"{name}:\n{harness.diverge(gpu, fake)}"


# A slice of the op database from the capture's first run (it ran in two processes, the second from float_power
# on: a fresh process has no cuBLAS workspaces yet, so a run of ops here compares only with ops of one run). addmm
# comes first among the products, as in the capture, so the two cuBLAS workspaces (main and autograd thread) are
# made by the same sample on both sides, and nn.functional.linear makes cuBLASLt's before the ops that follow it.
OPS = ("abs,add,mul,addmm,addmv,baddbmm,bmm,cdist,cholesky,cholesky_inverse,cov,cross,cumsum,diff,"
       "div.no_rounding_mode,exp,flip,isin,kthvalue,lu,masked_select,matmul,median,quantile,var_mean,softmax,"
       "nn.functional.cross_entropy,nn.functional.normalize,native_layer_norm,native_batch_norm,"
       "nn.functional.adaptive_avg_pool2d,nn.functional.relu,nn.functional.conv_transpose3d,nn.functional.conv2d,"
       "nn.functional.group_norm,nn.functional.layer_norm,nn.functional.rms_norm,nn.functional.pad.reflect,"
       "nn.functional.hardswish,nn.functional.unfold,nn.functional.interpolate.bilinear,nn.functional.avg_pool2d,"
       "nn.functional.fractional_max_pool2d,nn.functional.max_pool2d,max_pool2d_with_indices_backward,"
       "nn.functional.linear,nn.functional.glu,nn.functional.prelu,nn.functional.scaled_dot_product_attention,"
       "nn.functional.silu,to,topk,nn.functional.batch_norm,nn.functional.binary_cross_entropy,nn.functional.gelu,"
       "mm,mode,outer,pow,tensor_split")
# Samples of those ops off by more than 2%, and why (fidelity.py lists them for preflight's reports too).
OPS_OFF = {
    **dict.fromkeys([f"cholesky_inverse#{i}" for i in range(3)],
                    "cuSOLVER's info array for an empty matrix (512 bytes, a fresh 2 MiB segment) is not modeled"),
    **dict.fromkeys([f"nn.functional.conv_transpose3d#{i}" for i in range(3)],
                    "cuDNN's convolution workspaces are not modeled"),
}


@pytest.fixture(scope="module")
def opdb(torch211, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("fakecuda") / "opdb.json"
    proc = under_fake([torch211, PROBE, "opdb", "--ops", OPS, "--samples", "3", "--out", str(out)],
                      mode="fakecuda", timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fake = json.loads(out.read_text())
    gpu = real("mem_opdb.json")
    gpu["cases"] = {k: v for k, v in gpu["cases"].items() if k in fake["cases"]}
    return {"gpu": gpu, "fake": fake, "rows": harness.compare(gpu, fake)}


def test_op_database_samples_within_tolerance_of_the_h200(opdb):
    rows = opdb["rows"]
    assert len(rows) == len(opdb["fake"]["cases"]) >= 180, "the capture lacks samples this run made"
    off = {k: f"{r['worst_error']:+.1%}" for k, r in rows.items()
           if r["status"] == "scored" and abs(r["worst_error"]) > harness.TOLERANCE}
    assert set(off) == set(OPS_OFF), off


def test_op_database_samples_fail_where_the_h200_failed(opdb):
    for row in opdb["rows"].values():
        if row["status"] == "error":  # raised on one side only, or another exception type, fails
            assert (row["native_error"] or "").split(":")[0] == (row["fakecuda_error"] or "").split(":")[0], row
    assert opdb["rows"]["tensor_split#0"]["status"] == "error"
    assert all(opdb["rows"][f"to#{i}"]["status"] == "scored" for i in range(3))
