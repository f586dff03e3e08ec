"""CUDA's kernel choices, where the CUDA build of an op takes another path than the CPU build.

The math is the same either way; what the paths save for backward and allocate while they run is not, and that
is what fakecuda's memory figures must follow. Each choice here was found by the differential harness
(tests/memory_fidelity: the same program under native mode, PyTorch's real CUDA dispatch, and under fakecuda)
and is checked there.

- dropout: on CUDA `dropout` is `native_dropout` (ATen's is_fused_kernel_acceptable: a CUDA tensor, 0 < p < 1,
  non-empty), which saves a bool mask; the CPU build multiplies by a float noise tensor it keeps for backward
  (4x the bytes). fakecuda charges the bool mask; in float32 and float64 it computes with float noise
  (fused.FusedDropout, equal bit for bit), since the CPU build's native_dropout is slow.
- scaled_dot_product_attention: on CUDA a fused kernel (flash, or memory-efficient for fp32 and masks) saves the
  output and a logsumexp; the CPU build's math path keeps the (L x S) attention weights. Where CUDA would run a
  fused kernel, fakecuda emulates it (fused.py): the math path's numbers, the fused kernel's memory.
- multi-head attention: a Python composite, which fakecuda would otherwise see as one call (its inner
  attention then takes the CPU's math path); its body runs under the mode instead.
- linear: with a bias and an input that is neither 2-D nor contiguous (a batch-first attention's transposed
  input), ATen's linear is a matmul followed by an in-place add of the bias. Under any dispatch mode (fakecuda
  charges memory through one) ATen takes its composite-compliant branch instead, an out-of-place add: one more
  output-sized tensor per call. fakecuda runs CUDA's sequence itself.
- rms_norm: on CUDA one fused kernel (fused.py's FusedRMSNorm).
- optimizers: torch picks foreach (and allows fused) only for parameters of the plain tensor types, so fake CUDA
  parameters must count as those, or every optimizer falls back to its for-loop implementation, whose
  temporaries are one tensor at a time where CUDA's foreach default makes them for all parameters at once.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

import torch
import torch.nn.functional as F

from fakegpu.fakecuda import amp, fused
from fakegpu.fakecuda.backward import under_mode
from fakegpu.fakecuda.dtensor import badge_locals
from fakegpu.fakecuda.mode import FakeCudaMode, register
from fakegpu.fakecuda.releases import CUDNN_ATTENTION_DROPOUT_SIXTEENTHS, release
from fakegpu.fakecuda.tensor import FAKE_TYPES

_autocast_on = torch.is_autocast_enabled
_transforms_active = torch._C._are_functorch_transforms_active
_compiling = torch.compiler.is_compiling
_HALF = (torch.float16, torch.bfloat16)


@register(F.dropout, torch.dropout)
def _dropout(mode: FakeCudaMode, func, args, kwargs):
    if func is F.dropout:
        names = ("input", "p", "training", "inplace")
        defaults = {"p": 0.5, "training": True, "inplace": False}
    else:
        names = ("input", "p", "train")
        defaults = {}
    bound = {**defaults, **dict(zip(names, args, strict=False)), **kwargs}
    x, p = bound["input"], bound["p"]
    train = bound.get("training", bound.get("train"))
    if type(x) not in FAKE_TYPES or bound.get("inplace") or not train or not 0 < p < 1 or x.numel() == 0:
        return mode.run_default(func, args, kwargs)
    if x.dtype in fused.DROPOUT_DTYPES and not _transforms_active() and not _compiling():
        out = fused.dropout(x, p, x._fc_index, mode.tracker)
    else:
        out, _mask = torch.native_dropout(x, p, True)
    return mode._badge_outputs(out, x._fc_index, ())


def cuda_sdpa_backend(mode: FakeCudaMode, index: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      attn_mask: Any, dropout_p: float, is_causal: bool, enable_gqa: bool) -> str:
    """The backend CUDA's scaled_dot_product_attention picks (ATen's sdp_utils: the first in priority order whose
    checks pass, within the torch.backends.cuda switches); "math" when no fused kernel takes it."""
    major, minor = mode.runtime.devices[index].profile.compute_capability
    dims_ok = q.dim() == 4 and k.dim() == 4 and v.dim() == 4
    same_heads = q.shape[-1] == k.shape[-1] == v.shape[-1]
    if not dims_ok or not same_heads or enable_gqa:
        return "math"
    checks = {"cudnn": lambda: _cudnn_takes(mode, major, minor, q, k, v, dropout_p),
              "flash": lambda: _flash_takes(major, q, attn_mask),
              "efficient": lambda: _efficient_takes(major, q)}
    for backend in _priority(major, minor):
        if backend == "math":
            return "math"
        if checks[backend]():
            return backend
    return "math"


_BACKEND_NAMES = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}
_DEFAULT_ORDER = ["flash", "efficient", "math", "cudnn"]


def _priority(major: int, minor: int) -> list[str]:
    """torch's order of backends to try: the user's (sdpa_kernel(..., set_priority=True)), else flash, efficient,
    math, with cuDNN moved to the front where torch prefers it. torch decides that on its first CUDA attention
    call, which a fake device never reaches, so the order it reports is still the default one."""
    get = getattr(torch._C, "_get_sdp_priority_order", None)
    order = [_BACKEND_NAMES[b] for b in get() if b in _BACKEND_NAMES] if get is not None else _DEFAULT_ORDER
    if order == _DEFAULT_ORDER and _cudnn_preferred(major, minor):
        return ["cudnn", "flash", "efficient", "math"]
    return order


@functools.cache
def _cudnn_version() -> int:
    """The cuDNN runtime torch loads (0 when the build has none): sdp_utils reads the runtime's version."""
    try:
        return int(torch.backends.cudnn.version() or 0)
    except Exception:  # a build without cuDNN, or a library that does not load
        return 0


