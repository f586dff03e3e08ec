"""The workloads the reserved-memory fit is made from: Llama-shaped decoders of three sizes, trained and served.

Sizes span the allocator's pools: the small model's norm weights, biases and per-token tensors go to the small pool
(requests up to 1 MiB, 2 MiB segments), mid requests (1-10 MiB) to 20 MiB segments, and the 1B model's weights,
activations and logits to segments of their own (rounded to 2 MiB). Training covers full fine-tuning in bf16 and
in fp32 with bf16 autocast, LoRA on q/v and on every linear layer, each with and without gradient checkpointing;
training with batches of varying length (padded per batch, as without sample packing) has its own terms;
inference covers prompts from 64 to 4096 tokens, batches 1 to 64, decode loops that grow a DynamicCache (up to
512 tokens), and prompt scoring with logits at every position.
"""

from __future__ import annotations

VOCAB = 32000
MODELS = {
    "s": {"hidden": 512, "intermediate": 1408, "layers": 4, "heads": 8, "vocab": VOCAB},  # ~50M parameters
    "m": {"hidden": 1024, "intermediate": 2816, "layers": 8, "heads": 16, "kv_heads": 8, "vocab": VOCAB},  # ~0.2B
    "l": {"hidden": 2048, "intermediate": 5632, "layers": 16, "heads": 16, "vocab": VOCAB},  # ~1B (TinyLlama-like)
}
QV = {"rank": 16, "targets": ["q_proj", "v_proj"]}
ALL_LINEAR = {"rank": 8, "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}


def _train(name: str, model: str, precision: str, batch: int, seq: int, gc: bool = False,
           lora: dict | None = None) -> dict:
    spec = {"name": name, "kind": "training", "model": MODELS[model], "precision": precision, "batch": batch,
            "seq": seq, "grad_checkpointing": gc, "steps": 2}
    return spec | ({"lora": lora} if lora else {})


def _varying(name: str, model: str, precision: str, batch: int, seq: int, gc: bool = False,
             lora: dict | None = None) -> dict:
    """A training run whose batches are padded to their own longest sequence (no packing), so each step's tensors
    have another size and the allocator holds blocks cut for earlier steps. Reserved memory stops growing within
    about ten steps here (and on Llama-2-7B's shapes); 24 leave a margin."""
    return _train(name, model, precision, batch, seq, gc, lora) | {"lengths": "varying", "steps": 24}


def _infer(name: str, model: str, batch: int, seq: int, new_tokens: int, logits: str = "last") -> dict:
    """`logits`: "last" as generate() asks for (the prompt's last position), "all" as scoring a prompt does."""
    return {"name": name, "kind": "inference", "model": MODELS[model], "batch": batch, "seq": seq,
            "new_tokens": new_tokens, "logits": logits}


FULL = [
    _train("s-full-bf16-b1-s128", "s", "bf16", 1, 128),
    _train("s-full-bf16-b4-s512", "s", "bf16", 4, 512),
    _train("m-full-bf16-b4-s1024", "m", "bf16", 4, 1024),
    _train("m-full-bf16-b8-s1024-gc", "m", "bf16", 8, 1024, gc=True),
    _train("m-full-amp-b2-s1024", "m", "amp", 2, 1024),
    _train("l-full-bf16-b1-s2048", "l", "bf16", 1, 2048),
    _train("l-full-bf16-b4-s2048-gc", "l", "bf16", 4, 2048, gc=True),
    _train("l-full-amp-b2-s1024-gc", "l", "amp", 2, 1024, gc=True),
    _train("m-lora-qv-b4-s1024", "m", "bf16", 4, 1024, lora=QV),
    _train("m-lora-qv-b8-s2048-gc", "m", "bf16", 8, 2048, gc=True, lora=QV),
    _train("l-lora-qv-b2-s2048", "l", "bf16", 2, 2048, lora=QV),
    _train("l-lora-qv-b8-s2048-gc", "l", "bf16", 8, 2048, gc=True, lora=QV),
    _train("l-lora-all-b4-s1024", "l", "bf16", 4, 1024, lora=ALL_LINEAR),
    _train("l-lora-all-b2-s4096-gc", "l", "bf16", 2, 4096, gc=True, lora=ALL_LINEAR),
    _train("s-full-amp-b8-s1024-gc", "s", "amp", 8, 1024, gc=True),
    _train("m-full-bf16-b2-s2048-gc", "m", "bf16", 2, 2048, gc=True),
    _train("l-full-bf16-b2-s1024", "l", "bf16", 2, 1024),
    _train("l-full-bf16-b1-s4096-gc", "l", "bf16", 1, 4096, gc=True),
    _train("s-lora-all-b16-s512", "s", "bf16", 16, 512, lora=ALL_LINEAR),
    _train("m-lora-all-b16-s1024-gc", "m", "bf16", 16, 1024, gc=True, lora=ALL_LINEAR),
    _train("l-lora-qv-b4-s1024", "l", "bf16", 4, 1024, lora=QV),
    _train("l-lora-qv-b1-s4096-gc", "l", "bf16", 1, 4096, gc=True, lora=QV),
    _train("l-lora-all-b16-s2048-gc", "l", "bf16", 16, 2048, gc=True, lora=ALL_LINEAR),
    _train("l-lora-qv-amp-b4-s2048-gc", "l", "amp", 4, 2048, gc=True, lora=QV),
    _varying("s-full-bf16-b4-s512-var", "s", "bf16", 4, 512),
    _varying("m-full-bf16-b4-s1024-var", "m", "bf16", 4, 1024),
    _varying("m-full-bf16-b8-s1024-gc-var", "m", "bf16", 8, 1024, gc=True),
    _varying("l-full-bf16-b2-s1024-gc-var", "l", "bf16", 2, 1024, gc=True),
    _varying("m-lora-qv-b4-s1024-var", "m", "bf16", 4, 1024, lora=QV),
    _varying("l-lora-qv-b2-s512-gc-var", "l", "bf16", 2, 512, gc=True, lora=QV),
    _varying("l-lora-qv-b2-s2048-var", "l", "bf16", 2, 2048, lora=QV),
    _varying("l-lora-all-b4-s1024-gc-var", "l", "bf16", 4, 1024, gc=True, lora=ALL_LINEAR),
    _varying("l-lora-all-b2-s2048-var", "l", "bf16", 2, 2048, lora=ALL_LINEAR),
    _varying("l-full-amp-b2-s1024-gc-var", "l", "amp", 2, 1024, gc=True),
    _infer("s-infer-b1-s128", "s", 1, 128, 16),
    _infer("s-infer-b16-s256", "s", 16, 256, 32),
    _infer("m-infer-b1-s2048", "m", 1, 2048, 32),
    _infer("m-infer-b8-s512", "m", 8, 512, 32),
    _infer("l-infer-b1-s4096", "l", 1, 4096, 16),
    _infer("l-infer-b4-s1024", "l", 4, 1024, 64),
    _infer("l-infer-b16-s256", "l", 16, 256, 32),
    _infer("l-infer-b2-s2048", "l", 2, 2048, 32),
    _infer("l-infer-b8-s4096", "l", 8, 4096, 16),
    _infer("l-infer-b32-s1024", "l", 32, 1024, 128),
    _infer("m-infer-b64-s512", "m", 64, 512, 64),
    _infer("s-infer-b4-s64-long", "s", 4, 64, 512),
    _infer("l-score-b4-s2048", "l", 4, 2048, 1, logits="all"),
    _infer("m-score-b16-s1024", "m", 16, 1024, 1, logits="all"),
]
# A few short workloads for the fast test's path through the same tool: both kinds of step (reserved.KINDS), and
# the 1B model's weights, whose 8 MiB projections do not pack into 20 MiB segments (the load-phase check).
QUICK = [
    _train("s-full-bf16-b1-s128", "s", "bf16", 1, 128),
    _train("s-lora-qv-b2-s256-gc", "s", "bf16", 2, 256, gc=True, lora=QV),
    _varying("s-lora-qv-b2-s256-var", "s", "bf16", 2, 256, lora=QV) | {"steps": 6},
    _infer("l-infer-b1-s128", "l", 1, 128, 4),
]
# PYTORCH_CUDA_ALLOC_CONF values the fit is made for: each changes how the allocator reserves.
ALLOC_CONFS = {"default": "expandable_segments:False", "expandable_segments": "expandable_segments:True"}
