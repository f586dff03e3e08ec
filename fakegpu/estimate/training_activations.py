"""What LoRA and QLoRA layers keep alive for backward, and how the training framework changes it.

Every term counts tensors the real code keeps; the sources are named where each term is computed. The dev-set rows
that pin them are in tests/data/devset/devset.json (litgpt's config_hub table on an A10G, PEFT's FSDP/DeepSpeed
QLoRA docs).
"""

from __future__ import annotations

from dataclasses import dataclass

from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.model_config import ModelConfig
from fakegpu.estimate.safetensors_header import Checkpoint
from fakegpu.estimate.training_adapters import normalise_targets

# bitsandbytes' MatMul4Bit kept its input A in `ctx.tensors` (a plain attribute, not save_for_backward) until
# bitsandbytes PR #1270 "fix QLoRA mem bug: delete useless buffered activation", first released in 0.43.2.
BNB_INPUT_FIX = (0, 43, 2)
# PEFT PR #1706 "Autocast adapter weights if fp16/bf16" (first released in 0.12.0) upcasts adapters to fp32; until
# then LoraLayer.update_layer moved them to the base weight's dtype when that was floating point.
PEFT_AUTOCAST_ADAPTERS = (0, 12, 0)


@dataclass(frozen=True)
class Framework:
    """Behaviours of a training stack that change what is alive at the peak."""

    fused_qkv: bool  # one LoRA module (one dropout) over the fused q/k/v projection
    expands_kv: bool  # GQA k/v heads repeated to all query heads before attention (and saved that way)
    quantizes_head: bool  # the QLoRA plugin also replaces lm_head with a 4-bit linear
    head_in_all_linear: bool  # "all-linear" LoRA targets include lm_head
    holds_last_outputs: bool  # the loop keeps the previous step's outputs (and graph) until the next forward returns
    dequant_copies: int  # half-precision copies of a 4-bit weight alive while its matmul runs
    adapters_in_base_dtype: bool  # adapters in the base precision (else fp32, PEFT's autocast_adapter_dtype)
    paged_qlora_optimizer: bool  # QLoRA optimizer states in CUDA unified memory (not in torch's allocator)


FRAMEWORKS = {
    # transformers + PEFT (+ TRL/accelerate): separate q/k/v modules each with its own dropout, flash-attention
    # with unrepeated k/v, lm_head kept in 16 bits by transformers' bnb integration, outputs dropped after the step.
    "generic": Framework(fused_qkv=False, expands_kv=False, quantizes_head=False, head_in_all_linear=False,
                         holds_last_outputs=False, dequant_copies=1, adapters_in_base_dtype=False,
                         paged_qlora_optimizer=False),
    # litgpt (Lightning Fabric), as of its config_hub table (Apr 2024, litgpt/lora.py, litgpt/model.py):
    # - LoRAQKVLinear wraps the fused `attn` linear: one lora_dropout over the attention input for q, k and v;
    # - CausalSelfAttention expands k/v to n_head ("training: flash attention requires it") before SDPA;
    # - BitsandbytesPrecision replaces every nn.Linear, lm_head included, and quantizes from `.to(torch.half)`,
    #   so a bf16 run dequantizes to fp16 and then casts to bf16 (two copies);
    # - finetune/lora.py keeps `logits` (and through it the whole previous graph) until the next model() returns;
    # - lora_head is on in the all-linear config (tiny-llama/lora.yaml), bf16-true casts adapters to bf16, and
    #   with --quantize it builds bnb.optim.PagedAdamW.
    "litgpt": Framework(fused_qkv=True, expands_kv=True, quantizes_head=True, head_in_all_linear=True,
                        holds_last_outputs=True, dequant_copies=2, adapters_in_base_dtype=True,
                        paged_qlora_optimizer=True),
    # torchtune (recipes lora_finetune_single_device / full_finetune_single_device, torchtune 0.4, Nov 2024):
    # - LoRALinear per projection (lora_attn_modules, apply_lora_to_mlp, apply_lora_to_output), each its own dropout;
    # - MultiHeadAttention expands k/v to num_heads before SDPA when num_kv_heads < num_heads;
    # - the model (adapters included) is built in the recipe's dtype, so bf16 adapters and bf16 AdamW states;
    # - QLoRA quantizes the projections with torchao's NF4Tensor, dequantized once per matmul; the output head stays.
    "torchtune": Framework(fused_qkv=False, expands_kv=True, quantizes_head=False, head_in_all_linear=False,
                           holds_last_outputs=False, dequant_copies=1, adapters_in_base_dtype=True,
                           paged_qlora_optimizer=False),
}


def version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.strip().split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def bnb_saves_input(bitsandbytes: str) -> bool:
    return version_tuple(bitsandbytes) < BNB_INPUT_FIX


def peft_casts_to_base(peft: str) -> bool:
    return version_tuple(peft) < PEFT_AUTOCAST_ADAPTERS


