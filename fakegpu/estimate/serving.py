"""`plan-serving` as a library call: vLLM's start-up memory plan, from headers, for one GPU of a serving setup.

vLLM sizes its KV cache at start-up as

    requested  = gpu_memory_utilization x total GPU memory (what torch.cuda.mem_get_info reports)
    non-KV     = weights per rank + activation peak of the profile run + non-torch memory
                 (+ CUDA graph memory from vLLM 0.21, which profiles it into the budget)
    available  = requested - non-KV  ("Available KV cache memory")

and cuts `available` into paged blocks (serving_kv). The numbers it prints are reproduced with the same
rounding; every modelled term and default is listed in the report's assumptions.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from fakegpu.estimate.dtypes import element_bytes, normalise_user_dtype
from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.llm import load_model, stack_overheads
from fakegpu.estimate.model_config import ModelConfig, read_model_config
from fakegpu.estimate.safetensors_header import Checkpoint
from fakegpu.estimate.serving_kv import (
    BLOCK_SIZES,
    KV_CACHE_DTYPES,
    capacity,
    check_fits,
    kv_element_bytes,
    kv_spec,
    unknown_choice,
)
from fakegpu.estimate.serving_profile import (
    BYTES_PER_GRAPH,
    NON_TORCH_BYTES,
    SAMPLER_BYTES_PER_LOGIT,
    activation_peak,
    capture_sizes,
    cuda_graph_bytes,
)
from fakegpu.estimate.serving_weights import rank_weights
from fakegpu.estimate.synthetic import synthesize
from fakegpu.estimate.target import resolve_profile
from fakegpu.estimate.weights import summarise
from fakegpu.reports import schema_id

SCHEMA = schema_id("plan-serving")
GIB = 1 << 30
DTYPES = {"auto": None, "bfloat16": "BF16", "float16": "F16", "half": "F16", "float32": "F32", "float": "F32"}
ENTRYPOINTS = ("serve", "llm")
# vLLM's --quantization names for online quantization of an unquantized checkpoint; a quantized checkpoint's own
# method (from its config) is accepted too.
ONLINE_QUANTIZATION = ("fp8",)
DEFAULT_VERSION = "0.21"
LARGE_GPU = 70 * GIB  # vLLM picks bigger scheduler defaults on GPUs with at least this much memory
CUDA_GRAPHS_IN_BUDGET = (0, 21)


@dataclass(frozen=True)
class ServingOptions:
    tensor_parallel: int = 1
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    max_num_seqs: int | None = None  # None: vLLM's default for the GPU and entrypoint
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str = "auto"
    block_size: int = 16
    enforce_eager: bool = False
    dtype: str = "auto"
    quantization: str | None = None
    enable_prefix_caching: bool = True
    entrypoint: str = "serve"  # `vllm serve` or the offline LLM class: their scheduler defaults differ
    vllm_version: str = DEFAULT_VERSION


def parse_version(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:[.+-]?\w+)*", text.strip())
    if not m:
        raise EstimateInputError("--vllm-version", f"{text!r} is not a vLLM version; write it as 0.11 or 0.10.1")
    version = (int(m.group(1)), int(m.group(2)))
    if version < (0, 6):
        raise EstimateInputError("--vllm-version", f"vLLM {text} profiled memory differently (before 0.6); "
                                 "plan-serving models 0.6 and later")
    return version


def _validate(o: ServingOptions) -> None:
    if o.tensor_parallel < 1:
        raise EstimateInputError("--tensor-parallel", "must be at least 1")
    if not 0 < o.gpu_memory_utilization <= 1:
        raise EstimateInputError("--gpu-memory-utilization", f"{o.gpu_memory_utilization} is outside (0, 1]")
    for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens"):
        value = getattr(o, name)
        if value is not None and value < 1:
            raise EstimateInputError(f"--{name.replace('_', '-')}", "must be at least 1")
    for option, value, accepted in (("--dtype", o.dtype, tuple(DTYPES)), ("--entrypoint", o.entrypoint, ENTRYPOINTS),
                                    ("--kv-cache-dtype", o.kv_cache_dtype, KV_CACHE_DTYPES),
                                    ("--block-size", o.block_size, BLOCK_SIZES)):
        if value not in accepted:
            raise unknown_choice(option, value, accepted)


def _checkpoint(source: Path, scratch: Path) -> tuple[Checkpoint, ModelConfig, bool]:
    """The checkpoint's headers; a folder with only config.json gets a header-only checkpoint of its shapes."""
    source = Path(source)
    if source.is_dir() and not any(source.glob("*.safetensors")) and (source / "config.json").is_file():
        cfg = read_model_config(source)
        stored = normalise_user_dtype(str(cfg.torch_dtype or "bfloat16")) or "BF16"
        synthesize(scratch, dict(cfg.raw), cfg, stored if stored in ("F32", "F16", "BF16") else "BF16")
        ckpt, _ = load_model(scratch)
        return ckpt, cfg, True
    ckpt, cfg = load_model(source)
    return ckpt, cfg, False


