"""`estimate-llm` as a library call: checkpoint + config + workload (+ target board) -> report dict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

from fakegpu.estimate import runtime
from fakegpu.estimate.dtypes import FLOAT_DTYPES, normalise_user_dtype, payload_bytes
from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.inference import ATTENTION, LOGITS, InferenceOptions, LoadedModel, peak_of, phase_totals
from fakegpu.estimate.model_config import ModelConfig, read_model_config
from fakegpu.estimate.reserved import load_fit
from fakegpu.estimate.safetensors_header import Checkpoint, load_checkpoint
from fakegpu.estimate.target import fits, largest, resolve_profile, verdict
from fakegpu.estimate.weights import WeightSummary, classify, summarise
from fakegpu.profiles import Profile, workspace_profiles
from fakegpu.profiles.workspace_profiles import Overheads
from fakegpu.reports import schema_id

SCHEMA = schema_id("estimate-llm")
DEFAULT_CC = workspace_profiles.DEFAULT_COMPUTE_CAPABILITY
BATCH_CAP = 1 << 16


def user_dtype(value: str | None, option: str) -> str | None:
    if value is None or value == "auto":
        return None
    found = normalise_user_dtype(value)
    if found is None or found not in FLOAT_DTYPES:
        raise EstimateInputError(option, f"unknown dtype {value!r}; use bf16, fp16, fp32, fp8 or auto")
    return found


def load_model(source: Path | str) -> tuple[Checkpoint, ModelConfig]:
    ckpt = load_checkpoint(source)
    return ckpt, read_model_config(ckpt.directory / "config.json")


def compute_dtype(ckpt: Checkpoint, cfg: ModelConfig, summary: WeightSummary, requested: str | None) -> str:
    """The dtype activations run in: the one asked for, else the checkpoint's unquantized float dtype."""
    if requested:
        return requested
    floats = {d: n for d, n in summary.bytes_by_dtype.items() if d in ("F32", "F16", "BF16")}
    if summary.quantization is None and floats:
        return max(floats, key=floats.get)
    declared = normalise_user_dtype(str(cfg.torch_dtype or "")) if cfg.torch_dtype else None
    return declared if declared in ("F32", "F16", "BF16") else "BF16"