def _cudnn_preferred(major: int, minor: int) -> bool:
    """sdp_utils' check_prefer_cudnn_attention: cuDNN attention first on sm90 and sm10x with a cuDNN runtime
    newer than 9.15 (builds for CUDA 12: x.0 and x.3 boards only), unless TORCH_CUDNN_SDPA_DEPRIORITIZED is set.
    A real H200 with torch 2.11.0+cu130 and cuDNN 9.19 ran cuDNN attention for bf16 (tests/data/gpu/h200,
    sdpa_causal_bf16), and native mode picks it with torch 2.11 and 2.15 on an H200, not on an A100."""
    if os.environ.get("TORCH_CUDNN_SDPA_DEPRIORITIZED", "").strip().lower() in ("1", "true", "yes", "on", "y"):
        return False
    if _cudnn_version() <= 91500 or major not in (9, 10):
        return False
    cuda = torch.version.cuda or ""
    return release(cuda) >= (13, 0) or minor in (0, 3)


def _flash_takes(major: int, q: torch.Tensor, attn_mask: Any) -> bool:
    head = q.shape[-1]
    return (torch.backends.cuda.flash_sdp_enabled() and major >= 8 and q.dtype in _HALF and attn_mask is None
            and head <= 256 and head % 8 == 0)


def _efficient_takes(major: int, q: torch.Tensor) -> bool:
    if not torch.backends.cuda.mem_efficient_sdp_enabled() or major < 5:
        return False
    if q.dtype is torch.bfloat16:
        return major >= 8 and q.shape[-1] % 8 == 0
    return q.dtype is torch.float32 or (q.dtype is torch.float16 and q.shape[-1] % 8 == 0)


