"""`fakegpu preflight --mode native | both` (issue 23): the memory verdict from PyTorch's own CUDA path."""

from __future__ import annotations

import json
import sys

import pytest

from fakegpu.profiles import load_catalog
from fakegpu.reports import validate
from tests.conftest import run_cli
from tests.fakecuda.test_preflight import BIG_MODEL

pytestmark = [pytest.mark.torch, pytest.mark.native, pytest.mark.slow]
GiB = 1 << 30

GPT2 = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=512, n_head=8, vocab_size=8000, n_positions=256)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, 8000, (8, 256)).cuda()
for _ in range(2):
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("trained")
"""


def preflight(tmp_path, code: str, *args: str):
    script = tmp_path / "train.py"
    script.write_text(code)
    result = run_cli("preflight", "--json", *args, "--", sys.executable, str(script))
    return result, json.loads(result.stdout)["data"]


@pytest.mark.parametrize(("devices", "verdict", "code"), [("t4", "FAIL_OOM", 2), ("a100", "PASS_FIT", 0)])
def test_native_verdict_on_a_model_that_overflows_a_t4(tmp_path, cuda_torch, cuda_build, devices, verdict, code):
    result, doc = preflight(tmp_path, BIG_MODEL.format(layers=15), "--devices", devices, "--mode", "native")
    assert result.returncode == code, result.stderr[-3000:]
    validate(doc)
    assert doc["mode"] == "native" and doc["verdict"] == verdict
    process = doc["processes"][0]
    assert process["mode"] == "native" and process["devices"][0]["context_bytes"] > 0
    device = doc["devices"][0]
    assert device["capacity_bytes"] == load_catalog().get(devices).cuda_total_bytes
    if verdict == "FAIL_OOM":
        assert process["uncaught_exception"] == "OutOfMemoryError"
        assert doc["oom"]["requested_bytes"] == GiB and "Tried to allocate 1024.00 MiB" in doc["oom"]["message"]
    else:
        assert device["peak_allocated_bytes"] == 15 * GiB
        assert device["peak_used_bytes"] == device["peak_reserved_bytes"] + process["devices"][0]["context_bytes"]


def test_both_modes_on_gpt2_agree_within_two_percent(tmp_path, cuda_torch, cuda_build):
    result, doc = preflight(tmp_path, GPT2, "--devices", "a100", "--mode", "both")
    assert result.returncode == 0, result.stderr[-3000:]
    validate(doc)
    assert doc["mode"] == "both" and doc["verdict"] == "PASS_FIT" and doc["verdict_from"] == "native"
    assert doc["other"]["mode"] == "fakecuda" and doc["other"]["verdict"] == "PASS_FIT"
    (row,) = doc["comparison"]
    # native's peak is PyTorch's own caching allocator on the CUDA path: the one the verdict uses
    assert row["native_peak_allocated_bytes"] == doc["devices"][0]["peak_allocated_bytes"] > 800 * (1 << 20)
    assert abs(row["fakecuda_error_allocated"]) <= 0.02 and abs(row["fakecuda_error_reserved"]) <= 0.02, row


def test_unknown_mode_is_refused_with_the_accepted_ones(tmp_path):
    result = run_cli("preflight", "--mode", "natve", "--", sys.executable, "-c", "pass")
    assert result.returncode == 2
    assert "natve" in result.stderr and "fakecuda, native, both" in result.stderr
