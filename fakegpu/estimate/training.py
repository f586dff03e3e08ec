"""Rank-local training memory: model states (weights, grads, optimizer), activations, logits, per phase.

Model-state sizes follow the ZeRO paper's accounting (mixed precision Adam = 2 + 2 + 12 bytes per parameter,
partitioned by stage), except plain DDP under torch.autocast, which keeps fp32 weights and grads (4 + 4 + 8) and
an autocast cache of half-precision weight copies. Activations are the tensors eager PyTorch saves for backward
in a transformer layer (norm inputs, q/k/v, attention output, the MLP intermediates).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from fakegpu.estimate import runtime
from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.llm import load_model, resolve_profile
from fakegpu.estimate.model_config import ModelConfig
from fakegpu.estimate.safetensors_header import Checkpoint
from fakegpu.estimate.target import fits, largest, verdict
from fakegpu.estimate.weights import classify, summarise

REPORT = "fakegpu.plan-training/v1"
METHODS = ("full", "lora", "qlora")
OPTIMIZERS = ("adamw", "adamw-8bit", "sgd", "adafactor")
PRECISIONS = ("bf16", "bf16-mixed", "fp16-mixed", "fp32")
FSDP = ("none", "full", "hybrid", "grad-op")
OFFLOAD = ("none", "optimizer", "params")
# NF4 with blocksize 64 and double-quantized absmax: 4 bits + ~0.127 bits of metadata per parameter.
NF4_BYTES = (4 + 0.127) / 8
# DeepSpeed's default reduce/allgather bucket: 5e8 elements.
ZERO_BUCKET_ELEMENTS = 500_000_000
DEFAULT_CC = (8, 0)


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
    zero: int = 0
    fsdp: str = "none"
    offload: str = "none"
    gpus: int = 1
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    gpus_per_node: int = 8

    def validate(self) -> None:
        for name, allowed in (("method", METHODS), ("optimizer", OPTIMIZERS), ("precision", PRECISIONS),
                              ("fsdp", FSDP), ("offload", OFFLOAD)):
            if getattr(self, name) not in allowed:
                value = getattr(self, name)
                raise EstimateInputError(f"--{name}", f"unknown value {value!r}; use {', '.join(allowed)}")
        if self.zero not in (0, 1, 2, 3):
            raise EstimateInputError("--zero", f"ZeRO stage {self.zero} does not exist; use 0, 1, 2 or 3")
        if self.zero and self.fsdp != "none":
            raise EstimateInputError("--fsdp", "ZeRO and FSDP both shard the model; choose one")
        for name in ("micro_batch", "seq_len", "gpus", "tensor_parallel", "pipeline_parallel", "lora_rank"):
            if getattr(self, name) < 1:
                raise EstimateInputError(f"--{name.replace('_', '-')}", "must be at least 1")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise EstimateInputError("--lora-dropout", "must be in [0, 1)")
        if self.gpus % (self.tensor_parallel * self.pipeline_parallel):
            raise EstimateInputError("--gpus", "must be a multiple of tensor-parallel x pipeline-parallel")
        if self.offload == "params" and self.zero != 3 and self.fsdp == "none":
            raise EstimateInputError("--offload", "offloading parameters needs ZeRO-3 or FSDP")

    @property
    def data_parallel(self) -> int:
        return self.gpus // (self.tensor_parallel * self.pipeline_parallel)


def _shard_stages(o: TrainingOptions) -> tuple[int, int, int, int]:
    """Divisors for (optimizer states, grads, weights) and the group they are sharded over."""
    dp = o.data_parallel
    group = min(dp, o.gpus_per_node) if o.fsdp == "hybrid" else dp
    stage = {"none": o.zero, "full": 3, "hybrid": 3, "grad-op": 2}[o.fsdp]
    return (group if stage >= 1 else 1, group if stage >= 2 else 1, group if stage >= 3 else 1, stage)


def _lora_trainable(ckpt: Checkpoint, o: TrainingOptions) -> tuple[int, int]:
    """(adapter parameters, summed input width of the adapted linears) over the whole model."""
    targets = None if o.lora_targets == "all-linear" else {t.strip() for t in o.lora_targets.split(",") if t.strip()}
    total = inputs = 0
    for t in ckpt.tensors.values():
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
        total += o.lora_rank * (in_f + out_f)
        inputs += in_f
    if targets is not None and total == 0:
        wanted = ", ".join(sorted(targets))
        raise EstimateInputError("--lora-targets", f"no linear layer named {wanted} in the checkpoint")
    return total, inputs


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


def _adapter_saved(cfg: ModelConfig, o: TrainingOptions, lora_inputs: int) -> float:
    """Per token per layer: what LoRA/QLoRA layers save for backward on top of a plain layer's activations.

    - lora_dropout > 0: each adapted linear runs its input through its own nn.Dropout (PEFT keeps one per module),
      and autograd keeps the dropped copy (for lora_A's weight grad) and the bool mask: a + 1 bytes per input
      element. litgpt's LoRA rows (dropout 0.05, tests/data/devset) went from 0.2-3.3 % low to 0.8-3.3 % high.
    - qlora: bitsandbytes' MatMul4Bit saves its input for backward whether or not the frozen 4-bit weight needs a
      grad, where a frozen nn.Linear saves nothing; the distinct inputs are the attention block's (shared by
      q/k/v), o_proj's, the MLP's (shared by gate/up) and down_proj's. Without this term litgpt's QLoRA rows
      (Llama-2-7B, Mistral-7B, Llama-3-8B on an A10G) were 27-30 % low while their LoRA twins were within 3 %;
      with it (and the dropout term) they are 11-14 % low. The rest is not explained here (litgpt's nf4 has no
      double quantization, +0.3 GB; the other candidates are unmeasured).
    """
    if o.method == "full":
        return 0.0
    a = 4 if o.precision == "fp32" else 2
    tp = o.tensor_parallel
    extra = 0.0
    if o.lora_dropout > 0:
        extra += lora_inputs / max(1, cfg.num_layers) / tp * (a + 1)
    if o.method == "qlora":
        mlp_in = cfg.moe.expert_intermediate * cfg.moe.experts_per_token if cfg.moe else cfg.intermediate_size
        extra += (3 * cfg.hidden_size + mlp_in / tp) * a
    return extra


def _activations(cfg: ModelConfig, o: TrainingOptions, micro_batch: int, adapter: float = 0.0) -> dict[str, float]:
    """Saved-for-backward bytes of one layer, the layer inputs kept under checkpointing, and the logits peak."""
    a = 4 if o.precision == "fp32" else 2
    amp_fp32_residual = o.precision in ("bf16-mixed", "fp16-mixed") and o.zero == 0 and o.fsdp == "none"
    r = 4 if o.precision == "fp32" or amp_fp32_residual else 2
    tokens = micro_batch * o.seq_len
    tp = o.tensor_parallel
    h, hd = cfg.hidden_size, cfg.head_dim
    heads, kv_heads = cfg.num_heads / tp, max(1, -(-cfg.num_kv_heads // tp))
    attention = (2 * heads + 2 * kv_heads) * hd * a  # roped q and k, v, and the attention output
    if cfg.moe is not None:
        routed = cfg.moe.experts_per_token  # each token passes through k experts
        mlp = (4 * cfg.moe.expert_intermediate * routed + 4 * cfg.moe.shared_intermediate) / tp * a
        mlp += cfg.moe.num_experts * 4 + cfg.moe.experts_per_token * cfg.moe.num_experts * 8
    else:
        mlp = (4 if cfg.gated_mlp else 2) * cfg.intermediate_size / tp * a
    per_token = 4 * h * r + attention + mlp + adapter
    layer = tokens * per_token
    layer_input = tokens * h * r
    logits = tokens * cfg.vocab_size * (a + 8)  # lm_head output, its fp32 copy, the loss's log-softmax
    return {"layer": layer, "layer_input": layer_input, "logits": logits}


def plan(ckpt: Checkpoint, cfg: ModelConfig, o: TrainingOptions, cc: tuple[int, int]) -> tuple[dict, dict]:
    """(phases, details) for one rank; phases hold components and the three predicted numbers."""
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
    ddp_amp = o.precision in ("bf16-mixed", "fp16-mixed") and stage == 0

    if o.method == "full":
        trainable = rank_params
        lora_inputs = 0
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
        adapters, lora_inputs = _lora_trainable(ckpt, o)
        trainable = adapters / pp / tp
        w_b, g_b, master_b, state_b = 4, 4, 0, 4  # PEFT keeps adapters in fp32 (autocast_adapter_dtype)
        base_b = 4 if o.precision == "fp32" else 2
        quant = summarise(ckpt, cfg.quantization)
        if o.method == "qlora" and quant.quantization is None:
            frozen = rank_linear * NF4_BYTES + (rank_params - rank_linear) * base_b
        elif quant.quantization is not None:
            frozen = quant.weight_bytes / pp / tp
        else:
            frozen = rank_params * base_b
        frozen /= s_weights
        weights = trainable * w_b
    states_per_param = {"adamw": 2 * state_b, "adamw-8bit": 2, "sgd": state_b, "adafactor": 0.05 * state_b}[o.optimizer]
    optimizer = trainable * (states_per_param + master_b) / s_states
    grads = trainable * g_b / s_grads
    if o.offload in ("optimizer", "params"):
        optimizer = 0.0
    if o.offload == "params":
        weights, frozen = 0.0, 0.0

    adapter = _adapter_saved(cfg, o, lora_inputs)
    act = _activations(cfg, o, o.micro_batch, adapter)
    inflight = pp  # 1F1B keeps as many micro-batches in flight on the first stage as there are stages
    if o.grad_checkpointing:
        activations = act["layer_input"] * layers_here * inflight + act["layer"]
    else:
        activations = act["layer"] * layers_here * inflight
    layer_params = rank_params / max(1, layers_here)
    gathered = 2 * layer_params * (2 if half else 4) if s_weights > 1 else 0  # ZeRO-3/FSDP: current + prefetched
    autocast_cache = rank_linear * 2 if ddp_amp and o.method == "full" else 0
    workspace = runtime.cublas_workspace_bytes(cc)
    bucket = min(ZERO_BUCKET_ELEMENTS, trainable) * 2 if stage >= 1 else 0
    ddp_buckets = trainable * g_b if stage == 0 and o.data_parallel > 1 else 0
    step_temp = trainable * 4 / s_states if o.optimizer in ("adamw", "sgd") and stage == 0 else 0

    base = {"weights": weights, "frozen_weights": frozen, "optimizer_states": optimizer}
    phases = {
        "load": {"weights": weights, "frozen_weights": frozen},
        "forward": {**base, "ddp_buckets": ddp_buckets, "activations": activations, "logits": act["logits"],
                    "gathered_params": gathered, "autocast_cache": autocast_cache, "cublas_workspace": workspace},
        "backward": {**base, "ddp_buckets": ddp_buckets, "gradients": grads, "reduce_bucket": bucket,
                     "activations": max(activations + act["logits"], act["layer"]), "gathered_params": gathered,
                     "autocast_cache": autocast_cache, "cublas_workspace": workspace},
        "optimizer_step": {**base, "ddp_buckets": ddp_buckets, "gradients": grads, "step_temporaries": step_temp,
                           "cublas_workspace": workspace},
    }
    details = {"trainable": int(trainable * pp * tp), "total": total, "stage": stage}
    return phases, details


def _totals(phases: dict, cc: tuple[int, int], gpus: int) -> dict:
    context = runtime.cuda_context_bytes(cc) + runtime.nccl_bytes(gpus)
    out = {}
    for name, parts in phases.items():
        ints = {k: int(v) for k, v in parts.items()}
        allocated = sum(ints.values())
        resident = ints.get("weights", 0) + ints.get("frozen_weights", 0) + ints.get("optimizer_states", 0)
        held = resident + (allocated - resident) * (1 + runtime.FRAGMENTATION)
        reserved = runtime.round_up(held, runtime.LARGE_ROUND)
        out[name] = {"components": ints, "max_memory_allocated": allocated, "max_memory_reserved": reserved,
                     "nvidia_smi_used": reserved + context}
    return out


def _peak(totals: dict) -> dict:
    name = max(totals, key=lambda p: totals[p]["max_memory_reserved"])
    return {"phase": name, **{k: totals[name][k] for k in ("max_memory_allocated", "max_memory_reserved",
                                                           "nvidia_smi_used")}}


def plan_training(source: Path | str, options: TrainingOptions, target: str | None = None) -> dict:
    options.validate()
    ckpt, cfg = load_model(source)
    profile = resolve_profile(target) if target else None
    cc = profile.compute_capability if profile else DEFAULT_CC
    phases, details = plan(ckpt, cfg, options, cc)
    totals = _totals(phases, cc, options.gpus)
    peak = _peak(totals)
    summary = summarise(ckpt, cfg.quantization)
    report = {
        "report": REPORT,
        "model": {"source": str(ckpt.source), "model_type": cfg.model_type, **summary.to_dict()},
        "options": asdict(options),
        "parallelism": {"gpus": options.gpus, "data_parallel": options.data_parallel,
                        "tensor_parallel": options.tensor_parallel, "pipeline_parallel": options.pipeline_parallel,
                        "zero_stage_equivalent": details["stage"]},
        "trainable_parameters": details["trainable"],
        "phases": totals,
        "peak": peak,
        "target": None,
        "notes": _notes(cfg, options, profile),
    }
    if profile is not None:
        context = runtime.cuda_context_bytes(cc) + runtime.nccl_bytes(options.gpus)
        out = verdict(profile, peak["max_memory_reserved"], context, peak["nvidia_smi_used"])

        def ok(mb: int) -> bool:
            p = _peak(_totals(plan(ckpt, cfg, _with(options, micro_batch=mb), cc)[0], cc, options.gpus))
            return fits(profile, p["max_memory_reserved"], context, p["nvidia_smi_used"])

        out["max_micro_batch"] = largest(ok, cap=4096)
        report["target"] = out
    return report


def peak_for(source: Path | str, options: TrainingOptions, compute_capability: tuple[int, int]) -> dict:
    """The peak phase's predicted numbers for a GPU of this compute capability (the dev set's entry point)."""
    options.validate()
    ckpt, cfg = load_model(source)
    phases, _ = plan(ckpt, cfg, options, compute_capability)
    return _peak(_totals(phases, compute_capability, options.gpus))


def _with(o: TrainingOptions, **changes) -> TrainingOptions:
    return TrainingOptions(**{**asdict(o), **changes})


def _notes(cfg: ModelConfig, o: TrainingOptions, profile) -> list[str]:
    notes = ["activations assume sdpa/flash attention (no stored attention matrix) and no dropout"]
    if profile is None:
        notes.append("no --target-profile: runtime overheads assume compute capability 8.0")
    if o.offload != "none":
        notes.append(f"offload={o.offload}: offloaded states live in host memory and are not counted here")
    if o.pipeline_parallel > 1:
        notes.append("pipeline parallel: worst stage shown (1F1B, as many micro-batches in flight as stages)")
    if not cfg.is_decoder:
        notes.append(f"{cfg.model_type} is an encoder: the logits term assumes a vocabulary-sized head (MLM)")
    return notes
