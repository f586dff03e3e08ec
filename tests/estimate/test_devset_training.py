"""plan-training against published training measurements: the bound reached, pinned so it cannot regress.

Reached when this was written: 26 rows, median |error| 3.5 %, worst underestimate -8.5 %. Per measured quantity:
12 max_memory_allocated rows (median 2.8 %, worst -6.5 %), 11 max_memory_reserved rows from Answer.AI's FSDP
benchmarks (median 3.4 %, worst -8.1 %), 3 nvidia-smi rows from the PEFT docs (median 12.4 %, worst -8.5 %: the
ZeRO-3 row; the two FSDP rows are over by 12-15 %, their reserved-memory terms being sized on Answer.AI's loop).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from fakegpu.estimate.devset import by_metric, load_devset, of_kind, run_devset, run_row, score
from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.training import TrainingOptions
from tests.estimate.conftest import DEVSET

MEDIAN_BOUND = 0.045  # reached 0.035, plus margin
UNDERESTIMATE_BOUND = -0.10  # reached -0.085; issue 8's bar
# Per measured quantity: (rows at least, median bound, worst-underestimate bound), each the value reached plus margin.
METRIC_BOUNDS = {
    "max_memory_allocated": (12, 0.04, -0.075),
    "max_memory_reserved": (11, 0.045, -0.095),
    "nvidia-smi": (3, 0.13, -0.10),
}


@pytest.fixture(scope="module")
def training_results():
    return of_kind(run_devset(DEVSET / "devset.json"), "training")


def test_training_rows_are_sourced_and_complete():
    rows = [r for r in json.loads((DEVSET / "devset.json").read_text())["rows"] if r["phase"] == "training"]
    assert len(rows) >= 10
    # host and first path segment: github.com/Lightning-AI, github.com/pytorch, huggingface.co/docs (PEFT)
    sources = {"/".join(r["source"].split()[0].split("/")[2:4]) for r in rows}
    assert len(sources) >= 3, sources
    for r in rows:
        assert r["metric"] in ("max_memory_allocated", "max_memory_reserved", "nvidia-smi")
        assert r["source"].startswith("https://") and r["notes"] and r["gpu"] and r["software"]
        TrainingOptions(**r["workload"]).validate()  # every option a row names exists and is valid


def test_training_devset_bound(training_results):
    s = score(training_results)
    assert s["rows"] >= 10
    assert s["median_abs_error"] <= MEDIAN_BOUND, s
    assert s["worst_underestimate"] >= UNDERESTIMATE_BOUND, s


def test_each_predicted_number_is_validated(training_results):
    """Allocated, reserved and nvidia-smi predictions each have their own rows and their own reached bound."""
    # The rows these bounds were pinned on (and Megatron's); issue 20's recipe and LoRA-module rows are bounded by
    # tests/estimate/test_devset_recipes.py, so a new category cannot loosen or hide a regression here.
    scores = by_metric([r for r in training_results if r.group in ("training", "megatron")])
    assert set(scores) == set(METRIC_BOUNDS)
    for metric, (rows, median, under) in METRIC_BOUNDS.items():
        s = scores[metric]
        assert s["rows"] >= rows, (metric, s)
        assert s["median_abs_error"] <= median, (metric, s)
        assert s["worst_underestimate"] >= under, (metric, s)


# Megatron-LM rows (issue 20, point 2): rows at least, and the bound reached plus margin (4 rows, median 4.2 %, worst
# -5.1 %: all four come out under, by 0.6-5.1 %; see the rows' notes).
MEGATRON_BOUNDS = (4, 0.05, -0.07)


def test_megatron_rows_meet_issue_20s_bar(training_results):
    rows = [r for r in training_results if r.group == "megatron"]
    least, median, under = MEGATRON_BOUNDS
    s = score(rows)
    assert s["rows"] >= least, s
    assert s["median_abs_error"] <= median and s["worst_underestimate"] >= under, s
    published = [r for r in load_devset(DEVSET / "devset.json") if r.get("category") == "megatron"]
    assert {r["workload"]["framework"] for r in published} == {"megatron"}
    # what they exercise between them: TP+SP, pipeline stages, full recomputation, both attention paths
    assert any(r["workload"].get("sequence_parallel") for r in published)
    assert any(r["workload"].get("pipeline_parallel", 1) > 1 and r["workload"].get("recompute") == "full"
               for r in published)
    assert {r["workload"].get("attention", "fused") for r in published} == {"fused", "unfused"}


def test_lora_rows_stay_tight(training_results):
    """litgpt's LoRA rows (bf16 base, dropout 0.05 on q/v) are the cleanest measurements: keep them within 5 %."""
    lora = [r for r in training_results if r.id.startswith("litgpt") and r.id.endswith("-lora-a10g")]
    assert len(lora) == 3
    assert all(abs(r.error) <= 0.05 for r in lora), [(r.id, r.error) for r in lora]


