"""The inference model against the seed's measurement, and its structural properties."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.inference import InferenceOptions
from fakegpu.estimate.llm import estimate_llm

SEED = InferenceOptions(batch_size=1, prompt_tokens=9, generated_tokens=2, attention="sdpa")


def test_qwen3_8b_seed_measurement(models):
    r = estimate_llm(models["qwen3-8b"], SEED, dtype="bf16", compute_capability=(12, 0))
    assert r["model"]["parameter_count"] == 8_190_735_360
    assert r["phases"]["load"]["max_memory_allocated"] == pytest.approx(16_383_586_816, rel=1e-3)
    assert r["peak"]["max_memory_allocated"] == pytest.approx(16_396_630_528, rel=1e-3)
    assert r["peak"]["max_memory_reserved"] >= r["peak"]["max_memory_allocated"]
    assert r["peak"]["nvidia_smi_used"] > r["peak"]["max_memory_reserved"]


def test_kv_cache_grows_with_tokens_and_uses_kv_heads(models):
    small = estimate_llm(models["qwen3-8b"], replace(SEED, prompt_tokens=1000, generated_tokens=1))
    big = estimate_llm(models["qwen3-8b"], replace(SEED, prompt_tokens=2000, generated_tokens=1))
    per_token = 2 * 36 * 8 * 128 * 2  # K and V, 36 layers, 8 KV heads of 128, bf16
    delta = big["phases"]["prefill"]["components"]["kv_cache"] - small["phases"]["prefill"]["components"]["kv_cache"]
    assert delta == pytest.approx(1000 * per_token, abs=1024)
    fp8_opts = replace(SEED, prompt_tokens=1000, generated_tokens=1, kv_cache_dtype="F8_E4M3")
    fp8 = estimate_llm(models["qwen3-8b"], fp8_opts)
    assert fp8["phases"]["prefill"]["components"]["kv_cache"] == pytest.approx(500 * per_token, abs=1024)


def test_eager_attention_costs_more_than_flash_on_long_prompts(models):
    long = replace(SEED, prompt_tokens=8192)
    eager = estimate_llm(models["qwen3-8b"], replace(long, attention="eager"))["phases"]["prefill"]
    flash = estimate_llm(models["qwen3-8b"], replace(long, attention="flash"))["phases"]["prefill"]
    assert eager["max_memory_allocated"] > flash["max_memory_allocated"] + 8192 * 8192 * 32 * 4


def test_all_token_logits_cost_more(models):
    last = estimate_llm(models["tiny"], replace(SEED, prompt_tokens=2048))["phases"]["prefill"]["max_memory_allocated"]
    every = estimate_llm(models["tiny"], replace(SEED, prompt_tokens=2048, logits="all"))
    assert every["phases"]["prefill"]["max_memory_allocated"] > last
    assert every["phases"]["prefill"]["components"]["logits"] >= 2048 * 1000 * (2 + 4)  # bf16 logits + fp32 copy


def test_tensor_parallel_splits_weights(models):
    one = estimate_llm(models["qwen3-8b"], SEED)["phases"]["load"]["max_memory_allocated"]
    two = estimate_llm(models["qwen3-8b"], replace(SEED, tensor_parallel=2))["phases"]["load"]["max_memory_allocated"]
    assert two == pytest.approx(one / 2, rel=0.01)


def test_fp32_checkpoint_cast_to_bf16(models, tmp_path):
    from tests.estimate.conftest import TINY_LLAMA, make_model

    fp32 = make_model(tmp_path, "fp32", TINY_LLAMA, dtype="F32")
    stored = estimate_llm(fp32, SEED)
    cast = estimate_llm(fp32, SEED, dtype="bf16")
    assert stored["workload"]["dtype"] == "F32"
    assert cast["phases"]["load"]["max_memory_allocated"] < 0.51 * stored["phases"]["load"]["max_memory_allocated"]
    assert cast["model"]["weight_bytes"] == stored["model"]["weight_bytes"]  # the checkpoint itself is unchanged


def test_target_verdict_and_largest_workload(models):
    r = estimate_llm(models["qwen3-8b"], replace(SEED, prompt_tokens=1024, generated_tokens=256), target="a100")
    t = r["target"]
    assert t["verdict"] == "fits" and t["profile"] == "a100-sxm4-80gb"
    assert t["max_batch_size"] > 1 and t["max_context_tokens"] == 40960 and t["context_capped_by_model"]
    at_max = estimate_llm(models["qwen3-8b"], replace(SEED, batch_size=t["max_batch_size"], prompt_tokens=1024,
                                                      generated_tokens=256), target="a100")
    over = estimate_llm(models["qwen3-8b"], replace(SEED, batch_size=t["max_batch_size"] + 1, prompt_tokens=1024,
                                                    generated_tokens=256), target="a100")
    assert at_max["target"]["verdict"] != "does-not-fit"
    assert over["target"]["verdict"] == "does-not-fit"


def test_bad_options(models):
    with pytest.raises(EstimateInputError, match="attention"):
        estimate_llm(models["tiny"], replace(SEED, attention="paged"))
    with pytest.raises(EstimateInputError, match="dtype"):
        estimate_llm(models["tiny"], SEED, dtype="fp7")
    with pytest.raises(EstimateInputError, match="at least 1"):
        estimate_llm(models["tiny"], replace(SEED, batch_size=0))
