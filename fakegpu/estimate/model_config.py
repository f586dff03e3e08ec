"""config.json, normalised: the few architecture numbers the memory formulas need, whatever the model family.

Each family spells the same quantity differently (hidden_size, n_embd, d_model, dim); this module is the one
place that knows the spellings. An architecture it does not know is an error naming the file and the field,
never a silent guess.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakegpu.estimate.errors import EstimateInputError
from fakegpu.user_files import CONFIG_BYTES, UnreadableFile, loads_json, read_text

# Decoder families whose layers are "attention + (gated) MLP" with the llama-style names, plus their MoE kin.
LLAMA_LIKE = frozenset({
    "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "granite", "olmo", "olmo2",
    "cohere", "phi3", "internlm2", "yi", "starcoder2",
})
MOE = frozenset({"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "olmoe"})
OTHER_DECODERS = frozenset({"gpt_bigcode", "phi", "gpt2", "gpt_neox", "falcon"})
ENCODERS = frozenset({"bert", "roberta", "xlm-roberta", "mpnet", "electra", "distilbert"})
SUPPORTED = LLAMA_LIKE | MOE | OTHER_DECODERS | ENCODERS

# Families whose MLP is a plain up/activation/down rather than gate*up.
NON_GATED = frozenset({"gpt_bigcode", "phi", "gpt2", "gpt_neox", "falcon", "starcoder2"} | ENCODERS)
# transformers' default for tie_word_embeddings differs by family (PretrainedConfig says True, llama says False).
TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3_text", "gpt_bigcode", "gpt2", "phi"} | ENCODERS)

_ALIASES: dict[str, tuple[str, ...]] = {
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "num_heads": ("num_attention_heads", "n_head", "n_heads"),
    "vocab_size": ("vocab_size",),
}


@dataclass(frozen=True)
class MoESpec:
    num_experts: int
    experts_per_token: int
    expert_intermediate: int
    shared_intermediate: int = 0
    dense_layers: int = 0  # leading layers that keep a dense MLP (deepseek's first_k_dense_replace)


@dataclass(frozen=True)
class MLASpec:
    """DeepSeek multi-head latent attention; transformers caches the decompressed K and V."""

    kv_lora_rank: int
    q_lora_rank: int | None
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class ModelConfig:
    path: Path
    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_positions: int | None
    tie_word_embeddings: bool
    gated_mlp: bool
    torch_dtype: str | None
    is_decoder: bool
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    quantization: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def check_tensor_parallel(self, tensor_parallel: int) -> None:
        """EstimateInputError unless the attention heads split evenly over `tensor_parallel` ranks, as vLLM,
        Megatron-LM and torch's tensor parallelism all require."""
        if tensor_parallel > 1 and self.num_heads % tensor_parallel:
            divisors = [d for d in range(1, self.num_heads + 1) if self.num_heads % d == 0]
            raise EstimateInputError("--tensor-parallel", f"{tensor_parallel} does not divide the {self.num_heads} "
                                     f"attention heads; use one of {', '.join(map(str, divisors))}")

    def kv_bytes_per_token(self, element_bytes: float, tensor_parallel: int = 1) -> float:
        """K plus V bytes one token adds to the cache, summed over layers, on one tensor-parallel rank."""
        if not self.is_decoder:
            return 0.0
        if self.mla is not None:
            per_layer = self.num_heads * (self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim + self.mla.v_head_dim)
            heads_share = per_layer / max(1, tensor_parallel)
            return self.num_layers * heads_share * element_bytes
        kv_heads = max(1, -(-self.num_kv_heads // max(1, tensor_parallel)))
        return 2 * self.num_layers * kv_heads * self.head_dim * element_bytes


def read_model_config(path: Path | str) -> ModelConfig:
    """The config.json at `path` (a file, or a folder holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise EstimateInputError(path, "missing: the estimators need the model's config.json beside the weights")
    try:
        doc = loads_json(read_text(path, CONFIG_BYTES))
    except (UnreadableFile, json.JSONDecodeError) as exc:
        raise EstimateInputError(path, f"not readable JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise EstimateInputError(path, "is JSON but not an object")
    return parse_model_config(doc, path)


def parse_model_config(doc: dict[str, Any], path: Path) -> ModelConfig:
    if isinstance(doc.get("text_config"), dict) and doc.get("model_type") not in SUPPORTED:
        doc = {**doc["text_config"], "quantization_config": doc.get("quantization_config")}
    model_type = doc.get("model_type")
    if model_type is None:
        raise EstimateInputError(path, "missing; cannot tell the architecture", field="model_type")
    if model_type not in SUPPORTED:
        raise EstimateInputError(
            path, f"unknown architecture {model_type!r}; supported: {', '.join(sorted(SUPPORTED))}", field="model_type"
        )
    if model_type == "distilbert":
        doc = {**doc, "hidden_size": doc.get("dim"), "intermediate_size": doc.get("hidden_dim")}
    hidden = _required(doc, path, "hidden_size")
    layers = _required(doc, path, "num_layers")
    heads = _required(doc, path, "num_heads")
    vocab = _required(doc, path, "vocab_size")
    kv_heads = _kv_heads(doc, model_type, heads, path)
    head_dim = _int(doc, path, "head_dim") or hidden // heads
    intermediate = _first(doc, path, "intermediate_size", "n_inner", "ffn_dim") or 4 * hidden
    tie = doc.get("tie_word_embeddings", model_type in TIED_BY_DEFAULT)
    return ModelConfig(
        path=path,
        model_type=model_type,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=vocab,
        max_positions=_int(doc, path, "max_position_embeddings") or _int(doc, path, "n_positions"),
        tie_word_embeddings=bool(tie),
        gated_mlp=model_type not in NON_GATED,
        torch_dtype=doc.get("torch_dtype") or doc.get("dtype"),
        is_decoder=model_type not in ENCODERS,
        moe=_moe(doc, model_type, intermediate, path),
        mla=_mla(doc, path) if model_type in ("deepseek_v2", "deepseek_v3") else None,
        quantization=dict(doc.get("quantization_config") or {}),
        raw=doc,
    )


def _int(doc: dict, path: Path, name: str) -> int | None:
    value = doc.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EstimateInputError(path, f"{value!r} is not a non-negative integer", field=name)
    return value


def _first(doc: dict, path: Path, *names: str) -> int | None:
    for name in names:
        value = _int(doc, path, name)
        if value:
            return value
    return None


def _required(doc: dict, path: Path, quantity: str) -> int:
    zero = None
    for name in _ALIASES[quantity]:
        value = _int(doc, path, name)
        if value:
            return value
        if value == 0 and zero is None:
            zero = name
    if zero is not None:
        raise EstimateInputError(path, "is 0; it must be at least 1", field=zero)
    raise EstimateInputError(path, f"missing (looked for {', '.join(_ALIASES[quantity])})", field=_ALIASES[quantity][0])


def _kv_heads(doc: dict, model_type: str, heads: int, path: Path) -> int:
    if model_type == "gpt_bigcode":
        return 1 if doc.get("multi_query", True) else heads
    if model_type == "falcon" and doc.get("multi_query") and not doc.get("new_decoder_architecture"):
        return 1
    kv = _int(doc, path, "num_key_value_heads") or _int(doc, path, "num_kv_heads") or heads
    if heads % kv:
        raise EstimateInputError(path, f"{kv} does not divide num_attention_heads={heads}", field="num_key_value_heads")
    return kv


def _moe(doc: dict, model_type: str, intermediate: int, path: Path) -> MoESpec | None:
    if model_type not in MOE:
        return None
    experts = _first(doc, path, "num_local_experts", "num_experts", "n_routed_experts")
    per_token = _int(doc, path, "num_experts_per_tok")
    if not experts or not per_token:
        raise EstimateInputError(path, "MoE architecture without expert counts", field="num_experts_per_tok")
    expert_inter = _int(doc, path, "moe_intermediate_size") or intermediate
    shared = _int(doc, path, "shared_expert_intermediate_size") or 0
    if model_type.startswith("deepseek"):
        shared = (_int(doc, path, "n_shared_experts") or 0) * expert_inter
    return MoESpec(experts, per_token, expert_inter, shared, _int(doc, path, "first_k_dense_replace") or 0)


def _mla(doc: dict, path: Path) -> MLASpec:
    return MLASpec(
        kv_lora_rank=_int(doc, path, "kv_lora_rank") or 512,
        q_lora_rank=_int(doc, path, "q_lora_rank"),
        qk_nope_head_dim=_int(doc, path, "qk_nope_head_dim") or 128,
        qk_rope_head_dim=_int(doc, path, "qk_rope_head_dim") or 64,
        v_head_dim=_int(doc, path, "v_head_dim") or 128,
    )
