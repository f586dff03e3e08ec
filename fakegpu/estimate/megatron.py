"""Megatron-LM training memory per pipeline stage: tensor, sequence and pipeline parallelism, the distributed
optimizer, selective or full recomputation, 1F1B and interleaved schedules.

Activations follow Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
(arXiv 2205.05198, section 4 and Table 2): per layer and micro-batch, with s tokens, b sequences, h hidden, a heads,
t tensor-parallel ranks, 16-bit activations:
- no parallelism: sbh(34 + 5as/h); with TP: sbh(10 + 24/t + 5as/(ht)); with TP+SP: sbh/t(34 + 5as/h);
- selective recomputation drops the 5as^2b attention-score term (so does a fused/flash attention kernel, which never
  materialises the scores); full recomputation keeps each layer's input, 2sbh (/t with SP), and rebuilds one
  layer at a time in backward;
- the 34 splits into 10 outside the tensor-parallel regions (two norm inputs 4, the QKV and MLP inputs 2 + 2, two
  dropout masks 1 + 1) and 24 inside (Q, K 4, V 2, the projection input 2, the MLP's two 4h-wide tensors 16). We
  keep that split but size each tensor from the model's shapes (GQA's narrower K/V, SwiGLU's gate|up and product:
  6f instead of 4f), so the formula is the paper's exactly for GPT-style MHA + GeLU models.
- embeddings: int64 token ids 8sb and the embedding dropout mask sbh (/t with SP) per micro-batch in flight; the
  last stage adds the final norm and output-layer inputs 4sbh (/t with SP) and the logits: the 16-bit output
  [s, b, v/t] alive while the loss makes its fp32 copy (Megatron's vocab-parallel cross entropy works in place on
  that copy and keeps it, the softmax, for backward): 6sbv/t.
The unfused (local) attention also holds one persistent b x a/t x s x s buffer for QK^T (Megatron's global memory
buffer), whatever the recomputation.
Pipeline schedules (Megatron-LM's schedules.py): under 1F1B stage i runs pp - i warm-up forwards before its first
backward, so it holds min(pp - i, m) micro-batches of its L/pp layers (m = micro-batches per step); the interleaved
schedule with v model chunks per stage holds (pp - i - 1) * 2 + (v - 1) * pp + 1 chunk activations of L/(pp v)
layers each, which on the first stage is the paper's (1 + (pp - 1)/(pp v)) x the 1F1B figure.
Model states (Megatron-LM's theoretical_memory_usage.py and its DistributedOptimizer): bf16 params 2 + fp32 main
grads 4 + fp32 master weights 4 + Adam m, v 8 = 18 bytes per parameter; the distributed optimizer shards the 12
bytes of master weights and Adam states over the data-parallel ranks (6 + 12/d). Under --fp16 the gradient buffer
stays fp16 (accumulate_allreduce_grads_in_fp32 defaults off; --bf16 turns it on) and the optimizer step makes fp32
copies of the gradients. Each stage holds L/pp layers / t, the first stage the word (and position) embeddings,
the last the output layer (untied) or its copy of the shared embedding (tied, pp > 1); the vocabulary is padded
to a multiple of 128 x t (--make-vocab-size-divisible-by).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.model_config import ModelConfig
from fakegpu.estimate.safetensors_header import Checkpoint
from fakegpu.estimate.training_activations import version_tuple
from fakegpu.estimate.weights import classify
from fakegpu.profiles.matching import did_you_mean

if TYPE_CHECKING:  # training imports this module; the options type is only named here
    from fakegpu.estimate.training import TrainingOptions

RECOMPUTE = ("none", "selective", "full")
PP_SCHEDULES = ("1f1b", "interleaved")
# fused: flash or cuDNN fused attention (Transformer Engine's default where the GPU has it) saves no score matrix;
# unfused: Megatron's local implementation (and TE's fallback) saves softmax output, dropout mask and output.
ATTENTION = ("fused", "unfused")
VOCAB_DIVISOR = 128  # Megatron's --make-vocab-size-divisible-by default
MEGATRON_PRECISIONS = ("bf16-mixed", "fp16-mixed", "fp32")
MEGATRON_OPTIMIZERS = ("adamw", "sgd")
# NVIDIA/Megatron-LM commit 9634c0e4 ("Reduce logit memory pressure by using in-place operation", June 2024, first
# in core_r0.8.0): the vocab-parallel cross entropy subtracts the max in place on its fp32 copy of the logits.
INPLACE_LOSS = (0, 8, 0)


@dataclass(frozen=True)
class Embeddings:
    """Parameters of the input embedding (word, position) and of an untied output layer, as stored."""

    word: int
    position: int
    head: int


def split_embeddings(ckpt: Checkpoint) -> Embeddings:
    names = set(ckpt.tensors)
    word = position = head = 0
    for t in ckpt.tensors.values():
        if classify(t, names) in ("meta", "buffer"):
            continue
        if t.name.startswith("lm_head.") or ".lm_head." in t.name:
            head += t.numel
        elif ".wpe." in t.name or "position_embedding" in t.name:
            position += t.numel
        elif "embed" in t.name or ".wte." in t.name:
            word += t.numel
    return Embeddings(word, position, head)


def padded_vocab(vocab: int, tp: int) -> int:
    step = VOCAB_DIVISOR * tp
    return -(-vocab // step) * step


def validate(o: TrainingOptions) -> None:
    """What only Megatron runs accept, and what they cannot be combined with."""
    for name, allowed in (("recompute", RECOMPUTE), ("pp_schedule", PP_SCHEDULES), ("attention", ATTENTION)):
        value = getattr(o, name)
        if value not in allowed:
            hint = did_you_mean(str(value), allowed, quote=False)
            raise EstimateInputError(f"--{name.replace('_', '-')}",
                                     f"unknown value {value!r}{hint}; use {', '.join(allowed)}")
    if o.virtual_stages < 1:
        raise EstimateInputError("--virtual-stages", "must be at least 1")
    if o.global_batch is not None and o.global_batch < 1:
        raise EstimateInputError("--global-batch", "must be at least 1")
    megatron_only = {"sequence_parallel": o.sequence_parallel, "distributed_optimizer": o.distributed_optimizer,
                     "recompute": o.recompute != "none", "pp_schedule": o.pp_schedule != "1f1b",
                     "virtual_stages": o.virtual_stages != 1, "attention": o.attention != "fused",
                     "global_batch": o.global_batch is not None}
    if o.framework != "megatron":
        used = [k for k, v in megatron_only.items() if v]
        if used:
            flags = ", ".join(f"--{k.replace('_', '-')}" for k in used)
            raise EstimateInputError(flags.split(", ")[0],
                                     f"only Megatron-LM runs use {flags}; add --framework megatron")
        return
    if o.method != "full":
        raise EstimateInputError("--method", "--framework megatron models full training only; use --method full")
    if o.zero or o.fsdp != "none" or o.offload != "none":
        raise EstimateInputError("--framework", "Megatron shards optimizer states with --distributed-optimizer, "
                                 "not ZeRO/FSDP/offload; drop --zero/--fsdp/--offload")
    if o.precision not in MEGATRON_PRECISIONS:
        raise EstimateInputError("--precision", f"Megatron trains in {', '.join(MEGATRON_PRECISIONS)} "
                                 "(--bf16, --fp16, neither); use one of them")
    if o.optimizer not in MEGATRON_OPTIMIZERS:
        raise EstimateInputError("--optimizer", f"Megatron's optimizers are {', '.join(MEGATRON_OPTIMIZERS)}")
    if o.sequence_parallel and o.tensor_parallel == 1:
        raise EstimateInputError("--sequence-parallel", "splits along the tensor-parallel group; needs "
                                 "--tensor-parallel 2 or more")
    if o.pp_schedule == "interleaved":
        if o.pipeline_parallel < 2:
            raise EstimateInputError("--pp-schedule", "interleaved needs --pipeline-parallel 2 or more")
        if o.virtual_stages < 2:
            raise EstimateInputError("--virtual-stages", "the interleaved schedule needs 2 or more model chunks "
                                     "per stage")
    elif o.virtual_stages != 1:
        raise EstimateInputError("--virtual-stages", "only the interleaved schedule has virtual stages; "
                                 "add --pp-schedule interleaved")
    if o.global_batch is not None and o.global_batch % (o.micro_batch * o.data_parallel):
        raise EstimateInputError("--global-batch", f"must be a multiple of micro-batch x data-parallel ranks "
                                 f"({o.micro_batch} x {o.data_parallel})")


def microbatches(o: TrainingOptions) -> int:
    """Micro-batches per optimizer step on each pipeline; without --global-batch, as many as stages (the
    pipeline full, the 1F1B peak)."""
    if o.global_batch is None:
        return o.pipeline_parallel
    return o.global_batch // (o.micro_batch * o.data_parallel)


def stage_layers(num_layers: int, pp: int) -> list[int]:
    base, extra = divmod(num_layers, pp)
    return [base + (1 if i < extra else 0) for i in range(pp)]


def in_flight(o: TrainingOptions, stage: int, m: int) -> float:
    """Micro-batches of this stage's layers whose activations are alive at once (in layer-sets of the stage)."""
    pp, v = o.pipeline_parallel, o.virtual_stages
    if pp == 1:
        return 1.0
    if o.pp_schedule == "interleaved":
        chunks = min(m * v, (pp - stage - 1) * 2 + (v - 1) * pp + 1)
        return chunks / v
    return float(min(pp - stage, m))


