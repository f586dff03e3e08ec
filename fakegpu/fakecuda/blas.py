"""Matrix products on fake CUDA: CUDA's autocast rule, then the cuBLAS / cuBLASLt workspace they take.

The products are ordinary ops otherwise; these handlers add the workspace accounting of workspace.py after the
output is allocated (the order the real call allocates in). Products inside autograd's backward run in C++ and
are not seen here; the forward's first product already creates what persists.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fakegpu.fakecuda import amp
from fakegpu.fakecuda.dtensor import badge_locals
from fakegpu.fakecuda.mode import FakeCudaMode, register

_NAMES = ("mm", "matmul", "bmm", "addmm", "baddbmm", "addbmm", "mv", "addmv", "linear", "__matmul__",
          "__rmatmul__", "chain_matmul", "multi_dot", "linalg_multi_dot", "einsum", "tensordot")
_NAMESPACES = (torch, torch.Tensor, F, torch._C._nn, torch.linalg, torch._C._linalg)
GEMMS = {fn for name in _NAMES for ns in _NAMESPACES if (fn := getattr(ns, name, None)) is not None}
_LINEARS = {F.linear, torch._C._nn.linear}
_ADDMMS = {torch.addmm, torch.Tensor.addmm}
_autocast_on = torch.is_autocast_enabled


def uses_lt(func, args: tuple, kwargs: dict) -> bool:
    """Whether torch routes this call to cuBLASLt's fused bias GEMM (a 1-D bias added to a 2-D product)."""
    if func in _LINEARS:
        bias = args[2] if len(args) > 2 else kwargs.get("bias")
        return isinstance(bias, torch.Tensor) and bias.dim() == 1
    if func in _ADDMMS:
        bias = args[0] if args else kwargs.get("input")
        return isinstance(bias, torch.Tensor) and bias.dim() == 1
    return False


@register(*GEMMS)
def _gemm(mode: FakeCudaMode, func, args, kwargs):
    index = mode._common_device(func, args, kwargs)
    if index is None:  # CPU tensors, or DTensors (whose local products are not seen here)
        return badge_locals(mode, func(*args, **kwargs), args, kwargs)
    if _autocast_on("cuda"):
        args, kwargs = amp.cast_args(mode, func, args, kwargs)
    out = mode._badge_outputs(func(*args, **kwargs), index, args)
    workspaces = mode.runtime.workspaces
    if workspaces is not None:
        workspaces.after_gemm(index, uses_lt(func, args, kwargs))
    return out
