"""torch.autocast("cuda") on fake CUDA tensors, with CUDA's cast rules (not the CPU's).

A fake CUDA tensor is a CPU tensor to the dispatcher, so the CUDA autocast state torch.autocast("cuda") sets
never reaches a kernel (it gates the AutocastCUDA dispatch key; CPU tensors carry AutocastCPU). Enabling CPU
autocast instead would apply the CPU op lists, which differ from CUDA's (which ops run in float32, which
promote). So FakeCudaMode, which sees every torch call from Python, applies CUDA's rules itself while
torch.is_autocast_enabled("cuda") is on: the policy of a function decides how its fake CUDA floating inputs
are cast (float64 is never touched, CPU tensors neither, out= calls and explicit dtype= calls are left alone).
The casts are real ops, so autograd records them and the allocator model is charged for the copies.

The op lists are CUDA's, as the AMP documentation states them ("CUDA Ops that can autocast to float16/float32",
"promote to the widest input type") plus the ops torch's own CUDA autocast test list exercises; the tests run
torch's list (torch.testing._internal.autocast_test_lists) against this table.

Two details of CUDA's autocast that decide when the copies are allocated and freed (found against native mode's
allocator trace): its wrappers cast the arguments of a call right to left (C++ leaves argument evaluation order
open and GCC, which builds PyTorch, goes right to left), and it caches the casts of leaf tensors that require
grad (parameters) until the outermost autocast region ends (torch.clear_autocast_cache), so a weight used twice
is cast once and its low-precision copy lives as long as the region.

Known difference: torch's autocast runs at the ATen level, so composite ops decompose and each inner op gets its
rule. Here a Python-level composite is one call; the common ones are given the rule of their result (cross
entropy is float32 because its log_softmax is; multi-head attention ends in a linear projection).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from fakegpu.fakecuda.tensor import FAKE_TYPES, badge

LOWER = "lower"       # cast to the autocast dtype (float16 or bfloat16)
FP32 = "fp32"         # cast to float32
OPT_DTYPE = "opt"     # float32 unless the caller passed dtype=
PROMOTE = "promote"   # cast to the widest floating type among the inputs
BANNED = "banned"     # raise, as CUDA autocast does

_TABLE: dict[str, tuple[str, ...]] = {
    LOWER: (
        "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
        "conv_transpose3d", "convolution", "cudnn_convolution", "cudnn_convolution_transpose", "prelu", "addmm",
        "addmv", "addr", "matmul", "einsum", "mm", "mv", "vecdot", "linalg_vecdot", "linear", "addbmm", "baddbmm",
        "bmm", "chain_matmul", "multi_dot", "linalg_multi_dot", "lstm_cell", "gru_cell", "rnn_tanh_cell",
        "rnn_relu_cell",
        "scaled_dot_product_attention", "__matmul__", "__rmatmul__",
        "multi_head_attention_forward",  # a composite whose result comes from its output projection (a linear)
    ),
    FP32: (
        "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
        "sinh", "tan", "pow", "__pow__", "__rpow__", "softplus", "layer_norm", "native_layer_norm", "rms_norm",
        "group_norm", "frobenius_norm", "nuclear_norm", "cosine_similarity", "poisson_nll_loss",
        "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss",
        "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
        "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist",
        "pdist", "cdist", "renorm", "logsumexp", "norm", "normalize",
        # composites whose first op is log_softmax (float32), so their result is float32 on CUDA too
        "cross_entropy", "cross_entropy_loss",
    ),
    OPT_DTYPE: ("prod", "softmax", "log_softmax", "cumprod", "cumsum", "vector_norm", "matrix_norm",
                "linalg_vector_norm", "linalg_matrix_norm", "sum"),
    PROMOTE: ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "grid_sample",
              "index_put", "tensordot", "scatter_add"),
    BANNED: ("binary_cross_entropy",),
}

_NAMESPACES = (torch, torch.Tensor, F, torch._C._nn, torch.linalg, torch._C._linalg, torch._C._VariableFunctions)

BCE_BANNED = (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
    "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
    "safe to autocast."
)


def _build() -> dict[Any, str]:
    policy: dict[Any, str] = {}
    for kind, names in _TABLE.items():
        for name in names:
            for ns in _NAMESPACES:
                fn = getattr(ns, name, None)
                if fn is not None:
                    policy[fn] = kind
    return policy


POLICY = _build()
_is_enabled = torch.is_autocast_enabled
_get_dtype = torch.get_autocast_dtype


def enabled() -> bool:
    return _is_enabled("cuda")


def _eligible(x: Any) -> bool:
    return type(x) in FAKE_TYPES and x.is_floating_point() and x.dtype is not torch.float64


def _widest(args: tuple, kwargs: dict) -> torch.dtype:
    current = _get_dtype("cuda")
    for group in (args, kwargs.values()):
        for a in group:
            items = a if isinstance(a, (list, tuple)) else (a,)
            for x in items:
                if _eligible(x):
                    current = torch.promote_types(current, x.dtype)
    return current


def cast_args(mode, func, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The arguments `func` runs with under CUDA autocast; unchanged when its policy does not apply."""
    kind = POLICY.get(func)
    if kind is None or kwargs.get("out") is not None:
        return args, kwargs
    if kind == BANNED:
        raise RuntimeError(BCE_BANNED)
    if kind == OPT_DTYPE:
        if kwargs.get("dtype") is not None:
            return args, kwargs
        target = torch.float32
    elif kind == FP32:
        target = torch.float32
    elif kind == LOWER:
        target = _get_dtype("cuda")
    else:
        target = _widest(args, kwargs)

    def cast(x: Any) -> Any:
        if _eligible(x) and x.dtype is not target:
            return _cached_cast(mode, x, target)
        if type(x) is list or type(x) is tuple:
            return type(x)(cast(y) for y in x)
        return x

    cast_kwargs = {k: cast(kwargs[k]) for k in reversed(list(kwargs))}
    cast_args = [cast(a) for a in reversed(args)]
    return tuple(reversed(cast_args)), {k: cast_kwargs[k] for k in kwargs}


# (id of the leaf, target dtype) -> (the leaf, its cast); the leaf is held so its id cannot be reused
_cache: dict[tuple[int, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}
_clear_autocast_cache = torch.clear_autocast_cache


def _cached_cast(mode, x: torch.Tensor, target: torch.dtype) -> torch.Tensor:
    # autocast's own test (cached_cast): float32 leaves that require grad, cast down, not views
    cacheable = (x.is_leaf and x.requires_grad and x.dtype is torch.float32 and target is _get_dtype("cuda")
                 and not x._is_view() and torch.is_autocast_cache_enabled())
    key = (id(x), target)
    if cacheable:
        hit = _cache.get(key)
        if hit is not None and hit[0] is x:
            return hit[1]
    out = badge(x.to(target), x._fc_index, mode.tracker)
    if cacheable:
        _cache[key] = (x, out)
    return out


def clear_autocast_cache() -> None:
    """torch.clear_autocast_cache, which autocast's outermost exit calls, clearing fakecuda's cache as well."""
    _cache.clear()
    _clear_autocast_cache()


def replacements() -> list[tuple[Any, str, Any]]:
    return [(torch, "clear_autocast_cache", clear_autocast_cache)]
