"""Issue 20, point 1: LoRA memory per adapted module, DoRA, IA3 and prompt tuning, sized from the module shapes."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.training import TrainingOptions, plan_training
from fakegpu.reports import schema_id, validate

# Qwen3-8B: hidden 4096, intermediate 12288, 36 layers, 32 query / 8 kv heads of 128.
H, INTER, LAYERS = 4096, 12288, 36
TOKENS = 2 * 1024
BASE = TrainingOptions(method="lora", micro_batch=2, seq_len=1024, precision="bf16")


def forward(models, **changes) -> dict:
    return plan_training(models["qwen3-8b"], replace(BASE, **changes))["phases"]["forward"]["components"]


def test_adapting_down_proj_keeps_the_wide_intermediate(models):
    """Without dropout lora_A saves its input: q/k/v share the attention input, down_proj's is the intermediate
    (which a frozen MLP keeps nowhere else); lora_B keeps x @ A, rank wide, per module."""
    qv = forward(models, lora_targets="q,v", lora_rank=32)["activations"]
    down = forward(models, lora_targets="down", lora_rank=32)["activations"]
    qkv = forward(models, lora_targets="q,k,v", lora_rank=32)["activations"]
    assert down - qv == pytest.approx(TOKENS * LAYERS * (INTER - H - 32) * 2, rel=1e-6)  # and one x @ A fewer
    assert qkv - qv == pytest.approx(TOKENS * LAYERS * 32 * 2, rel=1e-6)  # one more x @ A, the input is shared


def test_rank_and_targets_move_the_peak(models):
    """The issue's example: r32 on q,v and r10 on gate/up/down no longer give the same peak."""
    def p(**c):
        return plan_training(models["qwen3-8b"], replace(BASE, **c))["peak"]["max_memory_allocated"]
    assert p(lora_targets="gate,up,down", lora_rank=10) > p(lora_targets="q,v", lora_rank=32) + 1e9
    assert p(lora_targets="all-linear", lora_rank=64) > p(lora_targets="all-linear", lora_rank=8)


def test_dropout_keeps_a_copy_and_a_mask_per_module(models):
    plain = forward(models, lora_targets="q,v", lora_dropout=0.0)["activations"]
    dropped = forward(models, lora_targets="q,v", lora_dropout=0.1)["activations"]
    # each of q and v drops its own copy of the attention input (bf16) and keeps a bool mask, instead of the one
    # shared input lora_A would have saved
    assert dropped - plain == pytest.approx(TOKENS * LAYERS * (2 * H * 3 - H * 2), rel=1e-6)


def test_dora_terms(models):
    r = plan_training(models["qwen3-8b"], replace(BASE, lora_targets="q,v", dora=True))
    lora = plan_training(models["qwen3-8b"], replace(BASE, lora_targets="q,v"))
    # magnitude vectors: out_features per adapted module per layer (q 4096, v 1024)
    assert r["trainable_parameters"] - lora["trainable_parameters"] == LAYERS * (4096 + 1024)
    fwd, base = r["phases"]["forward"]["components"], lora["phases"]["forward"]["components"]
    assert fwd["activations"] - base["activations"] == pytest.approx(TOKENS * LAYERS * 2 * (4096 + 1024) * 2, rel=1e-6)
    # the weight norm's temporaries: eye(in) and two out x in products of the largest module (q: 4096 x 4096)
    assert fwd["dora_weight_norm"] == (4096 * 4096 + 2 * 4096 * 4096) * 2
    assert r["assumptions"]["adapter"]["dora"] is True


def test_ia3_and_prompt_tuning(models):
    ia3 = plan_training(models["qwen3-8b"], replace(BASE, method="ia3"))
    assert ia3["trainable_parameters"] == LAYERS * (1024 + 1024 + INTER)  # k and v outputs, down_proj's input
    assert ia3["assumptions"]["adapter"]["modules"] == ["k_proj", "v_proj", "down_proj"]
    pt = plan_training(models["qwen3-8b"], replace(BASE, method="prompt-tuning", virtual_tokens=100))
    frozen = plan_training(models["qwen3-8b"], replace(BASE, method="prompt-tuning", virtual_tokens=1))
    assert pt["trainable_parameters"] == 100 * H
    assert pt["assumptions"]["adapter"]["effective_seq_len"] == 1124
    ratio = pt["phases"]["forward"]["components"]["activations"] / frozen["phases"]["forward"]["components"][
        "activations"]
    assert ratio == pytest.approx(1124 / 1025, rel=1e-6)  # virtual tokens lengthen every sequence


def test_adapter_options_are_validated(models):
    with pytest.raises(EstimateInputError, match=r"--lora-targets.*did you mean q_proj"):
        plan_training(models["qwen3-8b"], replace(BASE, lora_targets="q_prj"))
    with pytest.raises(EstimateInputError, match="--dora"):
        TrainingOptions(method="full", dora=True).validate()
    with pytest.raises(EstimateInputError, match=r"--method.*did you mean ia3.*prompt-tuning"):
        TrainingOptions(method="ia4").validate()
    with pytest.raises(EstimateInputError, match="--virtual-tokens"):
        TrainingOptions(method="prompt-tuning", virtual_tokens=0).validate()


@pytest.mark.parametrize(("method", "targets", "item"), [("lora", "q,,v", 2), ("qlora", "q,v,", 3),
                                                        ("ia3", ",k,v", 1), ("lora", "q, ,v", 2)])
def test_an_empty_lora_target_is_refused_not_skipped(models, method, targets, item):
    from typer.testing import CliRunner

    from fakegpu.cli.main import app

    # "q,,v" adapts q and v only if the empty item is dropped; a name left out must not shrink the estimate
    result = CliRunner().invoke(app, ["plan-training", "--model-dir", str(models["tiny"]), "--method", method,
                                      "--lora-targets", targets])
    assert result.exit_code == 2 and result.stdout == ""
    assert f"--lora-targets: {targets!r}: item {item} is empty; give a comma list of module names" in result.stderr


def test_report_schema_carries_the_assumptions(models):
    r = plan_training(models["qwen3-8b"], replace(BASE, lora_targets="q,v,down", lora_dropout=0.05))
    validate({"schema": schema_id("plan-training"), **r} if "schema" not in r else r)
    modules = r["assumptions"]["adapter"]["modules"]
    assert modules == ["q_proj (4096->4096)", "v_proj (4096->1024)", "down_proj (12288->4096)"]
    assert "mask" in r["assumptions"]["adapter"]["saved_per_module"]
    json.dumps(r)