def adapter_layer(cfg: ModelConfig, fw: Framework, method: str, a: int, r: int, tp: int,
                  dropout_inputs: float, saves_input: bool) -> dict[str, float]:
    """Bytes per token in one layer: what a LoRA/QLoRA layer saves, and what a held previous graph still pins.

    The base weights are frozen, so a plain frozen linear saves nothing for backward (autograd keeps a matmul's
    input only for the weight's grad); what remains is:
    - the two RMSNorms' fp32 upcasts (HF LlamaRMSNorm and litgpt RMSNorm both run `x.float()`): 4*h*r;
    - attention: roped q, k, v and the output (flash/SDPA save all four); k/v at n_head width where the framework
      expands them. o_proj's input is a view of that saved output (flash returns (B, T, heads, head_dim)).
    - the gated MLP: silu's input (gate), silu's output and up: 3 x intermediate (down_proj is frozen, so the
      product is not saved);
    - lora_dropout > 0: each LoRA module's dropped copy of its input (for lora_A's weight grad) and its bool mask;
    - QLoRA with bitsandbytes < 0.43.2: MatMul4Bit keeps A for every 4-bit linear (attention input, MLP input,
      down_proj's input; o_proj's aliases the saved attention output).
    `stale` is what the previous step's graph still pins when the loop holds its outputs: the same bnb inputs,
    o_proj's included (flash's saved output was released by that backward).
    """
    h = cfg.hidden_size
    heads, kv_heads = cfg.num_heads / tp, max(1, -(-cfg.num_kv_heads // tp))
    q_width = heads * cfg.head_dim
    kv = heads if fw.expands_kv else kv_heads
    attention = (2 * heads + 2 * kv) * cfg.head_dim * a
    if cfg.moe is not None:
        routed = cfg.moe.experts_per_token
        mlp_in = cfg.moe.expert_intermediate * routed + cfg.moe.shared_intermediate
        mlp = (3 * mlp_in / tp) * a + cfg.moe.num_experts * 4 + routed * cfg.moe.num_experts * 8
    else:
        mlp_in = cfg.intermediate_size
        mlp = (3 if cfg.gated_mlp else 1) * mlp_in / tp * a
    if fw.fused_qkv and cfg.num_kv_heads == cfg.num_heads:
        # litgpt without GQA: q/k/v.reshape of the permuted fused output are views (a size-1 group dim), so the v
        # that SDPA saves pins the whole q|k|v tensor, not a v-sized copy (Llama-2-7B rows: 2-3 % lower without).
        attention += (heads + kv_heads) * cfg.head_dim * a
    per_token = 4 * h * r + attention + mlp + dropout_inputs * (a + 1)
    stale = 0.0
    if method == "qlora" and saves_input:
        per_token += (2 * h + mlp_in / tp) * a
        stale = (2 * h + q_width + mlp_in / tp) * a
    return {"per_token": per_token, "stale": stale}


QKV = ("q_proj", "k_proj", "v_proj")


def lora_trainable(ckpt: Checkpoint, lora_targets: str, rank: int, fw: Framework) -> tuple[int, float]:
    """(adapter parameters, summed input width that LoRA dropouts copy, per layer) over the whole model.

    A fused-qkv framework (litgpt's LoRAQKVLinear) runs one dropout over the attention input for q, k and v; with
    "all-linear" litgpt also adapts lm_head (its dropout copy is once per model, spread over the layers here).
    """
    targets = normalise_targets(lora_targets)
    total = inputs = 0
    qkv_seen: set[str] = set()
    head = None
    for t in ckpt.tensors.values():
        if t.name.startswith("lm_head.") and t.name.endswith(".weight") and len(t.shape) == 2:
            head = t
        if len(t.shape) != 2 or (".layers." not in t.name and ".h." not in t.name):
            continue
        module = t.name.rsplit(".", 2)[-2] if t.name.endswith((".weight", ".qweight")) else None
        if module is None or (targets is not None and module not in targets):
            continue
        if targets is None and module in ("gate",):  # MoE routers are not adapted by all-linear
            continue
        out_f, in_f = t.shape
        if t.name.endswith(".qweight"):
            in_f, out_f = t.shape[0] * 8, t.shape[1]
        total += rank * (in_f + out_f)
        layer = t.name.rsplit(".", 3)[0]
        if fw.fused_qkv and module in QKV:
            if layer in qkv_seen:
                continue
            qkv_seen.add(layer)
        inputs += in_f
    if targets is None and fw.head_in_all_linear and head is not None:
        out_f, in_f = head.shape
        total += rank * (in_f + out_f)
        inputs += in_f  # spread below: one dropout copy of the final norm's output per token
    if targets is not None and total == 0:
        wanted = ", ".join(sorted(targets))
        raise EstimateInputError("--lora-targets", f"no linear layer named {wanted} in the checkpoint")
    return total, inputs
