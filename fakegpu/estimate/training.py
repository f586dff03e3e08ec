"""Rank-local training memory: model states (weights, grads, optimizer), activations, logits, per phase.

Model-state sizes follow the ZeRO paper's accounting (mixed precision Adam = 2 + 2 + 12 bytes per parameter,
partitioned by stage), except plain DDP under torch.autocast, which keeps fp32 weights and grads (4 + 4 + 8) and
an autocast cache of half-precision weight copies. Activations are the tensors eager PyTorch saves for backward
in a transformer layer (norm inputs, q/k/v, attention output, the MLP intermediates); for LoRA/QLoRA,
training_activations counts what frozen and 4-bit linears keep and what the framework (litgpt or HF/PEFT) adds.
Reserved memory (see _totals) adds what the caching allocator cannot share: FSDP's per-stream pools, blocks left
by earlier peaks and by FSDP's constructor; Answer.AI's FSDP benchmarks in the dev set pin those terms.
framework="megatron" hands the plan to megatron.py (Megatron-LM's TP/SP/PP, distributed optimizer, recomputation).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from fakegpu.estimate import megatron, runtime, training_adapters, training_recipes
from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.llm import load_model, resolve_profile, runtime_section, stack_overheads, workspace_notes
from fakegpu.estimate.model_config import ModelConfig
from fakegpu.estimate.reserved import load_fit
from fakegpu.estimate.safetensors_header import Checkpoint
from fakegpu.estimate.target import fits, largest, verdict
from fakegpu.estimate.training_activations import (
    FRAMEWORKS,
    adapter_layer,
    bnb_saves_input,
    lora_trainable,
    peft_casts_to_base,
)
from fakegpu.estimate.weights import classify, summarise
from fakegpu.profiles import workspace_profiles
from fakegpu.profiles.matching import did_you_mean
from fakegpu.profiles.workspace_profiles import Overheads
from fakegpu.reports import schema_id

SCHEMA = schema_id("plan-training")
METHODS = ("full", "lora", "qlora", "ia3", "prompt-tuning")
OPTIMIZERS = ("adamw", "adamw-8bit", *training_recipes.PAGED_OPTIMIZERS, "sgd", "adafactor")
PRECISIONS = ("bf16", "bf16-mixed", "fp16-mixed", "fp32")
FSDP = ("none", "full", "hybrid", "grad-op")
OFFLOAD = ("none", "optimizer", "params")
# Where activation checkpointing sits: transformers' gradient_checkpointing_enable wraps each decoder layer's call from
# outside its FSDP unit (use_reentrant=True unless gradient_checkpointing_kwargs say otherwise); accelerate's
# fsdp_activation_checkpointing, Answer.AI's train.py and torchtune wrap the layer inside the unit.
CHECKPOINT_IMPLS = ("hf-reentrant", "hf-non-reentrant", "fsdp-wrapper")
# NF4 packs 4 bits per parameter; its QuantState adds one absmax per 64-block: fp32 (0.5 bit per parameter), or
# with double quantization uint8 plus an fp32 absmax per 256 blocks (~0.127 bit). litgpt's `bnb.nf4` has none
# (Fabric's _NF4Linear: compress_statistics=False); PEFT's QLoRA examples use bnb_4bit_use_double_quant.
NF4_PACKED_BYTES = 4 / 8
NF4_STATS_BYTES = {True: 0.127 / 8, False: 0.5 / 8}
NF4_BYTES = NF4_PACKED_BYTES + NF4_STATS_BYTES[True]
# DeepSpeed's default reduce/allgather bucket: 5e8 elements.
ZERO_BUCKET_ELEMENTS = 500_000_000
DEFAULT_CC = workspace_profiles.DEFAULT_COMPUTE_CAPABILITY


@dataclass(frozen=True)
class TrainingOptions:
    method: str = "full"
    lora_rank: int = 16
    lora_targets: str = "all-linear"
    lora_dropout: float = 0.0  # PEFT's LoraConfig default; litgpt's configs use 0.05, PEFT's SFT examples 0.1
    optimizer: str = "adamw"
    precision: str = "bf16-mixed"
    micro_batch: int = 1
    seq_len: int = 2048
    grad_checkpointing: bool = False
    checkpoint_impl: str = "hf-reentrant"  # see CHECKPOINT_IMPLS
    zero: int = 0
    fsdp: str = "none"
    offload: str = "none"
    gpus: int = 1
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    gpus_per_node: int = 8
    framework: str = "generic"  # see training_activations.FRAMEWORKS
    double_quant: bool = True  # QLoRA absmax double quantization (bnb_4bit_use_double_quant / litgpt bnb.nf4-dq)
    bitsandbytes: str = "0.45"  # installed bitsandbytes; before 0.43.2 MatMul4Bit keeps its input alive
    peft: str = "0.13"  # installed PEFT; before 0.12 adapters take the base weight's float dtype (not fp32)
    # Megatron-LM only (framework="megatron"); see fakegpu/estimate/megatron.py
    sequence_parallel: bool = False
    distributed_optimizer: bool = False
    recompute: str = "none"  # see megatron.RECOMPUTE
    pp_schedule: str = "1f1b"
    virtual_stages: int = 1
    attention: str = "fused"  # see megatron.ATTENTION
    global_batch: int | None = None  # sequences per optimizer step over all data-parallel ranks
    # A fused AdamW kernel (Megatron: Transformer Engine's or apex's FusedAdam; torch.optim.AdamW(fused=True), as
    # torchtune's LoRA configs set) has no step temporary; else torch's foreach step allocates one parameter-sized
    # list. None: the framework's default (Megatron fused, the others torch's foreach).
    fused_adam: bool | None = None
    megatron_core: str = "0.13"  # installed megatron-core; before 0.8 the loss made a second fp32 logits copy
    # Adapter variants (training_adapters.py)
    dora: bool = False  # PEFT's use_dora / torchtune's use_dora, on top of --method lora or qlora
    virtual_tokens: int = 20  # prompt tuning's num_virtual_tokens
    # What recipes switch on (training_recipes.py)
    loss: str = "full"  # see training_recipes.LOSSES
    compile: bool = False  # torch.compile of the model (and loss)
    activation_offloading: bool = False  # saved activations moved to CPU (torchtune enable_activation_offloading)
    optimizer_in_backward: bool = False  # optimizer step fused into backward, gradients freed per parameter
    packed: bool = False  # sample packing (every sequence is seq_len real tokens)
    # Batches padded to their own longest sequence (no packing, no padding to max length): each step's tensors have
    # another size, and the caching allocator keeps blocks cut for earlier steps (reserved.py, training_varying).
    varying_lengths: bool = False

    def validate(self) -> None:
        for name, allowed in (("method", METHODS), ("optimizer", OPTIMIZERS), ("precision", PRECISIONS),
                              ("fsdp", FSDP), ("offload", OFFLOAD), ("framework", (*FRAMEWORKS, "megatron")),
                              ("checkpoint_impl", CHECKPOINT_IMPLS), ("loss", training_recipes.LOSSES)):
            if getattr(self, name) not in allowed:
                value = getattr(self, name)
                hint = did_you_mean(str(value), allowed, quote=False)
                raise EstimateInputError(f"--{name.replace('_', '-')}",
                                         f"unknown value {value!r}{hint}; use {', '.join(allowed)}")
        if self.zero not in (0, 1, 2, 3):
            raise EstimateInputError("--zero", f"ZeRO stage {self.zero} does not exist; use 0, 1, 2 or 3")
        if self.zero and self.fsdp != "none":
            raise EstimateInputError("--fsdp", "ZeRO and FSDP both shard the model; choose one")
        for name in ("micro_batch", "seq_len", "gpus", "tensor_parallel", "pipeline_parallel", "lora_rank",
                     "virtual_tokens"):
            if getattr(self, name) < 1:
                raise EstimateInputError(f"--{name.replace('_', '-')}", "must be at least 1")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise EstimateInputError("--lora-dropout", "must be in [0, 1)")
        if self.gpus % (self.tensor_parallel * self.pipeline_parallel):
            raise EstimateInputError("--gpus", "must be a multiple of tensor-parallel x pipeline-parallel")
        if self.offload == "params" and self.zero != 3 and self.fsdp == "none":
            raise EstimateInputError("--offload", "offloading parameters needs ZeRO-3 or FSDP")
        for name in ("bitsandbytes", "peft", "megatron_core"):
            # Versions gate behaviour changes; a typo must not silently select the oldest behaviour.
            value = str(getattr(self, name)).strip()
            if not re.fullmatch(r"\d+(\.\d+){0,2}([.+-]?\w+)*", value):
                raise EstimateInputError(f"--{name.replace('_', '-')}", f"{value!r} is not a version; use e.g. 0.45 or "
                                         "0.13.2")
        if self.dora and self.method not in ("lora", "qlora"):
            raise EstimateInputError("--dora", f"DoRA decomposes LoRA weights; use it with --method lora or qlora, "
                                     f"not {self.method}")
        if self.optimizer_in_backward and (self.zero or self.offload != "none"):
            raise EstimateInputError("--optimizer-in-backward", "steps each parameter in its gradient hook; "
                                     "DeepSpeed ZeRO and optimizer offload step elsewhere, so drop one of them")
        if self.optimizer_in_backward and self.optimizer in training_recipes.PAGED_OPTIMIZERS:
            pass  # torchtune's default full single-device config combines them; states still live outside
        if self.packed and self.varying_lengths:
            raise EstimateInputError("--varying-lengths", "sample packing makes every batch seq_len tokens long; "
                                     "use --packed or --varying-lengths, not both")
        megatron.validate(self)
        if self.framework == "megatron":
            used = [f for f, on in (("--compile", self.compile), ("--activation-offloading",
                    self.activation_offloading), ("--optimizer-in-backward", self.optimizer_in_backward),
                    ("--loss", self.loss != "full"), ("--dora", self.dora),
                    ("--varying-lengths", self.varying_lengths)) if on]
            if used:
                raise EstimateInputError(used[0], "is not modelled for --framework megatron (Megatron's own options "
                                         "are --recompute, --sequence-parallel, --distributed-optimizer)")
        if self.framework == "megatron" and self.grad_checkpointing:
            raise EstimateInputError("--grad-checkpointing", "Megatron recomputes with --recompute full or selective")

    @property
    def data_parallel(self) -> int:
        return self.gpus // (self.tensor_parallel * self.pipeline_parallel)


def _shard_stages(o: TrainingOptions) -> tuple[int, int, int, int]:
    """Divisors for (optimizer states, grads, weights) and the group they are sharded over."""
    dp = o.data_parallel
    group = min(dp, o.gpus_per_node) if o.fsdp == "hybrid" else dp
    stage = {"none": o.zero, "full": 3, "hybrid": 3, "grad-op": 2}[o.fsdp]
    return (group if stage >= 1 else 1, group if stage >= 2 else 1, group if stage >= 3 else 1, stage)


def _param_groups(ckpt: Checkpoint, cfg: ModelConfig) -> dict[str, int]:
    """Logical parameters in transformer-layer linears, embeddings/head, and the rest (norms, biases)."""
    summary_bits = 8 if cfg.quantization.get("bits") == 8 else 4
    names = set(ckpt.tensors)
    groups = {"linear": 0, "embedding": 0, "other": 0}
    for t in ckpt.tensors.values():
        kind = classify(t, names)
        if kind in ("meta", "buffer"):
            continue
        n = t.numel * (2 if kind == "packed" and t.dtype == "U8" else 32 // summary_bits if kind == "packed"
                       and t.dtype in ("I32", "U32") else 1)
        if "embed" in t.name or "lm_head" in t.name or ".wte." in t.name or ".wpe." in t.name:
            groups["embedding"] += n
        elif len(t.shape) >= 2 or kind == "packed":
            groups["linear"] += n
        else:
            groups["other"] += n
    return groups


def _largest_trainable(ckpt: Checkpoint, o: TrainingOptions, trainable: float) -> float:
    """Elements of the largest trainable tensor on a rank (full training: the largest weight; adapters are small)."""
    if o.method != "full":
        return trainable
    largest = max((t.numel for t in ckpt.tensors.values()), default=0)
    return largest / o.tensor_parallel


def _adapters(ckpt: Checkpoint, cfg: ModelConfig, o: TrainingOptions, fw) -> tuple[float, float, float, float]:
    """(trainable parameters, summed input width LoRA dropouts copy per layer, saved bytes per token per layer the
    adapters add, DoRA's transient weight-norm bytes) for the adapter method."""
    a = 4 if o.precision == "fp32" else 2
    tp = o.tensor_parallel
    if o.method == "prompt-tuning":
        return float(o.virtual_tokens * cfg.hidden_size), 0.0, 0.0, 0.0
    if o.method == "ia3":
        mods = training_adapters.ia3_modules(ckpt, o.lora_targets)
        return (float(training_adapters.ia3_parameters(mods, cfg.num_layers)), 0.0,
                training_adapters.ia3_saved_per_token(mods, a, tp), 0.0)
    training_adapters.check_targets(ckpt, o.lora_targets)
    adapters, lora_inputs = lora_trainable(ckpt, o.lora_targets, o.lora_rank, fw)
    mods = training_adapters.adapted(ckpt, o.lora_targets)
    extra = training_adapters.lora_saved_per_token(mods, o.lora_rank, a, o.lora_dropout > 0, True, tp)
    dora_temp = 0.0
    if o.dora:
        adapters += training_adapters.dora_parameters(mods, cfg.num_layers)
        extra += training_adapters.dora_saved_per_token(mods, a, tp)
        dora_temp = training_adapters.dora_transient(mods, a, o.method == "qlora", tp)
    return float(adapters), lora_inputs, extra, dora_temp


def _head_and_largest(ckpt: Checkpoint) -> tuple[int, int]:
    """(lm_head parameters, the largest transformer-layer linear's parameters): what a 4-bit plugin dequantizes."""
    head = largest = 0
    for t in ckpt.tensors.values():
        if len(t.shape) != 2:
            continue
        if t.name.startswith("lm_head."):
            head += t.numel
        elif ".layers." in t.name or ".h." in t.name:
            largest = max(largest, t.numel * (2 if t.dtype == "U8" else 1))
    return head, largest


def _activations(cfg: ModelConfig, o: TrainingOptions, micro_batch: int, dropout_inputs: float = 0.0,
                 dequant: float = 0.0, adapter_extra: float = 0.0) -> dict[str, float]:
    """Saved-for-backward bytes of one layer, the layer inputs kept under checkpointing, and the logits peak.

    Full fine-tuning counts every trainable linear's saved input (the plain-layer formula below); LoRA/QLoRA
    layers are counted by training_activations.adapter_layer, which knows what frozen and 4-bit linears keep.
    """
    a = 4 if o.precision == "fp32" else 2
    amp_fp32_residual = o.precision in ("bf16-mixed", "fp16-mixed") and o.zero == 0 and o.fsdp == "none"
    r = 4 if o.precision == "fp32" or amp_fp32_residual else 2
    tokens = micro_batch * o.seq_len
    tp = o.tensor_parallel
    h, hd = cfg.hidden_size, cfg.head_dim
    fw = FRAMEWORKS[o.framework]
    stale = 0.0
    if o.method == "full":
        heads, kv_heads = cfg.num_heads / tp, max(1, -(-cfg.num_kv_heads // tp))
        attention = (2 * heads + 2 * kv_heads) * hd * a  # roped q and k, v, and the attention output
        if cfg.moe is not None:
            routed = cfg.moe.experts_per_token  # each token passes through k experts
            mlp = (4 * cfg.moe.expert_intermediate * routed + 4 * cfg.moe.shared_intermediate) / tp * a
            mlp += cfg.moe.num_experts * 4 + cfg.moe.experts_per_token * cfg.moe.num_experts * 8
        else:
            mlp = (4 if cfg.gated_mlp else 2) * cfg.intermediate_size / tp * a
        per_token = 4 * h * r + attention + mlp
    else:
        saves = bnb_saves_input(o.bitsandbytes)
        layer = adapter_layer(cfg, fw, o.method, a, r, tp, dropout_inputs, saves)
        per_token = layer["per_token"]
        if fw.holds_last_outputs:
            # litgpt's loop still holds the previous step's graph while this forward runs (its `logits`); what
            # that graph pins is MatMul4Bit's inputs (bnb < 0.43.2), every layer's and lm_head's.
            lm_head_input = h * a if o.method == "qlora" and saves and fw.quantizes_head else 0.0
            stale = tokens * (layer["stale"] * cfg.num_layers + lm_head_input)
    # What the adapters themselves keep (training_adapters: x @ A, inputs no frozen op saves, DoRA, IA3), and what
    # torch.compile's fused kernels drop.
    per_token += adapter_extra
    if o.compile:
        per_token = max(0.0, per_token - training_recipes.compile_saving(cfg, a, r, tp))
    layer_bytes = tokens * per_token
    layer_input = tokens * h * r
    # The first layer's backward (the peak's neighbour) holds gradients of the widest intermediates at once: the
    # MLP's down-projection input, silu/act and up branches (3 x intermediate when gated).
    width = cfg.moe.expert_intermediate * cfg.moe.experts_per_token if cfg.moe else cfg.intermediate_size
    layer_grads = tokens * (3 if cfg.gated_mlp else 2) * width / tp * a
    logits = tokens * cfg.vocab_size * (a + 8)  # lm_head output, its fp32 copy, the loss's log-softmax
    if o.loss != "full":
        logits = training_recipes.logits_bytes(tokens, cfg.vocab_size, a, o.loss, o.compile)
        logits_fwd = logits + dequant
    elif fw.holds_last_outputs and o.method != "full":
        # Fabric's convert_output casts the logits to fp32; the previous step's fp32 logits are still held until
        # model() returns, next to this step's half-precision ones and then either their fp32 copy or lm_head's
        # dequantized weight (the larger).
        logits_fwd = tokens * cfg.vocab_size * (4 + a) + max(tokens * cfg.vocab_size * 4, dequant)
    else:
        logits_fwd = logits + dequant
    return {"layer": layer_bytes, "layer_input": layer_input, "logits": logits, "logits_forward": logits_fwd,
            "stale_graph": stale, "dequant": dequant, "layer_grads": layer_grads}


def plan(ckpt: Checkpoint, cfg: ModelConfig, o: TrainingOptions, overheads: Overheads) -> tuple[dict, dict]:
    """(phases, details) for one rank; phases hold components and the three predicted numbers. `overheads`: the
    workspace profile of the target GPU and stack (its cuBLAS workspace)."""
    cfg.check_tensor_parallel(o.tensor_parallel)
    if o.framework == "megatron":
        return _plan_megatron(ckpt, cfg, o, overheads)
    if o.method == "prompt-tuning":
        # PEFT prepends the virtual tokens' embeddings to every sequence: all activations and logits see them.
        o = _with(o, seq_len=o.seq_len + o.virtual_tokens)
    groups = _param_groups(ckpt, cfg)
    total = sum(groups.values())
    tp, pp = o.tensor_parallel, o.pipeline_parallel
    layers_here = -(-cfg.num_layers // pp)
    # The worst pipeline stage holds its layers plus the embeddings (first) or the head (last).
    emb_here = groups["embedding"] if pp == 1 else groups["embedding"] / 2 if groups["embedding"] else 0
    rank_params = ((groups["linear"] + groups["other"]) / pp + emb_here) / tp
    rank_linear = groups["linear"] / pp / tp
    s_states, s_grads, s_weights, stage = _shard_stages(o)
    half = o.precision != "fp32"
    fw = FRAMEWORKS[o.framework]
    frozen_stats = dequant = 0.0
    layer_packed = None
    ddp_amp = o.precision in ("bf16-mixed", "fp16-mixed") and stage == 0

    if o.method == "full":
        trainable = rank_params
        lora_inputs = 0
        adapter_extra = dora_temp = 0.0
        if o.precision == "fp32":
            w_b, g_b, master_b, state_b = 4, 4, 0, 4
        elif o.precision == "bf16":
            w_b, g_b, master_b, state_b = 2, 2, 0, 2
        elif ddp_amp:
            w_b, g_b, master_b, state_b = 4, 4, 0, 4
        else:
            w_b, g_b, master_b, state_b = 2, 2, 4, 4
        weights = rank_params * w_b / s_weights
        frozen = 0.0
    else:
        adapters, lora_inputs, adapter_extra, dora_temp = _adapters(ckpt, cfg, o, fw)
        trainable = adapters / pp / tp
        base_b = 4 if o.precision == "fp32" else 2
        # PEFT >= 0.12 keeps adapters in fp32 (autocast_adapter_dtype); litgpt's bf16-true casts them with the
        # model, and so did PEFT before 0.12 (LoraLayer.update_layer: `self.to(weight.device, dtype=weight.dtype)`
        # when the base weight is floating point: a bf16 model, or bnb 4-bit stored as bf16, which FSDP/ZeRO-3
        # need to flatten it with the bf16 norms; a uint8-stored 4-bit weight leaves the adapters in fp32).
        float_base = o.method == "lora" or s_weights > 1
        in_base = fw.adapters_in_base_dtype or (peft_casts_to_base(o.peft) and float_base)
        w_b = g_b = state_b = base_b if in_base else 4
        master_b = 0
        quant = summarise(ckpt, cfg.quantization)
        head_params, largest = _head_and_largest(ckpt)
        head_here = head_params * (emb_here / groups["embedding"] if groups["embedding"] else 0) / tp
        if o.method == "qlora" and quant.quantization is None:
            quantized = rank_linear + (head_here if fw.quantizes_head else 0)
            frozen = (quantized * NF4_PACKED_BYTES + (rank_params - quantized) * base_b) / s_weights
            # QuantState (absmax per block) hangs off the module, not an nn.Parameter: FSDP/ZeRO-3 neither shard
            # nor offload it, so every rank holds all of it (PEFT's 70B FSDP rows).
            frozen_stats = quantized * NF4_STATS_BYTES[o.double_quant]
            layer_packed = (rank_linear * NF4_PACKED_BYTES + groups["other"] / pp / tp * base_b) / max(1, layers_here)
            # MatMul4Bit dequantizes the whole weight in half precision for each forward and grad-input matmul;
            # Fabric's plugin quantized from fp16, so a bf16 run holds the fp16 copy and its bf16 cast.
            dequant = fw.dequant_copies * 2 * max(largest / tp, head_here if fw.quantizes_head else 0)
        elif quant.quantization is not None:
            frozen = quant.weight_bytes / pp / tp / s_weights
        else:
            frozen = rank_params * base_b / s_weights
        # Adapters are partitioned like any parameter: PEFT's fsdp_auto_wrap_policy makes each LoRA linear its own
        # FSDP unit, ZeRO-3 partitions every parameter.
        weights = trainable * w_b / s_weights
    deepspeed_half = o.zero >= 1 and o.precision != "fp32"
    if deepspeed_half:
        # DeepSpeed ZeRO with bf16/fp16 enabled hands the optimizer fp32 copies of each rank's partition, whatever
        # dtype the trainable parameters have (PEFT < 0.12 leaves adapters in bf16): stage3.py
        # _create_fp32_partitions (`fp16_partitioned_groups_flat[i].to(device).clone().float()`, then
        # `optimizer.param_groups[..]["params"] = [fp32_param]`), stage_1_and_2.py single_partition_of_fp32_groups
        # (DeepSpeed v0.14.0). So the master is fp32 and Adam's states follow it; the gradient partition stays in
        # the model dtype (engine.get_data_types: grad_accum_dtype = model dtype under ZeRO).
        master_b, state_b = 4, 4
    states_per_param = {"adamw": 2 * state_b, "adamw-8bit": 2, "sgd": state_b, "adafactor": 0.05 * state_b,
                        "paged-adamw": 0, "paged-adamw-8bit": 0}[o.optimizer]
    optimizer = trainable * (states_per_param + master_b) / s_states
    if o.method == "qlora" and fw.paged_qlora_optimizer:
        optimizer = 0.0  # bnb PagedAdamW: states in cudaMallocManaged memory, outside max_memory_allocated
    grads = trainable * g_b / s_grads
    if o.optimizer_in_backward:
        # torchtune's optimizer_in_bwd / torch's _apply_optimizer_in_backward: a post-accumulate-grad hook steps each
        # parameter and sets its .grad to None, so one gradient is alive at a time: the largest (a tied embedding's
        # waits for both its uses, still one tensor).
        grads = min(grads, _largest_trainable(ckpt, o, trainable) * g_b / s_grads)
    if o.offload in ("optimizer", "params"):
        optimizer = 0.0
    if o.offload == "params":
        weights, frozen = 0.0, 0.0
    frozen += frozen_stats

    dropout_inputs = lora_inputs / max(1, cfg.num_layers) / tp if o.lora_dropout > 0 else 0.0
    act = _activations(cfg, o, o.micro_batch, dropout_inputs, dequant, adapter_extra)
    inflight = pp  # 1F1B keeps as many micro-batches in flight on the first stage as there are stages
    if o.activation_offloading:
        # torchtune's OffloadActivations (a saved_tensors_hooks context) copies each saved tensor to pinned CPU memory
        # on a side stream as forward runs and brings it back during backward, prefetching the next layer's: under
        # checkpointing what leaves is every layer's input, else every saved tensor; one layer's stay on the GPU.
        if o.grad_checkpointing:
            activations = act["layer_input"] * inflight + act["layer"]
            logits_fwd = max(0.0, act["logits_forward"] - act["layer"])  # sequential, as below
            logits_bwd = max(0.0, act["logits"] - act["layer"] - act["layer_grads"] - act["dequant"])
        else:
            activations = act["layer"] * min(2, layers_here) * inflight
            logits_fwd, logits_bwd = act["logits_forward"], act["logits"]
    elif o.grad_checkpointing:
        # Only each layer's input is kept; a layer's saved tensors exist again only while it is recomputed in
        # backward, and by then autograd has released the loss's buffers (a node's saved tensors and the grads it
        # consumed are freed as it runs), so the layer's peak and the logits' peak are sequential, not summed. The
        # no-grad forward's transient inside a layer is bounded by what that layer saves when recomputed.
        activations = act["layer_input"] * layers_here * inflight + act["layer"]
        logits_fwd = max(0.0, act["logits_forward"] - act["layer"])
        logits_bwd = max(0.0, act["logits"] - act["layer"] - act["layer_grads"] - act["dequant"])
    else:
        activations = act["layer"] * layers_here * inflight
        logits_fwd, logits_bwd = act["logits_forward"], act["logits"]
    layer_params = rank_params / max(1, layers_here)
    if layer_packed is not None:  # QLoRA: the flat params gathered are the 4-bit storage, not bf16 weights
        layer_params_bytes = layer_packed
    else:
        layer_params_bytes = layer_params * (2 if half else 4)
    gathered = 2 * layer_params_bytes if s_weights > 1 else 0  # ZeRO-3/FSDP: current + prefetched
    held_grads = 0.0
    if o.grad_checkpointing and o.checkpoint_impl == "hf-reentrant" and o.method != "full" and o.fsdp != "none":
        # A frozen FSDP unit (PEFT's wrap policy gives the adapters units of their own) reshards in backward through a
        # multi-grad hook on its forward inputs (torch fsdp/_runtime_utils.py _register_post_backward_reshard_only_hook,
        # removed only by _finalize_params when backward ends; the same code in torch 2.2 and 2.10). Under
        # transformers' reentrant checkpointing those inputs are the detached leaves CheckpointFunction.backward
        # recomputes from, and autograd leaves each one's input gradient in its .grad: every layer's input and input
        # gradient stay alive until the whole backward is done, so the peak is the last layer's backward. Measured
        # with FakeGPU's native mode on the real stack (transformers 4.39 Trainer, accelerate 0.28, PEFT 0.10, TRL 0.8,
        # bitsandbytes 0.43, torch 2.10): +64 MiB per Llama-2-70B layer at batch 2 x 2048, all freed together at
        # _finalize_params. (Native mode also showed one unit gathered there, not two: its kernels finish at once, so
        # the CPU never runs ahead; on a GPU limit_all_gathers lets two all-gathers be in flight, so two are kept.)
        held_grads = act["layer_input"] * max(0, layers_here - 1)
    # FSDP does not reshard the root unit after forward (torch _post_forward_reshard: "Do not free the root's
    # parameters ... immediately used for backward"): with per-layer wrapping that is embeddings, final norm, head.
    fsdp_root = emb_here / tp * (2 if half else 4) if o.fsdp in ("full", "hybrid") and s_weights > 1 else 0
    # FSDP parameter offload: before each all-gather the unit's CPU shard is copied to the GPU on FSDP's
    # pre-unshard stream (FlatParamHandle.pre_unshard: flat_param_to(device), "creates a new tensor distinct from
    # any attributes", held until the all-gather that reads it completes). The caching allocator keeps blocks per
    # stream, so that stream holds a segment as large as the largest shard copied, the root unit's (embeddings,
    # head) at the start of forward, and re-splits it for each layer's copy; nothing on the compute stream reuses it.
    offload_staging = 0.0
    if o.offload == "params" and o.fsdp != "none" and s_weights > 1:
        offload_staging = max(fsdp_root, layer_params_bytes) / s_weights
    autocast_cache = rank_linear * 2 if ddp_amp and o.method == "full" else 0
    workspace = overheads.cublas_workspace_bytes()
    if o.zero >= 1:
        bucket = min(ZERO_BUCKET_ELEMENTS, trainable) * 2  # DeepSpeed's reduce bucket
    elif s_grads > 1:
        # FSDP has no bucket: each FlatParameter's unsharded gradient is reduce-scattered on its own (_post_backward
        # _hook); the largest is one layer unit, or for LoRA one adapter linear (PEFT wraps each as its own unit).
        unit = layer_params if o.method == "full" else o.lora_rank * max(cfg.intermediate_size, cfg.hidden_size)
        bucket = unit * g_b
    else:
        bucket = 0
    ddp_buckets = trainable * g_b if stage == 0 and o.data_parallel > 1 else 0
    # torch.optim's foreach step (the default without fused=True) makes parameter-sized temporaries
    # (_multi_tensor_adamw: exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)); a fused kernel, or a step run per
    # parameter inside backward, makes none.
    foreach = o.optimizer in ("adamw", "sgd") and stage == 0 and not o.fused_adam and not o.optimizer_in_backward
    step_temp = trainable * 4 / s_states if foreach else 0
    if deepspeed_half and o.offload == "none":
        # ...and before the step it upcasts the partition's gradient to fp32 (stage3.py
        # _prepare_fp32_grad_for_sub_group; stage_1_and_2.py step: `.to(single_partition_of_fp32_groups[i].dtype)`).
        step_temp = trainable * 4 / s_states

    base = {"weights": weights, "frozen_weights": frozen, "optimizer_states": optimizer}
    phases = {
        "load": {"weights": weights, "frozen_weights": frozen},
        "forward": {**base, "ddp_buckets": ddp_buckets, "activations": activations,
                    "logits": logits_fwd, "previous_step_graph": act["stale_graph"], "dora_weight_norm": dora_temp,
                    "gathered_params": gathered, "fsdp_root_params": fsdp_root, "offload_staging": offload_staging,
                    "autocast_cache": autocast_cache, "cublas_workspace": workspace},
        "backward": {**base, "ddp_buckets": ddp_buckets, "gradients": grads, "reduce_bucket": bucket,
                     "activations": activations, "held_input_grads": held_grads, "logits": logits_bwd,
                     "layer_gradients": act["layer_grads"], "dequantized_weight": act["dequant"],
                     "dora_weight_norm": dora_temp if o.grad_checkpointing else 0.0,
                     "gathered_params": gathered, "fsdp_root_params": fsdp_root, "offload_staging": offload_staging,
                     "autocast_cache": autocast_cache, "cublas_workspace": workspace},
        "optimizer_step": {**base, "ddp_buckets": ddp_buckets, "gradients": grads, "step_temporaries": step_temp,
                           "cublas_workspace": workspace},
    }
    # What FSDP's constructor leaves in the caching allocator (the compute stream's pool): each unit is moved to the
    # GPU, broadcast from rank 0 through c10d's coalesced flat buffer (sync_module_states, which accelerate's
    # CPU-RAM-efficient loading requires), and flattened into a new FlatParameter before one shard is kept
    # (_init_param_handle_from_module). Three copies of the root unit and of a layer unit are freed into the cache
    # (their sizes differ, so one does not reuse the other's), and training fills those blocks before it reserves
    # more. Answer.AI's 7B QLoRA run: "about 3.72GiB (see reserved_after_model_wrap)" for ~2 GiB of shards.
    init_cache = 3 * (fsdp_root + layer_params_bytes) if o.fsdp != "none" and s_weights > 1 else 0
    if init_cache:
        # While a unit is flattened its moved parameters and the FlatParameter are both alive.
        copies = 2 * max(fsdp_root, layer_params_bytes)
        setup = {"weights": weights, "frozen_weights": frozen, "fsdp_unit_copies": copies}
        phases = {"load": phases["load"], "fsdp_setup": setup, **{k: v for k, v in phases.items() if k != "load"}}
    # Peaks at different moments still do not share blocks: the forward's per-layer temporaries come first and
    # leave blocks of their sizes cached, and the loss's larger logits buffers take fresh segments. So a
    # checkpointed layer and the logits add up in reserved memory though not in allocated (Answer.AI's 7B FSDP
    # rows: the allocated figures fit the sequential peak, the reserved ones the sum).
    cached_only = {"forward": act["logits_forward"] - logits_fwd, "backward": act["logits"] - logits_bwd}
    details = {"trainable": int(trainable * pp * tp), "total": total, "stage": stage, "init_cache": init_cache,
               "cached_only": cached_only, "loss_buffers": act["logits"]}
    return phases, details


def _plan_megatron(ckpt: Checkpoint, cfg: ModelConfig, o: TrainingOptions, overheads: Overheads) -> tuple[dict, dict]:
    """The phases of the pipeline stage whose rank peaks highest, and every stage's in the details."""
    if o.pp_schedule == "interleaved" and cfg.num_layers % (o.pipeline_parallel * o.virtual_stages):
        raise EstimateInputError("--virtual-stages", f"{cfg.num_layers} layers do not split into "
                                 f"{o.pipeline_parallel} stages x {o.virtual_stages} model chunks (Megatron needs "
                                 "layers divisible by pipeline-parallel x virtual stages)")
    groups = _param_groups(ckpt, cfg)
    stages = megatron.stage_memory(ckpt, cfg, groups, o, overheads.cublas_workspace_bytes())
    peaks = [_peak(_totals(phases, overheads, o.gpus, fit_kind=_fit_kind(o))) for phases in stages]
    worst = max(range(len(stages)), key=lambda i: (peaks[i]["max_memory_allocated"], -i))
    total = sum(groups.values())
    details = {"trainable": total, "total": total, "stage": 1 if o.distributed_optimizer else 0, "init_cache": 0,
               "cached_only": {}, "stages": stages, "stage_peaks": peaks, "peak_stage": worst}
    return stages[worst], details


def _megatron_section(cfg: ModelConfig, o: TrainingOptions, details: dict) -> dict:
    layers = megatron.stage_layers(cfg.num_layers, o.pipeline_parallel)
    m = megatron.microbatches(o)
    stages = []
    for i, (phases, peak) in enumerate(zip(details["stages"], details["stage_peaks"], strict=True)):
        forward = phases["forward"]
        stages.append({"stage": i, "layers": layers[i], "in_flight_microbatches": megatron.in_flight(o, i, m),
                       "activations_bytes": int(forward["activations"]),
                       "model_state_bytes": int(forward["weights"] + forward["gradients"]
                                                + forward["optimizer_states"]),
                       **{k: peak[k] for k in ("max_memory_allocated", "max_memory_reserved", "nvidia_smi_used")}})
    return {"peak_stage": details["peak_stage"], "assumptions": megatron.assumptions(cfg, o), "stages": stages}


# Allocated on FSDP's unshard and pre-unshard streams: the caching allocator keeps separate blocks per stream, and
# these are the same sizes every layer, so they are reserved as they are, apart from the compute stream's pool.
STREAM_POOLS = ("gathered_params", "fsdp_root_params", "offload_staging")


def _fit_kind(o: TrainingOptions) -> str:
    """Which of the reserved-memory fit's kinds of step this run is (reserved.KINDS)."""
    return "training_varying" if o.varying_lengths else "training"


def _totals(phases: dict, overheads: Overheads, gpus: int, details: dict | None = None,
            fit_kind: str = "training") -> dict:
    """Allocated, reserved and nvidia-smi per phase. Reserved: resident states as they are, FSDP's stream pools as
    they are, and what the caching allocator holds for the compute stream's temporaries (with what earlier peaks
    left cached) as the native-mode fit of training steps says (reserved.py), never below what FSDP's constructor
    left cached."""
    terms = load_fit().for_kind(fit_kind)
    details = details or {}
    init_cache = details.get("init_cache", 0)
    cached_only = details.get("cached_only", {})
    context = overheads.non_pytorch_bytes() + runtime.nccl_bytes(gpus)
    out = {}
    for name, parts in phases.items():
        ints = {k: int(v) for k, v in parts.items()}
        allocated = sum(ints.values())
        resident = ints.get("weights", 0) + ints.get("frozen_weights", 0) + ints.get("optimizer_states", 0)
        pools = sum(ints.get(k, 0) for k in STREAM_POOLS)
        compute = terms.held(allocated - resident - pools + cached_only.get(name, 0), ints.get("optimizer_states", 0),
                             details.get("loss_buffers", 0) if name not in ("load", "fsdp_setup") else 0)
        held = resident + pools + (max(compute, init_cache) if name != "load" else compute)
        reserved = runtime.round_up(held, runtime.LARGE_ROUND)
        out[name] = {"components": ints, "max_memory_allocated": allocated, "max_memory_reserved": reserved,
                     "nvidia_smi_used": reserved + context}
    return out


def _peak(totals: dict) -> dict:
    """The run's maxima: each counter is a running maximum, so each is the largest over the phases, which need not
    be one phase (the allocator's pools from a reserved-heavy phase outlive it)."""
    name = max(totals, key=lambda p: totals[p]["max_memory_reserved"])
    return {"phase": name, **{k: max(t[k] for t in totals.values()) for k in ("max_memory_allocated",
                                                                           "max_memory_reserved", "nvidia_smi_used")}}


def plan_training(source: Path | str, options: TrainingOptions, target: str | None = None, *,
                  workspace_files: Sequence[str | Path] = (), torch_version: str | None = None,
                  cuda_version: str | None = None, config_notes: Sequence[str] = ()) -> dict:
    """The report for training `source` under `options`. The context and cuBLAS workspace come from the workspace
    profiles (the built-in ones, `workspace_files` first) for the target's GPU and the torch / CUDA versions named,
    else the profiles' default stack. `config_notes`: what the --config files set that the plan does not model."""
    options.validate()
    ckpt, cfg = load_model(source)
    profile = resolve_profile(target) if target is not None else None
    cc = profile.compute_capability if profile else DEFAULT_CC
    overheads = stack_overheads(cc, profile, workspace_files, torch_version, cuda_version)
    phases, details = plan(ckpt, cfg, options, overheads)
    totals = _totals(phases, overheads, options.gpus, details, _fit_kind(options))
    peak = _peak(totals)
    summary = summarise(ckpt, cfg.quantization)
    report = {
        "schema": SCHEMA,
        "model": {"source": str(ckpt.source), "model_type": cfg.model_type, **summary.to_dict()},
        "options": asdict(options),
        "parallelism": {"gpus": options.gpus, "data_parallel": options.data_parallel,
                        "tensor_parallel": options.tensor_parallel, "pipeline_parallel": options.pipeline_parallel,
                        "zero_stage_equivalent": details["stage"]},
        "trainable_parameters": details["trainable"],
        "runtime": runtime_section(overheads, runtime.nccl_bytes(options.gpus)) | {
            "reserved_fit": load_fit().summary() | {"kind": _fit_kind(options)}},
        "phases": totals,
        "peak": peak,
        "target": None,
        "notes": _notes(cfg, options, profile) + workspace_notes(overheads, workspace_files),
        "assumptions": {"adapter": _adapter_assumptions(ckpt, cfg, options),
                        "recipe": training_recipes.assumptions(options), "config_notes": list(config_notes)},
    }
    if options.framework == "megatron":
        report["megatron"] = _megatron_section(cfg, options, details)
    if profile is not None:
        context = overheads.non_pytorch_bytes() + runtime.nccl_bytes(options.gpus)
        out = verdict(profile, peak["max_memory_reserved"], context, peak["nvidia_smi_used"])

        def ok(mb: int) -> bool:
            phases_mb, details_mb = plan(ckpt, cfg, _with(options, micro_batch=mb), overheads)
            p = _peak(_totals(phases_mb, overheads, options.gpus, details_mb, _fit_kind(options)))
            return fits(profile, p["max_memory_reserved"], context, p["nvidia_smi_used"])

        out["max_micro_batch"] = largest(ok, cap=4096)
        report["target"] = out
    return report


def peak_for(source: Path | str, options: TrainingOptions, compute_capability: tuple[int, int]) -> dict:
    """The peak phase's predicted numbers for a GPU of this compute capability (the dev set's entry point)."""
    options.validate()
    ckpt, cfg = load_model(source)
    overheads = workspace_profiles.builtin().overheads(compute_capability)
    phases, details = plan(ckpt, cfg, options, overheads)
    return _peak(_totals(phases, overheads, options.gpus, details, _fit_kind(options)))


def _adapter_assumptions(ckpt: Checkpoint, cfg: ModelConfig, o: TrainingOptions) -> dict:
    """Which modules the adapter covers and what each keeps, as the plan counted them."""
    out: dict = {"method": o.method, "framework": o.framework}
    if o.method in ("lora", "qlora"):
        mods = training_adapters.adapted(ckpt, o.lora_targets)
        out.update({
            "modules": [f"{m.name} ({m.in_features}->{m.out_features})" for m in mods],
            "rank": o.lora_rank, "dropout": o.lora_dropout, "dora": o.dora,
            "saved_per_module": ("dropped input copy + bool mask, and x@A (rank wide)" if o.lora_dropout > 0 else
                                 "the module's input where no frozen op keeps it (down_proj: the intermediate), "
                                 "and x@A (rank wide)"),
        })
        if o.dora:
            out["dora_terms"] = ("magnitude vector (out_features per module, trainable); base and LoRA results "
                                 "saved per module; weight-norm temporaries of the largest module per forward")
    elif o.method == "ia3":
        mods = training_adapters.ia3_modules(ckpt, o.lora_targets)
        out.update({"modules": [m.name for m in mods],
                    "saved_per_module": "k/v outputs and down_proj's input (the scaled tensors)"})
    elif o.method == "prompt-tuning":
        out.update({"virtual_tokens": o.virtual_tokens,
                    "effective_seq_len": o.seq_len + o.virtual_tokens,
                    "trainable": f"{o.virtual_tokens} x {cfg.hidden_size} prompt embeddings"})
    return out


def _with(o: TrainingOptions, **changes) -> TrainingOptions:
    return TrainingOptions(**{**asdict(o), **changes})


def _notes(cfg: ModelConfig, o: TrainingOptions, profile) -> list[str]:
    notes = [] if o.framework == "megatron" else [
        "activations assume sdpa/flash attention (no stored attention matrix); LoRA dropout per --lora-dropout"]
    if o.method != "full" and o.framework != "generic":
        notes.append(f"framework={o.framework}: saved tensors follow its LoRA/QLoRA implementation")
    if o.method == "qlora" and o.framework == "litgpt":
        notes.append("QLoRA optimizer states (bnb PagedAdamW, unified memory) are outside max_memory_allocated")
    if profile is None:
        notes.append("no --target-profile: runtime overheads assume compute capability 8.0")
    if o.offload != "none":
        notes.append(f"offload={o.offload}: offloaded states live in host memory and are not counted here")
    if o.framework == "megatron":
        notes.append("megatron: activations per Korthikanti et al. 2022 (TP/SP/recompute), model states as "
                     "Megatron-LM's theoretical memory report; phases are the stage that peaks highest, every "
                     "stage under 'megatron'")
        if o.global_batch is None and o.pipeline_parallel > 1:
            notes.append("megatron: no --global-batch, so the pipeline is assumed full (micro-batches >= stages)")
    elif o.pipeline_parallel > 1:
        notes.append("pipeline parallel: worst stage shown (1F1B, as many micro-batches in flight as stages)")
    if not cfg.is_decoder:
        notes.append(f"{cfg.model_type} is an encoder: the logits term assumes a vocabulary-sized head (MLM)")
    return notes
