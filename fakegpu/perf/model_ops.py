"""A transformer's step as roofline ops, from its config.json (read by the estimators' model reader).

One decoder (or encoder) layer becomes: norm, QKV projection, rotary, attention, output projection, residual add,
norm, MLP (gated or not; MoE routed experts as one grouped GEMM over the experts the tokens reach), residual add;
each with `count` = the number of layers of its kind. Then the final norm and the LM head. Ops are the fused
kernels an efficient implementation runs (one kernel per norm, one per activation), not every small kernel of a
framework's eager code.

    prefill     batch x seq_len tokens, causal attention over them; logits of the last token per sequence
    decode      one new token per sequence attending to seq_len cached tokens: reads every weight once, the KV
                cache, and writes the new K and V
    train-step  prefill's forward with logits for every token and the loss, the backward (each GEMM's input
                and weight gradients, attention's backward, 2x the bytes of each bandwidth-bound kernel), and a
                fused AdamW step over fp32 parameters and states
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil
from pathlib import Path
from typing import Any

from fakegpu.errors import UsageError
from fakegpu.estimate.model_config import ENCODERS, ModelConfig, read_model_config
from fakegpu.perf.ops import Attention, Gemm, MemoryOp, Op, dtype_name, elem_bytes

PHASES = ("prefill", "decode", "train-step")
# Families whose blocks normalise with LayerNorm; the rest (llama and its kin, the MoEs) use RMSNorm.
LAYERNORM = frozenset({"gpt2", "gpt_bigcode", "gpt_neox", "falcon", "phi", "starcoder2", "cohere", "olmo"} | ENCODERS)
# Families with learned absolute positions instead of rotary embeddings.
NO_ROTARY = frozenset({"gpt2", "gpt_bigcode"} | ENCODERS)
# Mixed-precision training keeps fp32 parameters, gradients and AdamW moments; a fused AdamW step reads parameter,
# gradient and both moments and writes parameter and both moments: 7 x 4 bytes per parameter.
ADAMW_BYTES_PER_PARAM = 28


@dataclass(frozen=True)
class Workload:
    phase: str
    batch: int
    seq_len: int
    dtype: str
    backend: str | None = None


@dataclass(frozen=True)
class ModelOps:
    ops: list[Op]
    summary: dict[str, Any]
    notes: list[str]


def from_model_dir(path: Path | str, phase: str, batch: int, seq_len: int, dtype: str | None = None,
                   backend: str | None = None) -> ModelOps:
    cfg = read_model_config(path)
    return from_config(cfg, Workload(phase, batch, seq_len, _compute_dtype(cfg, dtype), backend))


def _compute_dtype(cfg: ModelConfig, requested: str | None) -> str:
    if requested and requested != "auto":
        return dtype_name(requested)
    declared = str(cfg.torch_dtype or "").removeprefix("torch.")
    return {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(declared, "bf16")


def from_config(cfg: ModelConfig, w: Workload) -> ModelOps:
    if w.phase not in PHASES:
        raise UsageError(f"--phase: {w.phase!r} is not one of {', '.join(PHASES)}")
    if w.batch < 1 or w.seq_len < 1:
        raise UsageError("--batch and --seq-len must be at least 1")
    if w.phase == "decode" and not cfg.is_decoder:
        raise UsageError(f"--phase decode: {cfg.model_type} is an encoder; it has no decode step (use prefill)")
    b = _Builder(cfg, w)
    b.layers()
    b.head()
    if w.phase == "train-step":
        b.backward_and_optimizer()
    return ModelOps(b.ops, b.summary(), b.notes)


class _Builder:
    def __init__(self, cfg: ModelConfig, w: Workload) -> None:
        self.cfg, self.w = cfg, w
        self.e = elem_bytes(w.dtype)
        decode = w.phase == "decode"
        self.tokens = w.batch * (1 if decode else w.seq_len)
        self.q_len = 1 if decode else w.seq_len
        self.ops: list[Op] = []
        self.params = 0.0
        self.notes: list[str] = []

    # ------------------------------------------------------------------ pieces

    def gemm(self, name: str, n: int, k: int, count: int, m: int | None = None, experts: int = 0,
             total_experts: int = 0) -> None:
        m = self.tokens if m is None else m
        if experts:
            self.ops.append(Gemm(name=name, m=m, n=n, k=k, dtype=self.w.dtype, batch=experts, batched=True,
                                 count=count))
            self.params += total_experts * n * k * count
        else:
            self.ops.append(Gemm(name=name, m=m, n=n, k=k, dtype=self.w.dtype, count=count))
            self.params += n * k * count

    def memory(self, name: str, elements: float, passes: int, kind: str, count: int, reduction: bool = False) -> None:
        """A bandwidth-bound kernel touching `elements` values `passes` times (reads plus writes)."""
        self.ops.append(MemoryOp(name=name, bytes=elements * passes * self.e, kind=kind, reduction=reduction,
                                 dtype=self.w.dtype, count=count))

    def norm(self, name: str, count: int) -> None:
        kind = "layernorm" if self.cfg.model_type in LAYERNORM else "rmsnorm"
        self.memory(name, self.tokens * self.cfg.hidden_size, 2, kind, count, reduction=True)
        self.params += self.cfg.hidden_size * count

    # ------------------------------------------------------------------ the layers

    def layers(self) -> None:
        cfg, w = self.cfg, self.w
        layers = cfg.num_layers
        self.ops.append(MemoryOp(name="embed", bytes=2 * self.tokens * cfg.hidden_size * self.e, kind="copy",
                                 dtype=w.dtype))
        self.params += cfg.vocab_size * cfg.hidden_size
        self.attention_block(layers)
        moe = cfg.moe
        dense_layers = moe.dense_layers if moe else layers
        if dense_layers:
            self.mlp_block("mlp", cfg.intermediate_size, dense_layers)
        if moe:
            self.moe_block(layers - dense_layers)

    def attention_block(self, layers: int) -> None:
        cfg, w = self.cfg, self.w
        h, heads, kv_heads = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads
        self.norm("attn.norm", layers)
        if cfg.mla is not None:
            mla = cfg.mla
            qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
            if mla.q_lora_rank:
                self.gemm("attn.q_a_proj", mla.q_lora_rank, h, layers)
                self.gemm("attn.q_b_proj", heads * qk, mla.q_lora_rank, layers)
            else:
                self.gemm("attn.q_proj", heads * qk, h, layers)
            self.gemm("attn.kv_a_proj", mla.kv_lora_rank + mla.qk_rope_head_dim, h, layers)
            self.gemm("attn.kv_b_proj", heads * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank, layers)
            # Scores use the qk width, the weighted sum the v width: their mean gives attention's exact FLOPs.
            head_dim, kv_heads, out_dim = (qk + mla.v_head_dim) // 2, heads, heads * mla.v_head_dim
            self.notes.append("MLA attention: K and V decompressed per head as transformers caches them")
        else:
            head_dim = cfg.head_dim
            self.gemm("attn.qkv_proj", (heads + 2 * kv_heads) * head_dim, h, layers)
            out_dim = heads * head_dim
        if cfg.model_type not in NO_ROTARY:
            self.memory("attn.rotary", self.tokens * (heads + kv_heads) * head_dim, 2, "elementwise", layers)
        if w.phase == "decode":
            self.memory("attn.kv_cache_write", self.tokens * 2 * kv_heads * head_dim, 2, "copy", layers)
        self.ops.append(Attention(name="attn.sdpa", batch=w.batch, heads=heads, kv_heads=kv_heads, q_len=self.q_len,
                                  kv_len=w.seq_len, head_dim=head_dim, causal=cfg.is_decoder, dtype=w.dtype,
                                  backend=w.backend, backward=w.phase == "train-step", count=layers))
        self.gemm("attn.o_proj", h, out_dim, layers)
        self.memory("attn.residual", self.tokens * h, 3, "add", layers)

    def _activation(self) -> str:
        act = str(self.cfg.raw.get("hidden_act") or self.cfg.raw.get("activation_function") or "")
        return "gelu" if "gelu" in act else "silu"

    def mlp_block(self, prefix: str, inter: int, layers: int) -> None:
        h = self.cfg.hidden_size
        self.norm(f"{prefix}.norm", layers)
        if self.cfg.gated_mlp:
            self.gemm(f"{prefix}.gate_up_proj", 2 * inter, h, layers)
            # act(gate) * up in one kernel: two reads, one write
            self.memory(f"{prefix}.act_mul", self.tokens * inter, 3, self._activation(), layers)
        else:
            self.gemm(f"{prefix}.up_proj", inter, h, layers)
            self.memory(f"{prefix}.act", self.tokens * inter, 2, self._activation(), layers)
        self.gemm(f"{prefix}.down_proj", h, inter, layers)
        self.memory(f"{prefix}.residual", self.tokens * h, 3, "add", layers)

    def moe_block(self, layers: int) -> None:
        cfg, moe = self.cfg, self.cfg.moe
        assert moe is not None
        h, inter = cfg.hidden_size, moe.expert_intermediate
        self.norm("moe.norm", layers)
        self.gemm("moe.router", moe.num_experts, h, layers)
        routed = self.tokens * moe.experts_per_token
        # Uniform routing: the tokens reach min(experts, routed) experts, evenly; each reached expert's weights
        # are read once.
        reached = min(moe.num_experts, routed)
        per_expert = ceil(routed / reached)
        self.gemm("moe.experts.gate_up_proj", 2 * inter, h, layers, m=per_expert, experts=reached,
                  total_experts=moe.num_experts)
        self.memory("moe.experts.act_mul", routed * inter, 3, self._activation(), layers)
        self.gemm("moe.experts.down_proj", h, inter, layers, m=per_expert, experts=reached,
                  total_experts=moe.num_experts)
        if moe.shared_intermediate:
            self.gemm("moe.shared.gate_up_proj", 2 * moe.shared_intermediate, h, layers)
            self.memory("moe.shared.act_mul", self.tokens * moe.shared_intermediate, 3, self._activation(), layers)
            self.gemm("moe.shared.down_proj", h, moe.shared_intermediate, layers)
        self.memory("moe.residual", self.tokens * h, 3, "add", layers)
        self.notes.append(f"MoE: tokens routed uniformly; {reached} of {moe.num_experts} experts reached per layer, "
                          f"{per_expert} token(s) each")

    def head(self) -> None:
        cfg, w = self.cfg, self.w
        self.norm("final_norm", 1)
        train = w.phase == "train-step"
        rows = self.tokens if train else w.batch  # HF generate computes the last position's logits only
        self.ops.append(Gemm(name="lm_head", m=rows, n=cfg.vocab_size, k=cfg.hidden_size, dtype=w.dtype))
        if not cfg.tie_word_embeddings:
            self.params += cfg.vocab_size * cfg.hidden_size
        if train:
            # Cross-entropy upcasts the logits: read them, write fp32, read those for the softmax and loss.
            self.ops.append(MemoryOp(name="loss.cross_entropy", bytes=rows * cfg.vocab_size * (self.e + 8),
                                     kind="softmax", reduction=True, dtype=w.dtype))

    # ------------------------------------------------------------------ training

    def backward_and_optimizer(self) -> None:
        backward: list[Op] = []
        for op in self.ops:
            if isinstance(op, Gemm):
                # dX = dY @ W^T and dW = X^T @ dY: the forward's shape with k and n, then m and k, swapped.
                backward.append(Gemm(name=f"{op.name}.dgrad", m=op.m, n=op.k, k=op.n, dtype=op.dtype,
                                     batch=op.batch, batched=op.batched, count=op.count))
                backward.append(Gemm(name=f"{op.name}.wgrad", m=op.k, n=op.n, k=op.m, dtype=op.dtype,
                                     batch=op.batch, batched=op.batched, count=op.count))
            elif isinstance(op, MemoryOp):
                # A bandwidth-bound kernel's backward reads its saved input and the incoming gradient and writes
                # the outgoing one: about twice the forward's traffic.
                backward.append(MemoryOp(name=f"{op.name}.backward", bytes=2 * op.bytes, kind=op.kind,
                                         reduction=op.reduction, dtype=op.dtype, count=op.count))
        self.ops.extend(backward)
        if self.w.dtype != "fp32":
            self.ops.append(MemoryOp(name="weights.cast", bytes=self.params * (4 + self.e), kind="copy",
                                     dtype=self.w.dtype))
        self.ops.append(MemoryOp(name="optimizer.adamw", bytes=self.params * ADAMW_BYTES_PER_PARAM, kind="add",
                                 dtype="fp32"))
        self.notes.append("train-step: attention priced forward+backward together; AdamW over fp32 parameters and "
                          f"moments ({ADAMW_BYTES_PER_PARAM} bytes per parameter)"
                          + (f", weights cast to {self.w.dtype} once per step" if self.w.dtype != "fp32" else ""))

    # ------------------------------------------------------------------ the summary

    def summary(self) -> dict[str, Any]:
        cfg, w = self.cfg, self.w
        kv_bytes = (cfg.kv_bytes_per_token(self.e) * w.batch * w.seq_len) if cfg.is_decoder else 0.0
        return {
            "config": str(cfg.path),
            "model_type": cfg.model_type,
            "num_layers": cfg.num_layers,
            "hidden_size": cfg.hidden_size,
            "num_heads": cfg.num_heads,
            "num_kv_heads": cfg.num_kv_heads,
            "head_dim": cfg.head_dim,
            "intermediate_size": cfg.intermediate_size,
            "vocab_size": cfg.vocab_size,
            "parameters": self.params,
            "weight_bytes": self.params * self.e,
            "kv_cache_bytes": kv_bytes,
            "phase": w.phase,
            "batch": w.batch,
            "seq_len": w.seq_len,
            "tokens": self.tokens,
            "dtype": w.dtype,
        }
