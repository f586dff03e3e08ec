"""vLLM's paged KV cache: the bytes of one block, blocks from a byte budget, tokens, concurrency, the fit check.

vLLM (V1) asks each attention layer for its cache spec and, when every layer has the same spec (one KV-cache
group), allocates `available // (page_bytes * layers)` blocks, where a page is one block of one layer. It then
logs `blocks * block_size` as "GPU KV cache size" and blocks over the blocks one max_model_len request needs as
"Maximum concurrency". Models whose layers need different specs (some sliding-window, some full) are split into
groups by vLLM's hybrid allocator; this module refuses them rather than guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from fakegpu.estimate.dtypes import element_bytes, normalise_user_dtype
from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.model_config import ModelConfig
from fakegpu.profiles.matching import did_you_mean

# The values vLLM's --kv-cache-dtype and --block-size accept (CacheConfig); auto means the model dtype.
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
BLOCK_SIZES = (1, 8, 16, 32, 64, 128)


@dataclass(frozen=True)
class KVSpec:
    """One attention layer's cache on one tensor-parallel rank."""

    kind: str  # "full", "sliding_window" or "mla"
    layers: int
    block_size: int
    element_bytes: float
    kv_heads: int  # per rank; MLA keeps one latent "head", replicated on every rank
    head_size: int
    sliding_window: int | None = None

    @property
    def page_bytes(self) -> int:
        """One block of one layer: K and V (MLA: the compressed latent and the rope key, once)."""
        per_token = self.kv_heads * self.head_size * self.element_bytes
        return int(self.block_size * per_token * (1 if self.kind == "mla" else 2))

    @property
    def bytes_per_token(self) -> float:
        return self.page_bytes * self.layers / self.block_size

    def blocks_for(self, available: int) -> int:
        return max(0, int(available // self.page_bytes // self.layers))

    def blocks_per_request(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Blocks one request of max_model_len tokens holds at most (vLLM's max_memory_usage_bytes / page)."""
        if self.kind == "sliding_window" and self.sliding_window:
            tokens = min(self.sliding_window - 1 + max_num_batched_tokens, max_model_len)
            return ceil(tokens / self.block_size) + 1  # the window can straddle one extra block
        return ceil(max_model_len / self.block_size)

    def to_dict(self) -> dict:
        return {
            "kind": self.kind, "layers": self.layers, "block_size": self.block_size,
            "element_bytes": self.element_bytes, "kv_heads_per_rank": self.kv_heads, "head_size": self.head_size,
            "sliding_window": self.sliding_window, "page_bytes_per_layer": self.page_bytes,
            "bytes_per_token": self.bytes_per_token,
        }


def unknown_choice(option: str, value: object, accepted: tuple) -> EstimateInputError:
    """The error for a value outside an option's accepted list, naming the list and a close match if any."""
    hint = did_you_mean(str(value), [str(a) for a in accepted])
    return EstimateInputError(option, f"unknown value {value!r}{hint}; use {', '.join(map(str, accepted))}")


def kv_element_bytes(kv_cache_dtype: str, model_dtype: str) -> float:
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise unknown_choice("--kv-cache-dtype", kv_cache_dtype, KV_CACHE_DTYPES)
    if kv_cache_dtype == "auto":
        return element_bytes(model_dtype)
    return element_bytes(normalise_user_dtype(kv_cache_dtype) or "F8_E4M3")


def kv_spec(cfg: ModelConfig, tensor_parallel: int, element: float, block_size: int) -> KVSpec:
    """The single cache spec all layers share, as vLLM builds it; hybrid layouts are refused."""
    if block_size not in BLOCK_SIZES:
        raise unknown_choice("--block-size", block_size, BLOCK_SIZES)
    if not cfg.is_decoder:
        raise EstimateInputError(cfg.path, f"{cfg.model_type} is an encoder: vLLM serves it without a KV cache, "
                                 "and plan-serving plans decoder models only", field="model_type")
    if cfg.mla is not None:
        # vLLM caches MLA's compressed latent plus the decoupled rope key, the same on every rank.
        return KVSpec("mla", cfg.num_layers, block_size, element, 1, cfg.mla.kv_lora_rank + cfg.mla.qk_rope_head_dim)
    window = _sliding_window(cfg)
    kv_heads = max(1, cfg.num_kv_heads // tensor_parallel)  # fewer KV heads than ranks: each rank keeps a copy
    return KVSpec("sliding_window" if window else "full", cfg.num_layers, block_size, element, kv_heads,
                  cfg.head_dim, window)


def _sliding_window(cfg: ModelConfig) -> int | None:
    raw = cfg.raw
    window = raw.get("sliding_window")
    if not window or raw.get("use_sliding_window") is False:
        return None
    mixed = (raw.get("layer_types") or raw.get("sliding_window_pattern") or cfg.model_type.startswith("gemma")
             or (raw.get("max_window_layers") not in (None, cfg.num_layers) and raw.get("use_sliding_window")))
    if mixed:
        raise EstimateInputError(
            cfg.path, f"{cfg.model_type} mixes sliding-window and full-attention layers; vLLM sizes such models "
            "with its hybrid KV-cache groups, which plan-serving does not model yet", field="sliding_window")
    return int(window)


def check_fits(spec: KVSpec, available: int, max_model_len: int, max_num_batched_tokens: int) -> dict:
    """vLLM's start-up check: the cache must hold one max_model_len request, else it refuses to start."""
    needed = spec.blocks_per_request(max_model_len, max_num_batched_tokens) * spec.page_bytes * spec.layers
    if available <= 0:
        return {"starts": False, "needed_bytes": needed, "largest_max_model_len": 0,
                "error": "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                         "initializing the engine."}
    if needed <= available:
        return {"starts": True, "needed_bytes": needed, "largest_max_model_len": None, "error": None}
    lo, hi = 0, max_model_len
    while hi - lo > 1:  # largest length whose one request fits, as vLLM's estimate_max_model_len searches
        mid = (lo + hi) // 2
        if spec.blocks_per_request(mid, max_num_batched_tokens) * spec.page_bytes * spec.layers <= available:
            lo = mid
        else:
            hi = mid
    gib = 1 << 30
    return {"starts": False, "needed_bytes": needed, "largest_max_model_len": lo,
            "error": f"To serve at least one request with the model's max seq len ({max_model_len}), "
                     f"({needed / gib:.2f} GiB KV cache is needed, which is larger than the available KV cache "
                     f"memory ({available / gib:.2f} GiB). Based on the available memory, the estimated maximum "
                     f"model length is {lo}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
                     "when initializing the engine."}


def capacity(spec: KVSpec, available: int, max_model_len: int, max_num_batched_tokens: int) -> dict:
    blocks = spec.blocks_for(available)
    per_request = spec.blocks_per_request(max_model_len, max_num_batched_tokens)
    return {
        "num_gpu_blocks": blocks,
        "tokens": blocks * spec.block_size,
        "blocks_per_request": per_request,
        "max_concurrency": blocks / per_request if per_request else 0.0,
    }
