"""Header-only checkpoints with the exact tensor shapes of an architecture, for tests, benches and the dev set.

Files are written as header + a sparse hole of the right length (truncate), so a 405B-parameter checkpoint
takes no disk space and its headers are indistinguishable from the real ones.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from fakegpu.estimate.dtypes import payload_bytes
from fakegpu.estimate.model_config import ModelConfig

Shape = tuple[int, ...]


def tensor_shapes(cfg: ModelConfig) -> list[tuple[str, Shape]]:
    """Names and shapes transformers would save for this config (llama, qwen, MoE, DeepSeek and bigcode layouts)."""
    if cfg.model_type == "gpt_bigcode":
        return _bigcode(cfg)
    h = cfg.hidden_size
    out: list[tuple[str, Shape]] = [("model.embed_tokens.weight", (cfg.vocab_size, h))]
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}"
        out += [(f"{p}.input_layernorm.weight", (h,)), (f"{p}.post_attention_layernorm.weight", (h,))]
        out += _attention(cfg, p)
        out += _mlp(cfg, p, i)
    out.append(("model.norm.weight", (h,)))
    if not cfg.tie_word_embeddings:
        out.append(("lm_head.weight", (cfg.vocab_size, h)))
    return out


def _attention(cfg: ModelConfig, p: str) -> list[tuple[str, Shape]]:
    h, hd, nh, kvh = cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads
    a = f"{p}.self_attn"
    if cfg.mla is not None:
        m = cfg.mla
        q_dim = nh * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        q = [(f"{a}.q_proj.weight", (q_dim, h))] if not m.q_lora_rank else [
            (f"{a}.q_a_proj.weight", (m.q_lora_rank, h)),
            (f"{a}.q_a_layernorm.weight", (m.q_lora_rank,)),
            (f"{a}.q_b_proj.weight", (q_dim, m.q_lora_rank)),
        ]
        return [
            *q,
            (f"{a}.kv_a_proj_with_mqa.weight", (m.kv_lora_rank + m.qk_rope_head_dim, h)),
            (f"{a}.kv_a_layernorm.weight", (m.kv_lora_rank,)),
            (f"{a}.kv_b_proj.weight", (nh * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank)),
            (f"{a}.o_proj.weight", (h, nh * m.v_head_dim)),
        ]
    out = [
        (f"{a}.q_proj.weight", (nh * hd, h)),
        (f"{a}.k_proj.weight", (kvh * hd, h)),
        (f"{a}.v_proj.weight", (kvh * hd, h)),
        (f"{a}.o_proj.weight", (h, nh * hd)),
    ]
    if cfg.model_type in ("qwen2", "qwen2_moe") or cfg.raw.get("attention_bias"):
        out += [(f"{a}.q_proj.bias", (nh * hd,)), (f"{a}.k_proj.bias", (kvh * hd,)), (f"{a}.v_proj.bias", (kvh * hd,))]
    if cfg.model_type in ("qwen3", "qwen3_moe", "olmo2"):
        out += [(f"{a}.q_norm.weight", (hd,)), (f"{a}.k_norm.weight", (hd,))]
    return out


def _gated(prefix: str, h: int, inter: int, names=("gate_proj", "up_proj", "down_proj")) -> list[tuple[str, Shape]]:
    g, u, d = names
    return [
        (f"{prefix}.{g}.weight", (inter, h)),
        (f"{prefix}.{u}.weight", (inter, h)),
        (f"{prefix}.{d}.weight", (h, inter)),
    ]


def _mlp(cfg: ModelConfig, p: str, layer: int) -> list[tuple[str, Shape]]:
    h, moe = cfg.hidden_size, cfg.moe
    if moe is None or layer < moe.dense_layers:
        return _gated(f"{p}.mlp", h, cfg.intermediate_size)
    if cfg.model_type == "mixtral":
        out = [(f"{p}.block_sparse_moe.gate.weight", (moe.num_experts, h))]
        for e in range(moe.num_experts):
            out += _gated(f"{p}.block_sparse_moe.experts.{e}", h, moe.expert_intermediate, ("w1", "w3", "w2"))
        return out
    out = [(f"{p}.mlp.gate.weight", (moe.num_experts, h))]
    for e in range(moe.num_experts):
        out += _gated(f"{p}.mlp.experts.{e}", h, moe.expert_intermediate)
    if moe.shared_intermediate:
        name = "shared_experts" if cfg.model_type.startswith("deepseek") else "shared_expert"
        out += _gated(f"{p}.mlp.{name}", h, moe.shared_intermediate)
        if cfg.model_type == "qwen2_moe":
            out.append((f"{p}.mlp.shared_expert_gate.weight", (1, h)))
    if cfg.model_type == "deepseek_v3":
        out.append((f"{p}.mlp.gate.e_score_correction_bias", (moe.num_experts,)))
    return out


def _bigcode(cfg: ModelConfig) -> list[tuple[str, Shape]]:
    h, inter = cfg.hidden_size, cfg.intermediate_size
    kv = 2 * cfg.num_kv_heads * cfg.head_dim
    out: list[tuple[str, Shape]] = [
        ("transformer.wte.weight", (cfg.vocab_size, h)),
        ("transformer.wpe.weight", (cfg.max_positions or 2048, h)),
    ]
    for i in range(cfg.num_layers):
        p = f"transformer.h.{i}"
        for name, shape in (
            ("ln_1", (h,)), ("attn.c_attn", (h + kv, h)), ("attn.c_proj", (h, h)),
            ("ln_2", (h,)), ("mlp.c_fc", (inter, h)), ("mlp.c_proj", (h, inter)),
        ):
            out += [(f"{p}.{name}.weight", shape), (f"{p}.{name}.bias", (shape[0],))]
    out += [("transformer.ln_f.weight", (h,)), ("transformer.ln_f.bias", (h,))]
    return out


def write_safetensors_header(path: Path, tensors: list[tuple[str, str, Shape]], metadata: dict | None = None) -> int:
    """Write a safetensors file whose payload is a sparse hole; returns the file size."""
    header: dict = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for name, dtype, shape in tensors:
        size = payload_bytes(dtype, math.prod(shape))
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header so the payload is 8-byte aligned
    with path.open("wb") as fh:
        fh.write(len(raw).to_bytes(8, "little"))
        fh.write(raw)
        fh.truncate(8 + len(raw) + offset)
    return 8 + len(raw) + offset


def write_checkpoint(
    out_dir: Path, config_doc: dict, tensors: list[tuple[str, str, Shape]], shard_bytes: int = 5 * 10**9
) -> Path:
    """config.json plus shards and model.safetensors.index.json (or one model.safetensors when it fits)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(config_doc, indent=2))
    shards: list[list[tuple[str, str, Shape]]] = [[]]
    size = 0
    for t in tensors:
        n = payload_bytes(t[1], math.prod(t[2]))
        if shards[-1] and size + n > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += n
    if len(shards) == 1:
        write_safetensors_header(out_dir / "model.safetensors", shards[0])
        return out_dir
    weight_map, total = {}, 0
    for i, shard in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors_header(out_dir / name, shard)
        total += sum(payload_bytes(d, math.prod(s)) for _, d, s in shard)
        weight_map.update({t[0]: name for t in shard})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    return out_dir


def synthesize(
    out_dir: Path, config_doc: dict, cfg: ModelConfig, dtype: str = "BF16", shard_bytes: int = 5 * 10**9
) -> Path:
    return write_checkpoint(out_dir, config_doc, [(n, dtype, s) for n, s in tensor_shapes(cfg)], shard_bytes)


def sparse_ok(path: Path) -> bool:
    """Whether a written checkpoint file really is sparse (the filesystem kept the hole)."""
    st = os.stat(path)
    return st.st_blocks * 512 < st.st_size
