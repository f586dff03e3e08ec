"""What training recipes switch on, and the memory term each one changes.

Every feature is a plan-training option; each term below names the code whose behaviour it counts. The dev-set rows
in the "recipes" category (torchtune's README 'Optimization flags' table, Llama 3.2 3B on an A100, each feature
added on top of the previous one) pin them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fakegpu.estimate.model_config import ModelConfig

if TYPE_CHECKING:  # training imports this module; the options type is only needed for hints
    from fakegpu.estimate.training import TrainingOptions

# How the loss meets the vocabulary:
# - full: the head's half-precision logits, their fp32 upcast and the log-softmax of all tokens at once;
# - chunked: torchtune's CEWithChunkedOutputLoss (num_output_chunks=8): the head emits 8 half-precision chunks that
#   stay alive for backward, and only one chunk at a time is upcast and log-softmaxed in fp32;
# - fused: the head's matmul and the loss run chunk by chunk and no full-vocabulary logits exist at all (Liger's
#   FusedLinearCrossEntropy, Apple's Cut Cross-Entropy, torchtune's LinearCrossEntropyLoss, unsloth's fused CE).
LOSSES = ("full", "chunked", "fused")
CE_CHUNKS = 8
# bitsandbytes' paged optimizers allocate their states with cudaMallocManaged (functional.get_paged): unified memory
# that the driver pages to the CPU under pressure and that torch's caching allocator never sees.
PAGED_OPTIMIZERS = ("paged-adamw", "paged-adamw-8bit")


def logits_bytes(tokens: int, vocab: int, a: int, loss: str, compiled: bool = False) -> float:
    """Bytes the loss holds at its peak for `tokens` positions (`a`: bytes of the half-precision logits).

    `compiled`: torchtune compiles the loss with the model (training.compile_loss); inductor fuses a chunk's fp32
    upcast, log-softmax and gather into one kernel that keeps only a logsumexp per row, so no fp32 chunk exists.
    """
    if loss == "chunked":
        return tokens * vocab * a + (0 if compiled else tokens / CE_CHUNKS * vocab * 8)
    if loss == "fused":
        return tokens / CE_CHUNKS * vocab * (a + 8)
    return tokens * vocab * (a + 8)


def compile_saving(cfg: ModelConfig, a: int, r: int, tp: int) -> float:
    """Bytes per token per layer that torch.compile's fused kernels do not save and eager PyTorch does.

    Inductor's fused RMSNorm keeps its half-precision input and a per-row rstd, not eager's fp32 upcast of the input
    (LlamaRMSNorm / torchtune RMSNorm run `x.float()` and the backward reads it): two norms per layer go from
    4*h*r to 2*h*a. The gated MLP's silu(gate) is recomputed inside the fused silu*up backward instead of being
    saved: one intermediate-wide tensor less.
    """
    h = cfg.hidden_size
    norms = max(0.0, 4 * h * r - 2 * h * a)
    width = (cfg.moe.expert_intermediate * cfg.moe.experts_per_token + cfg.moe.shared_intermediate
             if cfg.moe else cfg.intermediate_size)
    silu = width / tp * a if cfg.gated_mlp else 0.0
    return norms + silu


def assumptions(o: TrainingOptions) -> dict:
    """What the recipe options made the plan assume, for the report (each with the code it follows)."""
    out: dict = {
        "loss": {"full": "whole-vocabulary logits, fp32 upcast and log-softmax at once",
                 "chunked": ("CEWithChunkedOutputLoss, compiled: half-precision logits kept, each chunk's fp32 "
                             "upcast fused away" if o.compile else
                             f"CEWithChunkedOutputLoss: half-precision logits kept, one of {CE_CHUNKS} chunks in fp32"),
                 "fused": "fused linear + cross-entropy: no full-vocabulary logits, one chunk at a time"}[o.loss],
        "compile": ("torch.compile: fused norms keep their half-precision input, silu(gate) recomputed"
                    if o.compile else "eager: norms keep fp32 upcasts, silu output saved"),
        "activation_offloading": ("saved activations copied to CPU on a side stream; one layer's stay on the GPU "
                                  "(torchtune OffloadActivations)" if o.activation_offloading else "off"),
        "optimizer_in_backward": ("each parameter's step runs in its gradient hook and frees the gradient: only the "
                                  "largest gradient and no step temporaries are alive" if o.optimizer_in_backward
                                  else "off"),
        "optimizer_states": {"adamw": "2 states per trainable parameter in its dtype",
                             "adamw-8bit": "bitsandbytes/torchao 8-bit: 2 bytes per parameter",
                             "paged-adamw": "bitsandbytes paged: states in unified memory, outside the allocator",
                             "paged-adamw-8bit": "bitsandbytes paged 8-bit: states in unified memory, outside the "
                                                 "allocator",
                             "sgd": "1 state per parameter", "adafactor": "factored second moments"}[o.optimizer],
        "step_temporaries": ("none (fused AdamW kernel)" if o.fused_adam is True or o.optimizer_in_backward
                             else "torch.optim foreach: one parameter-sized temporary"
                             if o.optimizer in ("adamw", "sgd") else "none"),
        "sample_packing": ("every micro-batch is seq_len real tokens (packed)" if o.packed else
                           "sequences padded to seq_len (the worst batch); packing makes this exact"),
        "batch_lengths": ("vary step to step (padded per batch): reserved memory from the fit's training_varying "
                          "terms, which hold blocks cut for earlier steps' sizes" if o.varying_lengths else
                          "the same every step (packed or padded to seq_len); batches padded per batch to their "
                          "own longest sequence reserve more: --varying-lengths"),
    }
    return out