def test_qlora_rows_are_explained(training_results):
    """litgpt's QLoRA rows (bnb 0.42 MatMul4Bit keeps its inputs; the loop holds the previous graph) within 8 %."""
    qlora = [r for r in training_results if r.id.startswith("litgpt") and "-qlora-" in r.id]
    assert len(qlora) == 4
    assert all(-0.08 <= r.error <= 0.05 for r in qlora), [(r.id, r.error) for r in qlora]


def test_bitsandbytes_fix_and_framework_change_the_plan():
    """bitsandbytes >= 0.43.2 drops MatMul4Bit's kept input; litgpt pins a second copy through its held graph."""
    row = next(r for r in load_devset(DEVSET / "devset.json") if r["id"] == "litgpt-llama2-7b-qlora-a10g")
    with tempfile.TemporaryDirectory() as tmp:
        old = run_row(row, DEVSET, Path(tmp)).predicted
        fixed = run_row({**row, "workload": {**row["workload"], "bitsandbytes": "0.43.3"}}, DEVSET, Path(tmp)).predicted
        hf = run_row({**row, "workload": {**row["workload"], "framework": "generic"}}, DEVSET, Path(tmp)).predicted
    assert fixed < old - 1.5e9  # 32 layers x 1024 tokens x (4h + 2I) bytes and the previous step's copy
    assert hf < old


def test_unknown_framework_is_rejected():
    with pytest.raises(EstimateInputError, match="framework"):
        TrainingOptions(method="lora", framework="keras").validate()


def test_lora_dropout_is_validated():
    with pytest.raises(EstimateInputError, match="lora-dropout"):
        TrainingOptions(method="lora", lora_dropout=1.5).validate()


def test_hf_checkpointing_explains_the_peft_fsdp_rows():
    """PEFT's recipe checkpoints with transformers' reentrant checkpointing around frozen FSDP units: every layer's
    input gradient is held until backward ends (80 x 2 x 2048 x 8192 x 2 bytes = 5 GiB on Llama-2-70B)."""
    rows = [r for r in load_devset(DEVSET / "devset.json") if r["id"].startswith("peft-llama2-70b-qlora-fsdp")]
    assert len(rows) == 2
    held = 79 * 2 * 2048 * 8192 * 2
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows:
            assert row["workload"]["checkpoint_impl"] == "hf-reentrant"
            hf = run_row(row, DEVSET, Path(tmp))
            inside = run_row({**row, "workload": {**row["workload"], "checkpoint_impl": "fsdp-wrapper"}}, DEVSET,
                             Path(tmp))
            assert hf.predicted - inside.predicted >= held
            # Reached +14.2 % and +18.5 % (nvidia-smi): reserved memory's native-mode fit holds 18 % over a training
            # step's temporaries where 15 % was assumed before (+12.7 %, +15.9 % then), plus margin.
            assert -0.10 <= hf.error <= 0.20, (row["id"], hf.error)
