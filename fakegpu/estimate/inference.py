"""Inference memory of a Hugging Face-style generate(): prefill, then decode, on one tensor-parallel rank.

The model follows eager PyTorch: every tensor below is one that transformers' modelling code materialises at
the moment of the phase's peak (the last layer of prefill, the last step of decode), with the caching
allocator's rounding and segments on top, and the CUDA context and library buffers outside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from fakegpu.estimate import runtime
from fakegpu.estimate.dtypes import element_bytes
from fakegpu.estimate.model_config import ModelConfig
from fakegpu.estimate.reserved import load_fit
from fakegpu.estimate.weights import WeightSummary
from fakegpu.profiles.workspace_profiles import Overheads

ATTENTION = ("sdpa", "eager", "flash")
LOGITS = ("last", "all")
# Routing is never perfectly balanced; the busiest expert sees this multiple of the mean token share.
EXPERT_IMBALANCE = 2.0


@dataclass(frozen=True)
class InferenceOptions:
    batch_size: int = 1
    prompt_tokens: int = 128
    generated_tokens: int = 128
    dtype: str = "BF16"  # activations (and unquantized weights, when cast)
    kv_cache_dtype: str | None = None  # None: the activation dtype
    attention: str = "sdpa"
    tensor_parallel: int = 1
    logits: str = "last"  # transformers >= 4.45 computes prefill logits for the last token only


@dataclass(frozen=True)
class LoadedModel:
    """What stays resident once the model is on the device, per rank."""

    config: ModelConfig
    weights: WeightSummary
    weights_allocated: int
    weights_reserved: int
    overheads: Overheads  # the context and cuBLAS workspace for the target GPU and software stack

    @property
    def compute_capability(self) -> tuple[int, int]:
        return self.overheads.compute_capability


def _mlp(cfg: ModelConfig, tokens: int, a: float, tp: int) -> float:
    """Peak of one MLP block: gate and up projections alive with their product (or fc and its activation)."""
    if cfg.moe is None:
        copies = 3 if cfg.gated_mlp else 2
        return copies * tokens * cfg.intermediate_size / tp * a
    moe = cfg.moe
    busiest = min(tokens, ceil(tokens * moe.experts_per_token / moe.num_experts * EXPERT_IMBALANCE))
    experts = 3 * busiest * moe.expert_intermediate / tp * a
    router = tokens * moe.num_experts * 4  # router logits, softmaxed in fp32
    expert_mask = tokens * moe.experts_per_token * moe.num_experts * 8  # one_hot(...) is int64
    combined = tokens * cfg.hidden_size * a  # the zero-initialised output the experts scatter into
    shared = 3 * tokens * moe.shared_intermediate / tp * a
    return experts + router + expert_mask + combined + shared


def _attention(cfg: ModelConfig, batch: int, q_len: int, kv_len: int, a: float, tp: int, kind: str) -> float:
    heads = cfg.num_heads / tp
    kv_heads = max(1, ceil(cfg.num_kv_heads / tp))
    q_dim = cfg.head_dim
    if cfg.mla is not None:
        q_dim = cfg.mla.qk_nope_head_dim + cfg.mla.qk_rope_head_dim
    projections = batch * q_len * (heads * q_dim + 2 * kv_heads * cfg.head_dim) * a
    rotated = batch * q_len * (heads + kv_heads) * q_dim * a
    out = batch * q_len * heads * cfg.head_dim * a
    if kind == "flash":
        return projections + rotated + out
    # sdpa and eager expand grouped K/V to every query head (repeat_kv) before the kernel sees them.
    expanded = 0 if kv_heads == heads else 2 * batch * kv_len * heads * cfg.head_dim * a
    if kind == "sdpa":
        return projections + rotated + expanded + out
    # eager: scores, their fp32 softmax and the cast back are alive together.
    scores = batch * heads * q_len * kv_len * (2 * a + 4)
    return projections + rotated + expanded + scores + out


def _layer_peak(cfg: ModelConfig, batch: int, q_len: int, kv_len: int, a: float, tp: int, kind: str) -> float:
    residual = 2 * batch * q_len * cfg.hidden_size * a  # the residual stream and its normalised copy
    tokens = batch * q_len
    return residual + max(_attention(cfg, batch, q_len, kv_len, a, tp, kind), _mlp(cfg, tokens, a, tp))


def _logits(cfg: ModelConfig, batch: int, positions: int, a: float) -> float:
    # The lm_head output in the model dtype, then the fp32 copy generate() takes for the logits processors.
    return batch * positions * cfg.vocab_size * (a + 4) + batch * positions * cfg.hidden_size * a


def phase_components(model: LoadedModel, opts: InferenceOptions) -> dict[str, dict[str, int]]:
    """Allocated bytes by component at the peak of each phase."""
    cfg = model.config
    a = element_bytes(opts.dtype)
    kv_token = cfg.kv_bytes_per_token(element_bytes(opts.kv_cache_dtype or opts.dtype), opts.tensor_parallel)
    tp = opts.tensor_parallel
    b, prompt = opts.batch_size, opts.prompt_tokens
    workspace = model.overheads.cublas_workspace_bytes()
    load = {"weights": model.weights_allocated}
    if not cfg.is_decoder:
        return {"load": load, "forward": {"weights": model.weights_allocated, "cublas_workspace": workspace}}
    logit_positions = prompt if opts.logits == "all" else 1
    prefill_layer = _layer_peak(cfg, b, prompt, prompt, a, tp, opts.attention)
    prefill_logits = _logits(cfg, b, logit_positions, a)
    prefill = {
        "weights": model.weights_allocated,
        "kv_cache": runtime.round_alloc(int(b * prompt * kv_token)),
        "activations": runtime.round_alloc(int(prefill_layer)) if prefill_layer >= prefill_logits else 0,
        "logits": runtime.round_alloc(int(prefill_logits)) if prefill_logits > prefill_layer else 0,
        "cublas_workspace": workspace,
    }
    phases = {"load": load, "prefill": prefill}
    if opts.generated_tokens > 1:
        cached = prompt + opts.generated_tokens - 1  # the last sampled token is never fed back
        # DynamicCache grows by torch.cat: one layer's new K (or V) exists beside the old one for a moment.
        growth = b * cached * kv_token / (2 * cfg.num_layers)
        step_layer = _layer_peak(cfg, b, 1, cached, a, tp, opts.attention) + growth
        step_logits = _logits(cfg, b, 1, a)
        phases["decode"] = {
            "weights": model.weights_allocated,
            "kv_cache": runtime.round_alloc(int(b * cached * kv_token)),
            "activations": runtime.round_alloc(int(step_layer)) if step_layer >= step_logits else 0,
            "logits": runtime.round_alloc(int(step_logits)) if step_logits > step_layer else 0,
            "cublas_workspace": workspace,
        }
    return phases


def phase_totals(model: LoadedModel, opts: InferenceOptions) -> dict[str, dict]:
    """Per phase: components, and the predicted max_memory_allocated / max_memory_reserved / nvidia-smi used."""
    context = model.overheads.non_pytorch_bytes()
    other = runtime.nccl_bytes(opts.tensor_parallel)
    terms = load_fit().for_kind("inference")
    out = {}
    for phase, parts in phase_components(model, opts).items():
        allocated = sum(parts.values())
        transient = allocated - model.weights_allocated
        # The load phase holds the weights alone; every other step's temporaries are held as the native-mode fit of
        # inference steps says (reserved.py), the small-block pool's segments included in its constant.
        held = terms.held(transient) if phase != "load" else 0
        reserved = runtime.round_up(model.weights_reserved + held, runtime.LARGE_ROUND)
        out[phase] = {
            "components": parts,
            "max_memory_allocated": allocated,
            "max_memory_reserved": reserved,
            "nvidia_smi_used": reserved + context + other,
        }
    return out


def peak_of(phases: dict[str, dict]) -> dict:
    name = max(phases, key=lambda p: (phases[p]["max_memory_reserved"], phases[p]["max_memory_allocated"]))
    top = phases[name]
    return {
        "phase": name,
        "max_memory_allocated": max(p["max_memory_allocated"] for p in phases.values()),
        "max_memory_reserved": top["max_memory_reserved"],
        "nvidia_smi_used": top["nvidia_smi_used"],
    }