def _model_dtype(cfg: ModelConfig, requested: str, cc: tuple[int, int]) -> str:
    """vLLM's dtype=auto: the config's torch_dtype, with float32 served in 16 bits (bf16 where supported)."""
    chosen = DTYPES[requested]
    if chosen is None:
        declared = normalise_user_dtype(str(cfg.torch_dtype or "bfloat16")) or "BF16"
        chosen = declared if declared in ("F16", "BF16") else ("BF16" if cc >= (8, 0) else "F16")
    if chosen == "BF16" and cc < (8, 0):
        raise EstimateInputError("--dtype", f"bfloat16 needs compute capability 8.0 or later and the target is "
                                 f"{cc[0]}.{cc[1]}; vLLM refuses it too: use --dtype float16")
    return chosen


def _quantization(summary_method: str | None, requested: str | None) -> str | None:
    if requested is None:
        return summary_method
    if summary_method and requested != summary_method:
        raise EstimateInputError("--quantization", f"the checkpoint is quantized with {summary_method!r}; "
                                 f"--quantization {requested!r} does not match it (leave it out or pass "
                                 f"{summary_method!r})")
    if not summary_method and requested not in ONLINE_QUANTIZATION:
        raise unknown_choice("--quantization", requested, ONLINE_QUANTIZATION)
    return requested


def scheduler_defaults(o: ServingOptions, total: int, max_model_len: int, engine: str) -> tuple[int, int, list[str]]:
    """max_num_seqs and max_num_batched_tokens as vLLM picks them when not given."""
    said = []
    large = total >= LARGE_GPU
    version = parse_version(o.vllm_version)
    seqs = o.max_num_seqs
    if seqs is None:
        seqs = 1024 if engine == "v1" and large and version >= (0, 10) else 256
        said.append(f"max_num_seqs defaults to {seqs} (vLLM {o.vllm_version}, {o.entrypoint}, "
                    f"{'>=' if large else '<'} 70 GiB GPU)")
    tokens = o.max_num_batched_tokens
    if tokens is None:
        if engine == "v0":
            tokens = max(max_model_len, 2048) if max_model_len <= 32768 else 2048
        elif o.entrypoint == "llm":
            tokens = 16384 if large else 8192
        else:
            tokens = 8192 if large else 2048
        said.append(f"max_num_batched_tokens defaults to {tokens} ({'V0' if engine == 'v0' else 'V1'} engine, "
                    f"{o.entrypoint}, {'>=' if large else '<'} 70 GiB GPU)")
    return seqs, tokens, said


