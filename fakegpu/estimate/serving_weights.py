"""The weights one tensor-parallel rank holds in vLLM, from the checkpoint's tensor headers.

vLLM splits attention heads and MLP (and expert) intermediates across ranks, pads the vocabulary to a multiple
of 64 and splits it too (embedding and lm_head are vocab-parallel), replicates norms, routers and MLA's
down-projections, and gives every rank a copy of the K/V projections when there are fewer KV heads than ranks.
Unquantized floats are cast to the serving dtype; quantized payloads keep their stored bytes. "Model loading
took" is the torch memory the load added: these weights plus the rotary cos/sin cache vLLM builds.
"""

from __future__ import annotations

from math import ceil

from fakegpu.estimate.dtypes import element_bytes, payload_bytes
from fakegpu.estimate.model_config import ModelConfig
from fakegpu.estimate.safetensors_header import Checkpoint
from fakegpu.estimate.weights import classify

VOCAB_PADDING = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE
VOCAB_NAMES = ("embed_tokens.", "lm_head.", "wte.", "word_embeddings.", "embed_in.", "embed_out.")
KV_NAMES = ("k_proj.", "v_proj.")
# Layers vLLM builds as ReplicatedLinear: MoE routers and MLA's latent down-projections.
REPLICATED_NAMES = (".mlp.gate.", ".block_sparse_moe.gate.", "shared_expert_gate.", "kv_a_proj_with_mqa.",
                    "q_a_proj.")


def rank_weights(ckpt: Checkpoint, cfg: ModelConfig, tensor_parallel: int, dtype: str) -> dict[str, int]:
    """Bytes per rank by kind: sharded matrices, vocab-parallel embeddings, replicated tensors, rotary cache."""
    names = set(ckpt.tensors)
    parts = {"sharded": 0, "vocab_parallel": 0, "replicated": 0, "rotary_cache": 0}
    padded_vocab = ceil(cfg.vocab_size / VOCAB_PADDING) * VOCAB_PADDING
    for t in ckpt.tensors.values():
        kind = classify(t, names)
        if kind == "buffer" and t.dtype not in ("F32", "F16", "BF16"):
            continue  # position ids and the like: vLLM computes them, it does not load them
        n = payload_bytes(dtype, t.numel) if kind == "param" and t.dtype in ("F32", "F16", "BF16", "F64") else t.nbytes
        name = t.name
        if len(t.shape) < 2 or any(r in name for r in REPLICATED_NAMES):
            parts["replicated"] += n
        elif any(v in name for v in VOCAB_NAMES) and t.shape[0] == cfg.vocab_size:
            rows = ceil(padded_vocab / tensor_parallel)
            parts["vocab_parallel"] += int(n / t.shape[0] * rows)
        elif any(k in name for k in KV_NAMES) and cfg.mla is None and cfg.num_kv_heads < tensor_parallel:
            parts["sharded"] += ceil(n / cfg.num_kv_heads)  # one whole KV head per rank
        else:
            parts["sharded"] += ceil(n / tensor_parallel)
    parts["rotary_cache"] = _rotary_cache(cfg, dtype)
    return parts


def _rotary_cache(cfg: ModelConfig, dtype: str) -> int:
    """cos/sin for every position up to max_position_embeddings, kept in the model dtype (one per model)."""
    if not cfg.max_positions:
        return 0
    rotary_dim = cfg.mla.qk_rope_head_dim if cfg.mla else int(cfg.head_dim * cfg.raw.get("partial_rotary_factor", 1))
    return int(cfg.max_positions * rotary_dim * element_bytes(dtype))