def layer_activation_bytes(cfg: ModelConfig, o: TrainingOptions) -> tuple[float, float]:
    """(bytes one layer saves for backward per micro-batch, bytes of its input kept under full recomputation)."""
    s, b, h, t = o.seq_len, o.micro_batch, cfg.hidden_size, o.tensor_parallel
    sb = s * b
    q = cfg.num_heads * cfg.head_dim
    kv = cfg.num_kv_heads * cfg.head_dim
    f = cfg.intermediate_size
    replicated = 10 * h  # norm inputs 2 x 2h, QKV and MLP inputs 2h + 2h, two dropout masks h + h
    split = 2 * q + 2 * kv + 2 * kv + 2 * q + (6 if cfg.gated_mlp else 4) * f
    if o.attention == "unfused" and o.recompute == "none":
        split += 5 * cfg.num_heads * s  # softmax output 2as^2b, dropout mask as^2b, dropout output 2as^2b
    sp = t if o.sequence_parallel else 1
    full = sb * (replicated / sp + split / t)
    return full, sb * 2 * h / sp


def _bytes_per_param(o: TrainingOptions) -> dict[str, float]:
    """Per-parameter bytes of each model state on one rank (before the distributed optimizer's sharding), and of
    what the optimizer step allocates on top."""
    adam = 8 if o.optimizer == "adamw" else 4
    # Without Transformer Engine and apex, Megatron's optimizer falls back to torch.optim.AdamW, whose foreach step
    # takes the square root of every exp_avg_sq into a new list of fp32 tensors (_multi_tensor_adamw).
    foreach = 4 if o.optimizer == "adamw" and o.fused_adam is False else 0
    if o.precision == "fp32":
        return {"weights": 4, "gradients": 4, "master": 0, "states": adam, "step_grads": 0, "step_foreach": foreach}
    grads = 4 if o.precision == "bf16-mixed" else 2
    # fp16 keeps 16-bit gradients and gives the optimizer fp32 copies at the step (main_param.grad = .float())
    return {"weights": 2, "gradients": grads, "master": 4, "states": adam, "step_grads": 4 if grads == 2 else 0,
            "step_foreach": foreach}


