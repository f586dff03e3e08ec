"""torchtune YAML recipes, axolotl YAML configs and Megatron-LM argument lists as plan-training settings.

training_config.read_config picks the reader; each returns (settings, notes): the options the file states, and one
note per key that changes memory but that the plan does not model (so a user sees it was not silently ignored).
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import Any

from fakegpu.estimate.errors import EstimateInputError

Read = tuple[dict[str, Any], list[str]]

# torchtune's module names inside a decoder layer (lora_attn_modules, and apply_lora_to_mlp's w1/w2/w3).
_TORCHTUNE_MODULES = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}
_TORCHTUNE_MLP = ("gate_proj", "up_proj", "down_proj")
_TORCHTUNE_LOSSES = {"CEWithChunkedOutputLoss": "chunked", "LinearCrossEntropyLoss": "fused",
                     "CrossEntropyLoss": "full"}
_TORCHTUNE_OPTIMIZERS = {"PagedAdamW8bit": "paged-adamw-8bit", "PagedAdamW": "paged-adamw",
                         "PagedAdamW32bit": "paged-adamw", "AdamW8bit": "adamw-8bit", "Adam8bit": "adamw-8bit",
                         "AdamW": "adamw", "Adam": "adamw", "SGD": "sgd", "Adafactor": "adafactor"}
# torchtune keys that change memory and that the plan has no term for.
_TORCHTUNE_UNMODELLED = {
    "fsdp_cpu_offload": "FSDP CPU offload of parameters (distributed recipes; pass --fsdp full --offload params)",
    "enable_fp8_training": "fp8 linears (smaller saved activations) are not modelled",
    "tensor_parallel_dim": "tensor parallelism inside torchtune is not modelled; pass --tensor-parallel",
    "quantizer": "quantization-aware training's fake-quantized copies are not modelled",
    "custom_sharded_layers": "extra FSDP units change what is gathered at once; not modelled",
    "clip_grad_norm": None,
}

_AXOLOTL_OPTIMIZERS = {"adamw_torch": "adamw", "adamw_hf": "adamw", "adamw_torch_fused": "adamw",
                       "adamw_bnb_8bit": "adamw-8bit", "adamw_8bit": "adamw-8bit",
                       "paged_adamw_8bit": "paged-adamw-8bit", "paged_adamw_32bit": "paged-adamw",
                       "adafactor": "adafactor", "sgd": "sgd",
                       "ao_adamw_8bit": "adamw-8bit"}
_AXOLOTL_UNMODELLED = {
    "unsloth_lora_mlp": "unsloth's fused LoRA MLP kernel keeps fewer intermediates; not modelled (upper bound)",
    "unsloth_lora_qkv": "unsloth's fused LoRA QKV kernel; not modelled (upper bound)",
    "unsloth_lora_o": "unsloth's fused LoRA O kernel; not modelled (upper bound)",
    "unsloth_cross_entropy_loss": None,  # read as --loss fused
    "liger_rms_norm": "Liger's fused RMSNorm keeps no fp32 upcast; not modelled (upper bound)",
    "liger_glu_activation": "Liger's fused SwiGLU recomputes silu; not modelled (upper bound)",
    "load_in_8bit": "8-bit (LLM.int8) base weights are not modelled; estimated as 16-bit",
    "relora_steps": "ReLoRA restarts are not modelled",
    "lora_modules_to_save": "fully trained extra modules (embeddings/head) are not counted",
    "eval_sample_packing": None,
}


def section(doc: dict, key: str, path: Path, within: str = "") -> dict:
    """doc[key] as a mapping ({} when absent or null); a value of another type is the file's error, named by its
    key path (`within` is the enclosing key's, with its dot), not a crash or a setting silently dropped."""
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise EstimateInputError(path, f"{value!r} is not a mapping of settings", field=within + key)
    return value


def whole(doc: dict, key: str, path: Path, within: str = "", least: int = 1) -> int | None:
    """doc[key] as a whole number of at least `least` (None when absent or null); anything else is the file's
    error, said of the file's key rather than of the command-line option it becomes. "auto" (the Hugging Face
    Trainer fills the value in) is absent too."""
    value = doc.get(key)
    if value is None or value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise EstimateInputError(path, f"{value!r} is not a whole number", field=within + key)
    if value < least:
        raise EstimateInputError(path, f"{value} is below {least}", field=within + key)
    return value


def number(doc: dict, key: str, path: Path, within: str = "") -> float | None:
    """doc[key] as a finite number (None when absent, null or "auto"); anything else is the file's error."""
    value = doc.get(key)
    if value is None or value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise EstimateInputError(path, f"{value!r} is not a number", field=within + key)
    return float(value)


def _component(value: Any) -> str:
    if isinstance(value, dict):
        value = value.get("_component_", "")
    return str(value or "")


def read_torchtune(doc: dict, path: Path) -> Read:
    out: dict[str, Any] = {"framework": "torchtune"}
    notes: list[str] = []
    model = doc.get("model") or {}
    name = _component(model).rsplit(".", 1)[-1]
    if name.startswith("qlora_"):
        out["method"] = "qlora"
        out["double_quant"] = True  # torchao NF4Tensor quantizes its per-block scalers to int8 (blocks of 256)
    elif name.startswith("lora_"):
        out["method"] = "lora"
    elif name:
        out["method"] = "full"
    if isinstance(model, dict) and out.get("method") in ("lora", "qlora"):
        modules = [_TORCHTUNE_MODULES.get(m, m) for m in model.get("lora_attn_modules") or []]
        if model.get("apply_lora_to_mlp"):
            modules += _TORCHTUNE_MLP
        if modules:
            out["lora_targets"] = ",".join(modules)
        if model.get("apply_lora_to_output"):
            notes.append(f"{path.name}: apply_lora_to_output: the output head's adapter is not counted")
        for key, option in (("lora_rank", "lora_rank"), ("lora_dropout", "lora_dropout"), ("use_dora", "dora")):
            if key in model:
                out[option] = model[key]
    if (batch := whole(doc, "batch_size", path)) is not None:
        out["micro_batch"] = batch
    if (max_len := whole(section(doc, "tokenizer", path), "max_seq_len", path, "tokenizer.")) is not None:
        out["seq_len"] = max_len
    dataset = doc.get("dataset")
    if isinstance(dataset, dict):
        # Without packing torchtune's collate pads each batch to its own longest sample: lengths vary by step.
        out["packed"] = bool(dataset.get("packed", False))
        out["varying_lengths"] = not out["packed"]
    if doc.get("enable_activation_checkpointing") is not None:
        out["grad_checkpointing"] = bool(doc["enable_activation_checkpointing"])
        out["checkpoint_impl"] = "fsdp-wrapper"  # torchtune wraps each layer with checkpoint_wrapper
    for key, option in (("enable_activation_offloading", "activation_offloading"),
                        ("optimizer_in_bwd", "optimizer_in_backward")):
        if doc.get(key) is not None:
            out[option] = bool(doc[key])
    if doc.get("compile") is not None:
        out["compile"] = bool(doc["compile"])
    loss = _component(doc.get("loss")).rsplit(".", 1)[-1]
    if loss:
        if loss not in _TORCHTUNE_LOSSES:
            notes.append(f"{path.name}: loss {loss} is not known; assumed whole-vocabulary cross-entropy")
        out["loss"] = _TORCHTUNE_LOSSES.get(loss, "full")
    optimizer = doc.get("optimizer")
    opt = _component(optimizer)
    if opt:
        short = opt.rsplit(".", 1)[-1]
        if short == "CPUOffloadOptimizer":
            out["offload"] = "optimizer"
            out["optimizer"] = "adamw"
        elif short in _TORCHTUNE_OPTIMIZERS:
            out["optimizer"] = _TORCHTUNE_OPTIMIZERS[short]
        else:
            notes.append(f"{path.name}: optimizer {opt} is not known; assumed AdamW")
        if isinstance(optimizer, dict) and optimizer.get("fused") is not None:
            out["fused_adam"] = bool(optimizer["fused"])
    dtype = doc.get("dtype")
    if dtype is not None:
        out["precision"] = {"bf16": "bf16", "fp32": "fp32", "fp16": "fp16-mixed"}.get(str(dtype), "bf16")
    for key, why in _TORCHTUNE_UNMODELLED.items():
        if why and doc.get(key):
            notes.append(f"{path.name}: {key}: {why}")
    return out, notes


def read_axolotl(doc: dict, path: Path) -> Read:
    out: dict[str, Any] = {}
    notes: list[str] = []
    adapter = str(doc.get("adapter") or "").lower()
    if adapter in ("lora", "qlora"):
        out["method"] = "qlora" if adapter == "qlora" or doc.get("load_in_4bit") else "lora"
    elif adapter:
        raise EstimateInputError(path, f"adapter {adapter!r} is not one plan-training models; use lora or qlora",
                                 field="adapter")
    else:
        out["method"] = "full"
    if doc.get("peft_use_dora"):
        out["dora"] = True
    if (rank := whole(doc, "lora_r", path)) is not None:
        out["lora_rank"] = rank
    if (dropout := number(doc, "lora_dropout", path)) is not None:
        out["lora_dropout"] = dropout
    if doc.get("lora_target_linear"):
        out["lora_targets"] = "all-linear"
    elif doc.get("lora_target_modules"):
        mods = doc["lora_target_modules"]
        out["lora_targets"] = ",".join(mods) if isinstance(mods, list) else str(mods)
    if (batch := whole(doc, "micro_batch_size", path)) is not None:
        out["micro_batch"] = batch
    if (seq_len := whole(doc, "sequence_len", path)) is not None:
        out["seq_len"] = seq_len
    if doc.get("sample_packing") is not None:
        out["packed"] = bool(doc["sample_packing"])
    # axolotl pads a batch to its longest sequence unless it packs or pads to sequence_len.
    out["varying_lengths"] = not (doc.get("sample_packing") or doc.get("pad_to_sequence_len"))
    gc = doc.get("gradient_checkpointing")
    if gc:
        out["grad_checkpointing"] = True
        kwargs = section(doc, "gradient_checkpointing_kwargs", path)
        out["checkpoint_impl"] = "hf-non-reentrant" if kwargs.get("use_reentrant") is False else "hf-reentrant"
    if gc == "offload" or doc.get("activation_offloading"):
        out["activation_offloading"] = True
    opt = str(doc.get("optimizer") or "")
    if opt:
        if opt not in _AXOLOTL_OPTIMIZERS:
            notes.append(f"{path.name}: optimizer {opt} is not known; assumed AdamW")
        out["optimizer"] = _AXOLOTL_OPTIMIZERS.get(opt, "adamw")
        if opt == "adamw_torch_fused":
            out["fused_adam"] = True
    if doc.get("bf16") in (True, "auto", "true"):
        out["precision"] = "bf16-mixed"
    elif doc.get("fp16") in (True, "true"):
        out["precision"] = "fp16-mixed"
    if doc.get("flash_attention") is False and not doc.get("sdp_attention"):
        notes.append(f"{path.name}: flash_attention false without sdp_attention: eager attention keeps the "
                     "attention matrix, which the plan does not count")
    if doc.get("torch_compile"):
        out["compile"] = True
    if (doc.get("liger_fused_linear_cross_entropy") or doc.get("cut_cross_entropy")
            or doc.get("unsloth_cross_entropy_loss")):
        out["loss"] = "fused"
    for key, why in _AXOLOTL_UNMODELLED.items():
        if why and doc.get(key):
            notes.append(f"{path.name}: {key}: {why}")
    return out, notes


# Megatron-LM arguments that change memory and that the plan does not model.
_MEGATRON_UNMODELLED = {
    "--recompute-method": "partial recomputation (--recompute-method/--recompute-num-layers) is modelled as every "
                          "layer recomputed",
    "--cpu-offloading": "Transformer Engine CPU offloading of activations is not modelled",
    "--fp8-format": "fp8 activations and weight copies are not modelled",
    "--context-parallel-size": "context parallelism is not modelled",
    "--expert-model-parallel-size": "expert parallelism is not modelled",
}


def read_megatron_args(text: str, path: Path) -> Read:
    """A Megatron-LM launch: `--flag value` pairs (a torchrun/python prefix and line continuations are fine)."""
    words = shlex.split(text.replace("\\\n", " "), comments=True)
    args: dict[str, str | bool] = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("--"):
            key, _, inline = w.partition("=")
            if inline:
                args[key] = inline
            elif i + 1 < len(words) and not words[i + 1].startswith("--"):
                args[key] = words[i + 1]
                i += 1
            else:
                args[key] = True
        i += 1
    out: dict[str, Any] = {"framework": "megatron", "method": "full"}
    notes: list[str] = []

    def num(key: str) -> int | None:
        value = args.get(key)
        if value is None or value is True:
            return None
        try:
            return int(str(value))
        except ValueError as exc:
            raise EstimateInputError(path, f"{key} {value!r} is not a number") from exc

    for key, option in (("--tensor-model-parallel-size", "tensor_parallel"),
                        ("--pipeline-model-parallel-size", "pipeline_parallel"),
                        ("--micro-batch-size", "micro_batch"), ("--global-batch-size", "global_batch"),
                        ("--seq-length", "seq_len")):
        if num(key) is not None:
            out[option] = num(key)
    nodes, per_node = num("--nnodes") or 1, num("--nproc_per_node") or num("--nproc-per-node")
    if per_node:
        out["gpus"] = nodes * per_node
    if args.get("--sequence-parallel"):
        out["sequence_parallel"] = True
    if args.get("--use-distributed-optimizer"):
        out["distributed_optimizer"] = True
    granularity = args.get("--recompute-granularity")
    if granularity in ("full", "selective"):
        out["recompute"] = granularity
    elif args.get("--recompute-activations"):
        out["recompute"] = "selective"
    per_virtual = num("--num-layers-per-virtual-pipeline-stage")
    layers = num("--num-layers")
    if per_virtual:
        out["pp_schedule"] = "interleaved"
        pp = out.get("pipeline_parallel", 1)
        if layers:
            out["virtual_stages"] = layers // (pp * per_virtual)
        else:
            notes.append(f"{path.name}: --num-layers-per-virtual-pipeline-stage without --num-layers: pass "
                         "--virtual-stages")
    if args.get("--bf16"):
        out["precision"] = "bf16-mixed"
    elif args.get("--fp16"):
        out["precision"] = "fp16-mixed"
    if args.get("--optimizer") in ("adam", "sgd"):
        out["optimizer"] = "adamw" if args["--optimizer"] == "adam" else "sgd"
    if args.get("--transformer-impl") == "local" and not args.get("--use-flash-attn"):
        out["attention"] = "unfused"
    for key, why in _MEGATRON_UNMODELLED.items():
        if key in args:
            notes.append(f"{path.name}: {key}: {why}")
    if layers or num("--hidden-size"):
        notes.append(f"{path.name}: model shape arguments (--num-layers, --hidden-size, ...) are read from "
                     "--model-dir's config, not from the argument list")
    if len(out) == 2:
        raise EstimateInputError(path, "no Megatron-LM argument plan-training reads (e.g. --tensor-model-parallel-"
                                 "size, --micro-batch-size, --seq-length)")
    return out, notes


def is_megatron_args(text: str) -> bool:
    return "--tensor-model-parallel-size" in text or "--micro-batch-size" in text or (
        text.lstrip().startswith("--") and "--seq-length" in text)


def is_torchtune(doc: dict) -> bool:
    model = doc.get("model")
    return ("torchtune." in _component(model) or "enable_activation_checkpointing" in doc
            or "optimizer_in_bwd" in doc or "checkpointer" in doc)


def is_axolotl(doc: dict) -> bool:
    return "base_model" in doc and any(k in doc for k in ("adapter", "sequence_len", "micro_batch_size", "lora_r",
                                                          "sample_packing", "datasets"))
