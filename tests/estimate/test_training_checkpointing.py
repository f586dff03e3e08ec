"""Where activation checkpointing sits changes what FSDP keeps alive in backward."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.training import TrainingOptions, plan_training

# Qwen3-8B: 36 layers, hidden 4096; one layer's input at micro-batch 1 x 512 tokens in bf16 is 4 MiB.
LAYERS, LAYER_INPUT = 36, 512 * 4096 * 2
HF = TrainingOptions(method="lora", lora_rank=16, micro_batch=1, seq_len=512, precision="bf16", fsdp="full", gpus=2,
                     grad_checkpointing=True, checkpoint_impl="hf-reentrant")


def backward(models, options: TrainingOptions) -> dict:
    return plan_training(models["qwen3-8b"], options)["phases"]["backward"]


def test_hf_reentrant_checkpointing_keeps_every_input_gradient_of_frozen_fsdp_units(models):
    # transformers' checkpoint wraps each FSDP unit's call; FSDP hooks the unit's detached inputs (frozen flat param)
    # and the hook lives until _finalize_params: all but the last layer's input gradients are still alive at layer 0.
    hf = backward(models, HF)["components"]
    inside = backward(models, replace(HF, checkpoint_impl="fsdp-wrapper"))["components"]
    assert hf["held_input_grads"] == LAYER_INPUT * (LAYERS - 1)
    assert inside["held_input_grads"] == 0
    assert hf["activations"] == inside["activations"]


@pytest.mark.parametrize("change", [
    {"checkpoint_impl": "hf-non-reentrant"},  # recomputation reuses the real (non-leaf) inputs: no .grad on them
    {"method": "full"},  # trainable flat params reshard from their own post-backward hook, not an input hook
    {"fsdp": "none", "gpus": 1},  # no FSDP unit, no hook
    {"grad_checkpointing": False},
])
def test_input_gradients_are_only_held_in_that_combination(models, change):
    assert backward(models, replace(HF, **change))["components"]["held_input_grads"] == 0


def test_held_gradients_count_in_the_backward_totals(models):
    # Long enough that the backward temporaries, not what FSDP's constructor left cached, set reserved memory.
    long = replace(HF, micro_batch=4, seq_len=2048)
    hf = backward(models, long)
    inside = backward(models, replace(long, checkpoint_impl="fsdp-wrapper"))
    grown = hf["max_memory_allocated"] - inside["max_memory_allocated"]
    assert grown == pytest.approx(LAYER_INPUT * 16 * (LAYERS - 1), abs=2)
    assert hf["max_memory_reserved"] >= inside["max_memory_reserved"] + grown


def test_unknown_checkpoint_impl_is_refused_with_a_suggestion(models):
    with pytest.raises(EstimateInputError) as err:
        plan_training(models["qwen3-8b"], replace(HF, checkpoint_impl="fsdp-wraper"))
    message = str(err.value)
    assert "--checkpoint-impl" in message and "did you mean fsdp-wrapper" in message
    assert "hf-reentrant, hf-non-reentrant, fsdp-wrapper" in message