def logits_factor(o: TrainingOptions) -> int:
    """Bytes per logit alive at the loss: the 16-bit output, its fp32 copy, and before megatron-core 0.8 the
    max-subtracted second fp32 copy."""
    return 6 if version_tuple(o.megatron_core) >= INPLACE_LOSS else 10


def stage_params(ckpt: Checkpoint, cfg: ModelConfig, groups: dict[str, int], o: TrainingOptions) -> list[float]:
    """Parameters one rank of each pipeline stage holds."""
    t, pp = o.tensor_parallel, o.pipeline_parallel
    emb = split_embeddings(ckpt)
    vocab_scale = padded_vocab(cfg.vocab_size, t) / cfg.vocab_size
    word = emb.word * vocab_scale / t
    head = emb.head * vocab_scale / t
    per_layer = (groups["linear"] / t + groups["other"]) / max(1, cfg.num_layers)
    out = []
    for i, n in enumerate(stage_layers(cfg.num_layers, pp)):
        p = n * per_layer
        if i == 0:
            p += word + emb.position
        if i == pp - 1:
            p += head if head else (word if pp > 1 else 0)
        out.append(p)
    return out


def stage_memory(ckpt: Checkpoint, cfg: ModelConfig, groups: dict[str, int], o: TrainingOptions,
                 workspace: int) -> list[dict[str, dict[str, float]]]:
    """For each pipeline stage, the components of each phase on one of its ranks."""
    pp, t, d = o.pipeline_parallel, o.tensor_parallel, o.data_parallel
    sp = t if o.sequence_parallel else 1
    s, b = o.seq_len, o.micro_batch
    m = microbatches(o)
    bpp = _bytes_per_param(o)
    shard = d if o.distributed_optimizer else 1
    layer, layer_input = layer_activation_bytes(cfg, o)
    embed_acts = 8 * s * b + s * b * cfg.hidden_size / sp  # token ids (int64) and the embedding dropout mask
    vocab = padded_vocab(cfg.vocab_size, t)
    logits = logits_factor(o) * s * b * vocab / t
    # In backward the loss's saved fp32 softmax becomes the logits' gradient in place, and its 16-bit cast feeds the
    # output layer's backward; under full recomputation the last layer is rebuilt only after that has been freed.
    recomputed = layer if o.recompute == "full" else 0.0
    logits_grad = max(0.0, 6 * s * b * vocab / t - recomputed)
    head_inputs = 4 * s * b * cfg.hidden_size / sp
    layers = stage_layers(cfg.num_layers, pp)
    # The unfused attention's QK^T goes into Megatron's GlobalMemoryBuffer ("mpu"), allocated on first use and held
    # for the run (megatron/core/transformer/dot_product_attention.py, legacy CoreAttention alike): b x a/t x s x s.
    scores_buffer = (b * cfg.num_heads / t * s * s * (4 if o.precision == "fp32" else 2)
                     if o.attention == "unfused" else 0.0)
    out = []
    for i, params in enumerate(stage_params(ckpt, cfg, groups, o)):
        flight = in_flight(o, i, m)
        kept = layer_input if o.recompute == "full" else layer
        activations = kept * layers[i] * flight + (embed_acts * flight if i == 0 else 0)
        last = i == pp - 1
        weights = params * bpp["weights"]
        optimizer = params * (bpp["master"] + bpp["states"]) / shard
        grads = params * bpp["gradients"]
        states = {"weights": weights, "optimizer_states": optimizer}
        out.append({
            "load": {"weights": weights},
            "forward": {**states, "gradients": grads, "attention_score_buffer": scores_buffer,
                        "activations": activations,
                        "output_layer_inputs": head_inputs if last else 0.0, "logits": logits if last else 0.0,
                        "cublas_workspace": workspace},
            "backward": {**states, "gradients": grads, "attention_score_buffer": scores_buffer,
                         # full recomputation rebuilds one layer at a time: its whole activation set, once
                         "activations": activations, "recomputed_layer": recomputed,
                         "output_layer_inputs": head_inputs if last else 0.0,
                         "logits": logits_grad if last else 0.0, "cublas_workspace": workspace},
            "optimizer_step": {**states, "gradients": grads, "attention_score_buffer": scores_buffer,
                               "step_temporaries": params * (bpp["step_grads"] + bpp["step_foreach"]) / shard,
                               "cublas_workspace": workspace},
        })
    return out


