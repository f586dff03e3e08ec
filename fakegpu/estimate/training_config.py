"""Read DeepSpeed, accelerate, FSDP, torchtune, axolotl and Megatron-LM config files into plan-training settings.

Precedence: built-in defaults < config files (in the order given) < options typed on the command line. The recipe
formats (torchtune, axolotl, Megatron argument lists) are read by training_recipe_files, which also says which of
their memory-relevant keys the plan does not model; those notes reach the report's assumptions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from fakegpu.estimate import training_recipe_files as recipe_files
from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.training_recipe_files import section, whole
from fakegpu.user_files import CONFIG_BYTES, UnreadableFile, load_yaml, loads_json, read_text

_FSDP_STRATEGIES = {
    "FULL_SHARD": "full", "1": "full", "HYBRID_SHARD": "hybrid", "4": "hybrid", "_HYBRID_SHARD_ZERO2": "hybrid",
    "5": "hybrid", "SHARD_GRAD_OP": "grad-op", "2": "grad-op", "NO_SHARD": "none", "3": "none",
}
_PRECISION = {"bf16": "bf16-mixed", "fp16": "fp16-mixed", "no": "fp32", "fp8": "bf16-mixed"}
_OPTIMIZERS = {"adam": "adamw", "adamw": "adamw", "fusedadam": "adamw", "sgd": "sgd", "adafactor": "adafactor",
               "adamw8bit": "adamw-8bit", "adam8bit": "adamw-8bit"}


def read_config_file(path: Path) -> dict[str, Any]:
    """The plan-training settings one file implies (only those it states)."""
    return read_config(path)[0]


def read_config(path: Path) -> tuple[dict[str, Any], list[str]]:
    """(settings, notes): what one file implies, and what it sets that changes memory but is not modelled."""
    try:
        text = read_text(path, CONFIG_BYTES)
    except UnreadableFile as exc:
        if isinstance(exc.__cause__, UnicodeDecodeError):
            raise EstimateInputError(path, f"not a text file (not UTF-8: {exc.__cause__.reason} at byte "
                                     f"{exc.__cause__.start}); give a DeepSpeed JSON, accelerate/torchtune/axolotl "
                                     "YAML or a Megatron-LM argument file") from exc
        raise EstimateInputError(path, f"cannot read: {exc}") from exc
    if path.suffix != ".json" and recipe_files.is_megatron_args(text):
        return recipe_files.read_megatron_args(text, path)
    try:
        doc = loads_json(text) if path.suffix == ".json" else load_yaml(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise EstimateInputError(path, f"not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from exc
    if not isinstance(doc, dict):
        raise EstimateInputError(path, "is not a mapping of settings")
    if recipe_files.is_axolotl(doc):
        out, notes = recipe_files.read_axolotl(doc, path)
        # axolotl hands these to transformers' Trainer: a DeepSpeed file next to the config, or FSDP settings.
        if isinstance(doc.get("deepspeed"), str):
            out.update(read_config_file(path.parent / doc["deepspeed"]))
        if isinstance(doc.get("fsdp_config"), dict):
            out.update(_fsdp(doc["fsdp_config"], path))
            if "fsdp" not in out and doc.get("fsdp"):
                out["fsdp"] = "full" if "full_shard" in str(doc["fsdp"]) else "grad-op"
        return out, notes
    if recipe_files.is_torchtune(doc):
        return recipe_files.read_torchtune(doc, path)
    if "distributed_type" in doc or "compute_environment" in doc:
        return _accelerate(doc, path), []
    if "zero_optimization" in doc or "train_micro_batch_size_per_gpu" in doc or "train_batch_size" in doc:
        return _deepspeed(doc, path), []
    if any(k in doc for k in ("fsdp_config", "sharding_strategy", "fsdp_sharding_strategy")):
        return _fsdp(doc.get("fsdp_config", doc), path), []
    raise EstimateInputError(path, "not a config plan-training reads: DeepSpeed JSON, accelerate or FSDP YAML, a "
                             "torchtune recipe YAML, an axolotl YAML or a Megatron-LM argument list (no key any of "
                             "them uses)")


def _deepspeed(doc: dict, path: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    zero = section(doc, "zero_optimization", path)
    if "stage" in zero:
        if zero["stage"] not in (0, 1, 2, 3):
            raise EstimateInputError(path, f"stage {zero['stage']!r} is not 0-3", field="zero_optimization.stage")
        out["zero"] = zero["stage"]
    if section(zero, "offload_param", path, "zero_optimization.").get("device") in ("cpu", "nvme"):
        out["offload"] = "params"
    elif section(zero, "offload_optimizer", path, "zero_optimization.").get("device") in ("cpu", "nvme"):
        out["offload"] = "optimizer"
    if section(doc, "bf16", path).get("enabled") is True:
        out["precision"] = "bf16-mixed"
    elif section(doc, "fp16", path).get("enabled") is True:
        out["precision"] = "fp16-mixed"
    if (mb := whole(doc, "train_micro_batch_size_per_gpu", path)) is not None:
        out["micro_batch"] = mb
    opt = str(section(doc, "optimizer", path).get("type", "")).lower().replace("_", "")
    if opt in _OPTIMIZERS:
        out["optimizer"] = _OPTIMIZERS[opt]
    if section(doc, "activation_checkpointing", path).get("partition_activations") is not None:
        out["grad_checkpointing"] = True
    return out


def _fsdp(doc: dict, path: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    strategy = doc.get("fsdp_sharding_strategy", doc.get("sharding_strategy"))
    if strategy is not None:
        key = str(strategy).upper().removeprefix("SHARDINGSTRATEGY.")
        if key not in _FSDP_STRATEGIES:
            raise EstimateInputError(path, f"unknown sharding strategy {strategy!r}", field="fsdp_sharding_strategy")
        out["fsdp"] = _FSDP_STRATEGIES[key]
    if doc.get("fsdp_offload_params", doc.get("offload_params", doc.get("cpu_offload"))) in (True, "true"):
        out["offload"] = "params"
    if doc.get("fsdp_activation_checkpointing", doc.get("activation_checkpointing")) in (True, "true"):
        # accelerate applies apply_activation_checkpointing inside each FSDP unit (non-reentrant checkpoint_wrapper)
        out["grad_checkpointing"] = True
        out["checkpoint_impl"] = "fsdp-wrapper"
    return out


def _accelerate(doc: dict, path: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if (gpus := whole(doc, "num_processes", path)) is not None:
        out["gpus"] = gpus
    mp = doc.get("mixed_precision")
    if mp is not None:
        if str(mp) not in _PRECISION:
            raise EstimateInputError(path, f"unknown mixed precision {mp!r}", field="mixed_precision")
        out["precision"] = _PRECISION[str(mp)]
    kind = str(doc.get("distributed_type", "")).upper()
    if kind == "DEEPSPEED":
        ds = section(doc, "deepspeed_config", path)
        if ds.get("deepspeed_config_file"):
            out.update(read_config_file(path.parent / ds["deepspeed_config_file"]))
        if (stage := whole(ds, "zero_stage", path, "deepspeed_config.", least=0)) is not None:
            out["zero"] = stage
        if ds.get("offload_param_device") in ("cpu", "nvme"):
            out["offload"] = "params"
        elif ds.get("offload_optimizer_device") in ("cpu", "nvme"):
            out["offload"] = "optimizer"
    elif kind == "FSDP":
        out.update(_fsdp(section(doc, "fsdp_config", path), path))
    return out


def merge_config_files(files: list[Path], typed: dict[str, Any], notes: list[str] | None = None) -> dict[str, Any]:
    """Settings from the files in order, then the options the user typed on top; each file's notes (what it sets
    that is not modelled) are appended to `notes`."""
    merged: dict[str, Any] = {}
    for f in files:
        settings, file_notes = read_config(Path(f))
        merged.update(settings)
        if notes is not None:
            notes.extend(file_notes)
    merged.update(typed)
    return merged