def resident(ckpt: Checkpoint, cast_to: str | None, tensor_parallel: int, cc: tuple[int, int]) -> tuple[int, int]:
    """Allocated and reserved bytes of the weights on one rank; matrices split across tensor-parallel ranks."""
    names = set(ckpt.tensors)
    sizes = []
    for t in ckpt.tensors.values():
        n = t.nbytes
        if cast_to and t.dtype in ("F32", "F16", "BF16", "F64") and classify(t, names) == "param":
            n = payload_bytes(cast_to, t.numel)
        if tensor_parallel > 1 and len(t.shape) >= 2:
            n = -(-n // tensor_parallel)
        sizes.append(n)
    # Rotary inv_freq and similar buffers are created at load, not stored: a few hundred bytes, kept for honesty.
    allocated = sum(runtime.round_alloc(n) for n in sizes)
    return allocated, runtime.reserved_for_resident(sizes)


def estimate_llm(
    source: Path | str,
    options: InferenceOptions,
    target: str | None = None,
    dtype: str | None = None,
    compute_capability: tuple[int, int] | None = None,
    *,
    workspace_files: Sequence[str | Path] = (),
    torch_version: str | None = None,
    cuda_version: str | None = None,
) -> dict:
    """The report for `source` under `options`. The context and cuBLAS workspace come from the workspace profiles
    (the built-in ones, `workspace_files` first) for the target's GPU and the torch / CUDA versions named, else the
    profiles' default stack."""
    if options.attention not in ATTENTION:
        raise EstimateInputError("--attention", f"unknown attention {options.attention!r}; use {', '.join(ATTENTION)}")
    if options.logits not in LOGITS:
        raise EstimateInputError("--logits", f"unknown logits mode {options.logits!r}; use {', '.join(LOGITS)}")
    for name in ("batch_size", "prompt_tokens", "tensor_parallel"):
        if getattr(options, name) < 1:
            raise EstimateInputError(f"--{name.replace('_', '-')}", "must be at least 1")
    if options.generated_tokens < 0:
        raise EstimateInputError("--generated-tokens", "must not be negative")
    ckpt, cfg = load_model(source)
    cfg.check_tensor_parallel(options.tensor_parallel)
    summary = summarise(ckpt, cfg.quantization)
    cast_to = user_dtype(dtype, "--dtype")
    act = compute_dtype(ckpt, cfg, summary, cast_to)
    options = replace(options, dtype=act, kv_cache_dtype=options.kv_cache_dtype or act)
    profile: Profile | None = resolve_profile(target) if target is not None else None
    cc = profile.compute_capability if profile else (compute_capability or DEFAULT_CC)
    overheads = stack_overheads(cc, profile, workspace_files, torch_version, cuda_version)
    allocated, reserved = resident(ckpt, cast_to, options.tensor_parallel, cc)
    model = LoadedModel(cfg, summary, allocated, reserved, overheads)
    phases = phase_totals(model, options)
    report = {
        "schema": SCHEMA,
        "model": _model_section(ckpt, cfg, summary),
        "workload": asdict(options) | {"weights_cast_to": cast_to},
        "runtime": runtime_section(overheads, runtime.nccl_bytes(options.tensor_parallel)) | {
            "allocator_round_bytes": runtime.ALLOC_ROUND,
            "reserved_fit": load_fit().summary() | {"kind": "inference"},
        },
        "phases": phases,
        "peak": peak_of(phases),
        "target": _target_section(model, options, profile, phases) if profile else None,
        "notes": _notes(cfg, summary, profile, options, cc) + workspace_notes(overheads, workspace_files),
    }
    return report


def stack_overheads(cc: tuple[int, int], profile: Profile | None, workspace_files: Sequence[str | Path],
                    torch_version: str | None, cuda_version: str | None) -> Overheads:
    """The workspace profile's figures for the target GPU and the stack named (the default stack otherwise)."""
    profiles = workspace_profiles.load(workspace_files)
    return profiles.overheads(cc, torch=torch_version, cuda=cuda_version,
                              architecture=profile.architecture if profile else None)


def runtime_section(overheads: Overheads, nccl: int) -> dict:
    """What the CUDA runtime holds besides the tensors, and the workspace profile it came from."""
    cc = overheads.compute_capability
    return {
        "compute_capability": f"{cc[0]}.{cc[1]}",
        "cuda_context_bytes": overheads.context_bytes(),
        "non_pytorch_bytes": overheads.non_pytorch_bytes(),
        "cublas_workspace_bytes": overheads.cublas_workspace_bytes(),
        "nccl_bytes": nccl,
        "workspace_profile": overheads.to_dict(),
    }


def workspace_notes(overheads: Overheads, workspace_files: Sequence[str | Path]) -> list[str]:
    """A user's file that changed nothing is worth saying: its entries match another stack than the one predicted."""
    if not workspace_files or overheads.user_entries():
        return []
    s = overheads.stack
    return [f"no entry of {', '.join(map(str, workspace_files))} matches torch {s.torch}, CUDA {s.cuda}, compute "
            f"capability {s.shown('compute_capability')}: the built-in workspace figures apply (name the stack with "
            "--torch-version / --cuda-version, or give the file a default_stack)"]


def _model_section(ckpt: Checkpoint, cfg: ModelConfig, summary: WeightSummary) -> dict:
    arch = {
        "hidden_size": cfg.hidden_size, "num_layers": cfg.num_layers, "num_heads": cfg.num_heads,
        "num_kv_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim, "intermediate_size": cfg.intermediate_size,
        "vocab_size": cfg.vocab_size, "max_positions": cfg.max_positions, "gated_mlp": cfg.gated_mlp,
        "moe": asdict(cfg.moe) if cfg.moe else None, "mla": asdict(cfg.mla) if cfg.mla else None,
    }
    return {
        "source": str(ckpt.source),
        "files": len(ckpt.files),
        "config": str(cfg.path),
        "model_type": cfg.model_type,
        "is_decoder": cfg.is_decoder,
        "architecture": arch,
        **summary.to_dict(),
    }


def _target_section(model: LoadedModel, opts: InferenceOptions, profile: Profile, phases: dict) -> dict:
    context = model.overheads.non_pytorch_bytes()
    peak = peak_of(phases)
    out = verdict(profile, peak["max_memory_reserved"], context, peak["nvidia_smi_used"])

    def ok(o: InferenceOptions) -> bool:
        p = peak_of(phase_totals(model, o))
        return fits(profile, p["max_memory_reserved"], context, p["nvidia_smi_used"])

    out["max_batch_size"] = None
    if model.config.is_decoder:
        out["max_batch_size"] = largest(lambda b: ok(replace(opts, batch_size=b)), cap=BATCH_CAP)
        gen = opts.generated_tokens
        cap = (model.config.max_positions or (1 << 22)) - gen
        best_prompt = largest(lambda n: ok(replace(opts, prompt_tokens=n)), cap=max(1, cap))
        out["max_context_tokens"] = best_prompt + gen if best_prompt else 0
        out["context_capped_by_model"] = bool(model.config.max_positions) and best_prompt >= cap
    else:
        out["max_context_tokens"] = None
        out["context_capped_by_model"] = False
    return out


def _notes(
    cfg: ModelConfig, summary: WeightSummary, profile: Profile | None, opts: InferenceOptions, cc: tuple[int, int]
) -> list[str]:
    notes = []
    if not cfg.is_decoder:
        notes.append(
            f"{cfg.model_type} is an encoder: parameter_count and weight bytes are exact; activation, KV-cache and "
            "logits terms are for decoder models and are not estimated"
        )
    if summary.quantization:
        notes.append(f"quantized checkpoint ({summary.quantization}): weights sized from the stored payloads")
    if profile is None and cc == DEFAULT_CC:
        cc_text = ".".join(str(x) for x in DEFAULT_CC)
        notes.append(f"no --target-profile: runtime overheads assume compute capability {cc_text}")
    if cfg.raw.get("sliding_window") and cfg.raw.get("use_sliding_window", True):
        notes.append("sliding-window attention: the KV cache is sized for the full context (as DynamicCache keeps)")
    if opts.tensor_parallel > 1:
        notes.append("tensor parallel: matrices split evenly across ranks, norms and buffers replicated")
    return notes