def assumptions(cfg: ModelConfig, o: TrainingOptions) -> dict:
    """What the Megatron estimate assumed, in the report so a user sees it."""
    m = microbatches(o)
    first = in_flight(o, 0, m)
    return {
        "tensor_parallel": o.tensor_parallel,
        "pipeline_parallel": o.pipeline_parallel,
        "data_parallel": o.data_parallel,
        "sequence_parallel": o.sequence_parallel,
        "distributed_optimizer": o.distributed_optimizer,
        "optimizer_shards": o.data_parallel if o.distributed_optimizer else 1,
        "recompute": o.recompute,
        "attention": o.attention,
        "attention_scores_kept": o.attention == "unfused" and o.recompute == "none",
        "pp_schedule": o.pp_schedule,
        "virtual_stages": o.virtual_stages,
        "micro_batch": o.micro_batch,
        "global_batch": o.global_batch,
        "microbatches_per_step": m,
        "microbatches_from": "global batch" if o.global_batch is not None else "assumed = pipeline stages",
        "first_stage_in_flight": first,
        "padded_vocab": padded_vocab(cfg.vocab_size, o.tensor_parallel),
        "gradient_bytes_per_param": _bytes_per_param(o)["gradients"],
        "optimizer_impl": ("FusedAdam (Transformer Engine or apex)" if o.fused_adam is not False
                           else "torch.optim.AdamW (foreach)"),
        "megatron_core": o.megatron_core,
        "logits_bytes_per_element": logits_factor(o),
        "activation_source": "Korthikanti et al. 2022 Table 2, sized from the model's shapes",
    }


def interleaved_penalty(pp: int, v: int) -> float:
    """The paper's first-stage factor for the interleaved schedule (for the report and tests)."""
    return 1 + (pp - 1) / (pp * v)