def _cudnn_takes(mode: FakeCudaMode, major: int, minor: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 dropout_p: float) -> bool:
    """sdp_utils' can_use_cudnn_attention for dense inputs (fakecuda's attention takes no nested tensors)."""
    version = _cudnn_version()
    if not version or not torch.backends.cuda.cudnn_sdp_enabled():
        return False
    if torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled():
        return False
    if q.dtype not in _HALF or (q.dtype is torch.bfloat16 and major < 8) or not (8, 0) <= (major, minor) <= (12, 1):
        return False
    if dropout_p > 0 and (91100 < version < 91400 or (
            mode.runtime.since(CUDNN_ATTENTION_DROPOUT_SIXTEENTHS) and dropout_p * 16 != int(dropout_p * 16))):
        return False
    b, h, s_q, d_qk = q.shape
    s_k, d_v = k.shape[2], v.shape[3]
    if not s_q or not s_k or any(t.stride(-1) != 1 and t.shape[-1] != 1 for t in (q, k, v)):
        return False
    if b > 65535 or h > 65535 or d_qk % 8 or d_v % 8 or s_k == 1 or (dropout_p > 0 and s_q == 1):
        return False
    sm90_or_10x = (major, minor) == (9, 0) or major == 10
    d256 = sm90_or_10x and version > 92200 and not ((major, minor) == (10, 7) and version <= 92500)
    if d256:
        limit = 256
    elif sm90_or_10x and version >= 91100 and (d_qk, d_v) == (192, 128):
        limit = 192
    else:
        limit = 128
    if d_qk > limit or d_v > limit:
        return False
    if d256 and any(t.requires_grad for t in (q, k, v)):  # backward: these head sizes only
        return (d_qk <= 128 and d_v <= 128) or (d_qk, d_v) in ((192, 128), (256, 256))
    return True


@register(F.scaled_dot_product_attention)
def _sdpa(mode: FakeCudaMode, func, args, kwargs):
    index = mode._common_device(func, args, kwargs)
    if index is None:
        return badge_locals(mode, func(*args, **kwargs), args, kwargs)
    if _autocast_on("cuda"):
        args, kwargs = amp.cast_args(mode, func, args, kwargs)
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    bound = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False,
             **dict(zip(names, args, strict=False)), **kwargs}
    q, k, v, mask = bound["query"], bound["key"], bound["value"], bound["attn_mask"]
    backend = cuda_sdpa_backend(mode, index, q, k, v, mask, bound["dropout_p"], bound["is_causal"],
                                bound["enable_gqa"])
    if backend == "math":
        return mode._badge_outputs(func(*args, **kwargs), index, args)
    out = fused.attention(q, k, v, mask, bound["dropout_p"], bound["is_causal"], bound["scale"], backend, index,
                          mode.tracker)
    return mode._badge_outputs(out, index, ())


def _cuda_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    out = torch.matmul(x, weight.t())
    return out.add_(bias)


@register(F.linear)
def _linear(mode: FakeCudaMode, func, args, kwargs):
    names = ("input", "weight", "bias")
    bound = {"bias": None, **dict(zip(names, args, strict=False)), **kwargs}
    x, weight, bias = bound["input"], bound["weight"], bound["bias"]
    if (bias is None or not isinstance(x, torch.Tensor) or x.dim() in (0, 2) or
            (x.is_contiguous() and (x.dim() == 3 or bias.dim() == 1))):
        return mode.run_default(func, args, kwargs)
    index = mode._common_device(func, args, kwargs)
    if index is None or not all(type(t) in FAKE_TYPES for t in (x, weight, bias)):
        return mode.run_default(func, args, kwargs)
    if _autocast_on("cuda"):
        args, kwargs = amp.cast_args(mode, func, args, kwargs)
        bound = {"bias": None, **dict(zip(names, args, strict=False)), **kwargs}
        x, weight, bias = bound["input"], bound["weight"], bound["bias"]
    with torch.autocast("cuda", enabled=False):
        return under_mode(mode, _cuda_linear)(x, weight, bias)