def plan_serving(source: Path | str, options: ServingOptions, target: str) -> dict:
    _validate(options)
    version = parse_version(options.vllm_version)
    engine = "v0" if version < (0, 8) else "v1"
    profile = resolve_profile(target)
    cc = profile.compute_capability
    with tempfile.TemporaryDirectory(prefix="fakegpu-serving-") as tmp:
        ckpt, cfg, from_config = _checkpoint(Path(source), Path(tmp))
        summary = summarise(ckpt, cfg.quantization)
        dtype = _model_dtype(cfg, options.dtype, cc)
        quant = _quantization(summary.quantization, options.quantization)
        weights = rank_weights(ckpt, cfg, options.tensor_parallel, dtype)
    if quant in ONLINE_QUANTIZATION and not summary.quantization:
        weights["sharded"] //= 2 if dtype != "F32" else 4  # online fp8: one byte per matrix element
    cfg.check_tensor_parallel(options.tensor_parallel)
    total = profile.cuda_total_bytes
    max_model_len = options.max_model_len or cfg.max_positions
    if not max_model_len:
        raise EstimateInputError("--max-model-len", "the config has no max_position_embeddings: give one")
    if cfg.max_positions and max_model_len > cfg.max_positions:
        raise EstimateInputError("--max-model-len", f"{max_model_len} exceeds the model's max_position_embeddings "
                                 f"({cfg.max_positions}); vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    seqs, tokens, default_notes = scheduler_defaults(options, total, max_model_len, engine)
    options = replace(options, max_model_len=max_model_len, max_num_seqs=seqs, max_num_batched_tokens=tokens)

    a = element_bytes(dtype)
    act = activation_peak(cfg, tokens, seqs, a, options.tensor_parallel, engine)
    sizes = {"piecewise": [], "full": []} if options.enforce_eager or engine == "v0" else capture_sizes(
        seqs, tokens, version)
    graphs = cuda_graph_bytes(sizes)
    graphs_in_budget = version >= CUDA_GRAPHS_IN_BUDGET and graphs > 0
    overheads = stack_overheads(cc, profile, (), None, None)
    context = overheads.context_bytes()
    # Before 0.9 the V1 worker charged everything outside torch's allocator, CUDA context included.
    non_torch = NON_TORCH_BYTES + (context if engine == "v1" and version < (0, 9) else 0)
    weight_bytes = sum(weights.values())
    requested = int(total * options.gpu_memory_utilization)
    non_kv = weight_bytes + act["peak_bytes"] + non_torch + (graphs if graphs_in_budget else 0)
    available = requested - non_kv

    element = kv_element_bytes(options.kv_cache_dtype, dtype)
    spec = kv_spec(cfg, options.tensor_parallel, element, options.block_size)
    cap = capacity(spec, max(0, available), max_model_len, tokens)
    fit = check_fits(spec, available, max_model_len, tokens)
    free_at_start = total - context
    if requested > free_at_start:
        fit = {"starts": False, "needed_bytes": fit["needed_bytes"], "largest_max_model_len": None,
               "error": f"Free memory on device ({free_at_start / GIB:.2f}/{total / GIB:.2f} GiB) on startup is less "
                        f"than desired GPU memory utilization ({options.gpu_memory_utilization}, "
                        f"{requested / GIB:.2f} GiB). Decrease GPU memory utilization or reduce GPU memory used "
                        "by other processes."}
    budget = {
        "total_gpu_memory_bytes": total,
        "gpu_memory_utilization": options.gpu_memory_utilization,
        "requested_bytes": requested,
        "weights_bytes": weight_bytes,
        "weights": weights,
        "activation_peak_bytes": act["peak_bytes"],
        "activation": act,
        "non_torch_bytes": non_torch,
        "cuda_graph_bytes": graphs,
        "cuda_graphs_in_budget": graphs_in_budget,
        "cuda_graph_capture_sizes": sizes,
        "non_kv_bytes": non_kv,
        "available_kv_cache_bytes": available,
        "beyond_budget_bytes": 0 if graphs_in_budget else graphs,
    }
    kv = {"spec": spec.to_dict(), "kv_cache_dtype": options.kv_cache_dtype, **cap, "max_model_len": max_model_len,
          **fit}
    return {
        "schema": SCHEMA,
        "model": {"source": str(source), "config": str(cfg.path), "model_type": cfg.model_type,
                  "parameter_count": summary.parameter_count, "checkpoint_bytes": summary.weight_bytes,
                  "quantization": quant, "dtype": dtype, "weights_from_config_only": from_config},
        "setup": asdict(options) | {"engine": engine, "target": profile.id, "target_name": profile.name},
        "budget": budget,
        "kv_cache": kv,
        "startup_log": startup_lines(budget, cap, max_model_len, fit),
        "assumptions": _assumptions(options, engine, version, default_notes, graphs_in_budget, from_config),
        "notes": _notes(cfg, options, spec.kind),
    }


def startup_lines(budget: dict, cap: dict, max_model_len: int, fit: dict) -> list[str]:
    """The lines vLLM prints at start-up, with its formatting."""
    lines = [f"Model loading took {budget['weights_bytes'] / GIB:.4f} GiB",
             f"Available KV cache memory: {budget['available_kv_cache_bytes'] / GIB:.2f} GiB"]
    if fit["starts"]:
        lines += [f"GPU KV cache size: {cap['tokens']:,} tokens",
                  f"Maximum concurrency for {max_model_len:,} tokens per request: {cap['max_concurrency']:.2f}x"]
    else:
        lines.append(f"ValueError: {fit['error']}")
    return lines


def _assumptions(o: ServingOptions, engine: str, version: tuple[int, int], defaults: list[str], graphs_in: bool,
                 from_config: bool) -> list[str]:
    out = [
        f"vLLM {o.vllm_version} ({'V0' if engine == 'v0' else 'V1'} engine), one GPU of tensor_parallel="
        f"{o.tensor_parallel}, nothing else on the GPU; total memory is the target profile's cudaMemGetInfo total",
        f"non-torch memory {NON_TORCH_BYTES / GIB:.2f} GiB (middle of published non_torch_memory lines, "
        "0.03-0.35 GiB)" + (" plus the CUDA context (V1 before 0.9 charged it)" if engine == "v1" and version < (0, 9)
                            else ""),
        *((["vLLM 0.8.x (V1 before 0.9) is not validated: the one published start-up figure (L40S, 0.8.5) left "
            "about 4.5 GiB more non-KV memory than modelled"]) if engine == "v1" and version < (0, 9) else []),
        "activation peak: the larger of one decoder layer's forward over max_num_batched_tokens and "
        + ("the logits of max_num_seqs requests" if engine == "v0" else
           f"the sampler over max_num_seqs logits rows ({SAMPLER_BYTES_PER_LOGIT} bytes per logit beside the "
           "logits)") + ", as allocated; allocator fragmentation (vLLM 0.11+ counts reserved memory) is not added",
        f"CUDA graphs: {BYTES_PER_GRAPH >> 20} MiB per captured graph; "
        + ("inside the budget (vLLM 0.21+ profiles them)" if graphs_in else
           "outside the budget (captured after the KV cache is allocated)" if not o.enforce_eager else
           "none (--enforce-eager)"),
        f"kv_cache_dtype {o.kv_cache_dtype}, block_size {o.block_size}",
        "prefix caching " + ("on" if o.enable_prefix_caching else "off")
        + ": it reuses blocks between requests and does not change the capacity at start-up",
        *defaults,
    ]
    if from_config:
        out.append("no safetensors in the model folder: weights counted from config.json's shapes in the "
                   "config's torch_dtype")
    return out


def _notes(cfg: ModelConfig, o: ServingOptions, kind: str) -> list[str]:
    notes = []
    if kind == "mla":
        notes.append("MLA: the cache holds the compressed latent and the rope key per token, the same on every rank")
    if kind == "sliding_window":
        notes.append("sliding-window attention on every layer: one request holds at most window + "
                     "max_num_batched_tokens tokens of cache, so concurrency exceeds tokens / max_model_len")
    if cfg.num_kv_heads < o.tensor_parallel and cfg.mla is None:
        notes.append(f"{cfg.num_kv_heads} KV heads on {o.tensor_parallel} ranks: each rank keeps a whole KV head "
                     "(vLLM replicates them)")
    return notes
