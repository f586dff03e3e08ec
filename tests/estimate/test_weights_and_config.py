"""Parameter counting of quantized checkpoints, and config.json normalisation and its errors."""

from __future__ import annotations

import json

import pytest

from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.model_config import parse_model_config, read_model_config
from fakegpu.estimate.safetensors_header import load_checkpoint
from fakegpu.estimate.synthetic import write_safetensors_header
from fakegpu.estimate.weights import summarise

OUT, IN = 512, 256  # one linear layer, weight [OUT, IN]


def checkpoint(tmp_path, tensors):
    path = tmp_path / "m.safetensors"
    write_safetensors_header(path, tensors)
    return load_checkpoint(path)


def test_bitsandbytes_4bit_counts_two_values_per_byte(tmp_path):
    n = OUT * IN
    ckpt = checkpoint(tmp_path, [
        ("l.weight", "U8", (n // 2, 1)),
        ("l.weight.absmax", "F32", (n // 64,)),
        ("l.weight.quant_map", "F32", (16,)),
        ("l.weight.quant_state.bitsandbytes__nf4", "U8", (100,)),
        ("l.bias", "BF16", (OUT,)),
    ])
    s = summarise(ckpt)
    assert s.parameter_count == n + OUT
    assert s.quantization == "bitsandbytes-4bit"
    assert s.weight_bytes == n // 2 + n // 64 * 4 + 64 + 100 + OUT * 2
    assert s.quant_metadata_bytes == n // 64 * 4 + 64 + 100


def test_bitsandbytes_8bit(tmp_path):
    ckpt = checkpoint(tmp_path, [("l.weight", "I8", (OUT, IN)), ("l.SCB", "F32", (OUT,))])
    s = summarise(ckpt)
    assert (s.parameter_count, s.quantization, s.weight_bytes) == (OUT * IN, "bitsandbytes-8bit", OUT * IN + OUT * 4)


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_gptq_and_awq_pack_eight_values_per_int32(tmp_path, method):
    qweight = (IN // 8, OUT) if method == "gptq" else (IN, OUT // 8)
    ckpt = checkpoint(tmp_path, [
        ("l.qweight", "I32", qweight), ("l.qzeros", "I32", (IN // 128, OUT // 8)),
        ("l.scales", "F16", (IN // 128, OUT)), ("l.g_idx", "I32", (IN,)),
    ])
    s = summarise(ckpt, {"quant_method": method, "bits": 4})
    assert s.parameter_count == OUT * IN
    assert s.quantization == method
    assert s.parameter_bytes == OUT * IN // 2


def test_fp8_with_scales(tmp_path):
    ckpt = checkpoint(tmp_path, [("l.weight", "F8_E4M3", (OUT, IN)), ("l.weight_scale_inv", "F32", (4, 2))])
    s = summarise(ckpt)
    assert (s.parameter_count, s.quantization, s.parameter_bytes) == (OUT * IN, "fp8", OUT * IN)


def test_buffers_are_not_parameters(tmp_path):
    ckpt = checkpoint(tmp_path, [("e.position_ids", "I64", (1, 512)), ("e.weight", "F32", (10, 4))])
    s = summarise(ckpt)
    assert (s.parameter_count, s.buffer_bytes, s.weight_bytes) == (40, 4096, 4096 + 160)


def test_unknown_architecture_names_file_and_field(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mamba9", "hidden_size": 8}))
    with pytest.raises(EstimateInputError) as err:
        read_model_config(path)
    assert str(path) in err.value.message and "'model_type'" in err.value.message and "mamba9" in err.value.message


def test_missing_config_and_missing_field(tmp_path):
    with pytest.raises(EstimateInputError, match="missing"):
        read_model_config(tmp_path)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 9}))
    with pytest.raises(EstimateInputError, match="num_hidden_layers"):
        read_model_config(path)
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": "big"}))
    with pytest.raises(EstimateInputError, match="'hidden_size'"):
        read_model_config(path)
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 0,
                                "num_hidden_layers": 1, "vocab_size": 9}))
    with pytest.raises(EstimateInputError, match="field 'num_attention_heads': is 0; it must be at least 1"):
        read_model_config(path)  # present, so not "missing"


def test_moe_and_mla_fields(tmp_path):
    mixtral = parse_model_config({
        "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
        "num_experts_per_tok": 2}, tmp_path / "config.json")
    assert mixtral.moe.num_experts == 8 and mixtral.moe.expert_intermediate == 14336
    assert mixtral.kv_bytes_per_token(2) == 2 * 32 * 8 * 128 * 2  # GQA: 8 KV heads, not 32
    deepseek = parse_model_config({
        "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
        "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280, "n_routed_experts": 256,
        "num_experts_per_tok": 8, "moe_intermediate_size": 2048, "n_shared_experts": 1, "first_k_dense_replace": 3,
        "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128}, tmp_path / "config.json")
    assert deepseek.moe.shared_intermediate == 2048 and deepseek.moe.dense_layers == 3
    assert deepseek.kv_bytes_per_token(2) == 61 * 128 * (128 + 64 + 128) * 2
    bigcode = parse_model_config({"model_type": "gpt_bigcode", "n_embd": 6144, "n_head": 48, "n_layer": 40,
                                  "vocab_size": 49152, "multi_query": True}, tmp_path / "config.json")
    assert (bigcode.num_kv_heads, bigcode.gated_mlp, bigcode.intermediate_size) == (1, False, 4 * 6144)