@register(F.rms_norm)
def _rms_norm(mode: FakeCudaMode, func, args, kwargs):
    names = ("input", "normalized_shape", "weight", "eps")
    bound = {"weight": None, "eps": None, **dict(zip(names, args, strict=False)), **kwargs}
    x, weight = bound["input"], bound["weight"]
    index = mode._common_device(func, args, kwargs)
    if (index is None or type(x) not in FAKE_TYPES or not x.dtype.is_floating_point or
            (weight is not None and type(weight) not in FAKE_TYPES)):
        return mode.run_default(func, args, kwargs)
    if _autocast_on("cuda"):
        args, kwargs = amp.cast_args(mode, func, args, kwargs)
        bound = {"weight": None, "eps": None, **dict(zip(names, args, strict=False)), **kwargs}
    shape = bound["normalized_shape"]
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    out = fused.rms_norm(bound["input"], shape, bound["weight"], bound["eps"], index, mode.tracker)
    return mode._badge_outputs(out, index, ())


_BATCH_NORM_TRAINING = {torch.native_batch_norm: 5, torch._native_batch_norm_legit: 5,
                        torch._native_batch_norm_legit_no_training: None}


@register(*_BATCH_NORM_TRAINING)
def _batch_norm_op(mode: FakeCudaMode, func, args, kwargs):
    """Batch norm's ATen op called directly: CUDA's kernel allocates the saved mean and inverse std, one per
    channel in the accumulation type, in inference too, where the CPU build returns empty ones. The H200 (torch
    2.11, op database native_batch_norm#1, _native_batch_norm_legit#1) shows them; native mode too (output, then
    both). nn.BatchNorm's path on CUDA is cuDNN's, which keeps none in inference, as the CPU build does."""
    out = mode.run_default(func, args, kwargs)
    position = _BATCH_NORM_TRAINING[func]
    training = position is not None and (args[position] if position < len(args) else kwargs.get("training"))
    x = args[0] if args else kwargs.get("input")
    if training or type(x) not in FAKE_TYPES or x.dim() < 2 or out[1].numel():
        return out
    acc = torch.float32 if x.dtype in _HALF else x.dtype
    stats = tuple(mode._badge_outputs(torch.empty(x.shape[1], dtype=acc), x._fc_index, ()) for _ in range(2))
    return (out[0], *stats)


class _Skip(threading.local):
    once = False  # a class default: F's every call reads it (see _has_torch_function_but_once)


_skip = _Skip()
_has_torch_function = torch.overrides.has_torch_function


def _has_torch_function_but_once(args) -> bool:
    if _skip.once:
        _skip.once = False
        return False
    return _has_torch_function(args)


@register(F.multi_head_attention_forward)
def _multi_head_attention(mode: FakeCudaMode, func, args, kwargs):
    """nn.MultiheadAttention's body (projections, attention, dropout) runs under the mode, so each inner call
    takes CUDA's path (the fused attention above, autocast per op) instead of the composite running on the CPU
    as one call. Its own has_torch_function check would hand the call straight back here: skipped once."""
    if mode._common_device(func, args, kwargs) is None:
        return mode.run_default(func, args, kwargs)
    _skip.once = True
    try:
        return under_mode(mode, func)(*args, **kwargs)
    finally:
        _skip.once = False


def replacements() -> list[tuple[Any, str, Any]]:
    """(module, name, value) pairs cuda_api installs and restores with its other replacements: fake CUDA tensors
    foreach- and fused-eligible in torch.optim and torch.utils (clip_grad_norm_); the check that
    multi-head attention skips once (above)."""
    import importlib

    pairs = [(F, "has_torch_function", _has_torch_function_but_once)]
    # torch.optim's __init__ deletes its submodules' names, so they are looked up, not imported as attributes
    for module in map(importlib.import_module, ("torch.optim.optimizer", "torch.utils._foreach_utils")):
        current = getattr(module, "_foreach_supported_types", None)
        if isinstance(current, list):
            pairs.append((module, "_foreach_supported_types", [*current, *sorted(FAKE_TYPES, key=str)]))
    return pairs
