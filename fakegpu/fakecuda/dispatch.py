"""Memory charged where CUDA allocates it: below autograd, at every ATen op, backward included.

FakeCudaMode (a TorchFunctionMode) sees what Python calls. The CUDA path allocates more than that: the autograd
engine runs backward formulas in C++ (gradients, their temporaries, the weight gradients it accumulates), and
composite ops allocate intermediates that never reach Python. None of those pass through a function mode, so
before this module they were charged late (when Python first read `.grad`) or never, and peaks came out 15-80%
low against native mode, which runs PyTorch's real CUDA path on our simulated memory.

ChargeMode is a TorchDispatchMode: the dispatcher calls it for every ATen op below autograd, in forward and in
the engine's backward (the engine carries the dispatch-mode stack to the Python-free C++ it runs). After the CPU
kernel returns, each fresh output storage is charged to the fake device of the op's inputs, and it is returned
when the storage dies (the same StorageTracker, so a storage is charged once whichever mode sees it first).
The device of an input is its badge when it has one, else the device its storage is charged to, which is how
a gradient made in C++ (a plain CPU tensor to Python) is known to live on cuda:N.

What the CUDA kernels add beyond their outputs is modeled per op here too: the cuBLAS / cuBLASLt workspace
around each matrix product (workspace.py), in forward and backward alike.

Device moves and factories are charged by FakeCudaMode's handlers, which know the target device; they run their
CPU op with this mode suspended (`suspended()`), since to the dispatcher a copy to cuda:1 and a copy to the CPU
are the same CPU op. Tensor subclasses (DTensor) are left to their own dispatch; their local tensors are
charged as before, by FakeCudaMode.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fakegpu.fakecuda.tensor import FAKE_TYPES, StorageTracker

aten = torch.ops.aten
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_local = threading.local()

# Matrix products that go to cuBLAS on CUDA (after the dispatcher has decomposed matmul/linear/einsum).
_GEMMS = {aten.mm, aten.addmm, aten.bmm, aten.baddbmm, aten.addbmm, aten.mv, aten.addmv, aten._addmm_activation}
# addmm with a 1-D bias is cuBLASLt's fused bias GEMM (linear's forward), with a workspace of its own.
_LT = {aten.addmm, aten._addmm_activation}


_WRITES: dict[Any, tuple[tuple[int, str], ...]] = {}


def _written(func, args: tuple, kwargs: dict) -> set[int]:
    """Storages of the arguments the op writes into (in-place self, out=, batch norm's running stats): its
    outputs that alias them belong to someone already, possibly a genuine CPU tensor."""
    spots = _WRITES.get(func)
    if spots is None:
        spots = _WRITES[func] = tuple((i, a.name) for i, a in enumerate(func._schema.arguments)
                                      if a.alias_info is not None and a.alias_info.is_write)
    keys = set()
    for i, name in spots:
        t = args[i] if i < len(args) else kwargs.get(name)
        for x in (t if isinstance(t, (list, tuple)) else (t,)):
            if isinstance(x, torch.Tensor) and x.layout is torch.strided and x.device.type == "cpu":
                keys.add(x.untyped_storage()._cdata)
    return keys


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Run ops without charging their outputs here (the caller charges them, to the device it knows)."""
    depth = getattr(_local, "off", 0)
    _local.off = depth + 1
    try:
        yield
    finally:
        _local.off = depth


class ChargeMode(TorchDispatchMode):
    def __init__(self, tracker: StorageTracker) -> None:
        super().__init__()
        self.tracker = tracker
        self.live = tracker.live
        self.runtime = tracker.runtime

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if getattr(_local, "off", 0):
            return out
        index = self._device(args, kwargs)
        if index is None:
            return out
        self._charge(out, index, _written(func, args, kwargs))
        packet = func.overloadpacket
        if packet in _GEMMS and _calls_cublas(packet, args):
            self._gemm(packet, index, args, kwargs)
        return out

    def _gemm(self, packet, index: int, args: tuple, kwargs: dict) -> None:
        """What a cuBLAS call takes beyond its output, for the call only: a contiguous copy of each operand
        whose layout cuBLAS cannot read (ATen's prepare_matrix_for_cublas; a stride-0 gradient from sum's
        backward is one), then the workspace."""
        copies = [self.runtime.malloc(index, n) for n in _operand_copies(packet, args)]
        try:
            workspaces = self.runtime.workspaces
            if workspaces is not None:
                workspaces.after_gemm(index, packet in _LT and _uses_lt(args, kwargs))
        finally:
            for block in copies:
                self.runtime.free(index, block)

    def _index_of(self, t: Any) -> int | None:
        cls = type(t)
        if cls in FAKE_TYPES:
            return t._fc_index
        if cls in _PLAIN and t.layout is torch.strided and t.device.type == "cpu":
            entry = self.live.get(t.untyped_storage()._cdata)
            if entry is not None:
                return entry[0]
        return None

    def _device(self, args: tuple, kwargs: dict) -> int | None:
        for group in (args, kwargs.values()):
            for a in group:
                if isinstance(a, torch.Tensor):
                    index = self._index_of(a)
                    if index is not None:
                        return index
                elif type(a) is list or type(a) is tuple:
                    for x in a:
                        if isinstance(x, torch.Tensor):
                            index = self._index_of(x)
                            if index is not None:
                                return index
        return None

    def _charge(self, out: Any, index: int, written: set[int]) -> None:
        for o in (out if type(out) is tuple or type(out) is list else (out,)):
            if type(o) in _PLAIN and o.layout is torch.strided and o.device.type == "cpu" and (
                    not written or o.untyped_storage()._cdata not in written):
                self.tracker.account(o, index)


def _cublas_readable(t: torch.Tensor) -> bool:
    """Whether cuBLAS reads the last two dimensions as they are: one of them unit-stride, the other a leading
    dimension at least as long as the rows it steps over (column- or row-major)."""
    rows, cols = t.shape[-2], t.shape[-1]
    s_rows, s_cols = t.stride(-2), t.stride(-1)
    if s_cols == 1 and s_rows >= max(1, cols):
        return True
    return s_rows == 1 and s_cols >= max(1, rows)


def _operand_copies(packet, args: tuple) -> list[int]:
    """Bytes of the operands ATen copies to a contiguous buffer before the call."""
    if packet in (aten.mm, aten.bmm):
        operands = args[:2]
    elif packet in (aten.addmm, aten.baddbmm, aten.addbmm, aten._addmm_activation):
        operands = args[1:3]
    else:
        return []  # matrix-vector products take any stride
    return [t.numel() * t.element_size() for t in operands
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.numel() and not _cublas_readable(t)]


def _calls_cublas(packet, args: tuple) -> bool:
    """ATen answers a product with an empty operand (zero rows, columns or inner dimension) without cuBLAS."""
    first = 1 if packet in (aten.addmm, aten.baddbmm, aten.addbmm, aten._addmm_activation, aten.addmv) else 0
    return all(t.numel() for t in args[first:first + 2] if isinstance(t, torch.Tensor))


_LT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _uses_lt(args: tuple, kwargs: dict) -> bool:
    """ATen's useLtInterface for addmm: a contiguous 1-D bias as long as the product's columns and beta 1
    (linear's forward with a bias, typically); the op database's addmm and linear samples agree with native mode."""
    if len(args) < 3:
        return False
    bias, a, b = args[:3]
    beta = kwargs.get("beta", args[3] if len(args) > 3 else 1)
    return (isinstance(bias, torch.Tensor) and bias.dim() == 1 and beta == 1 and bias.is_contiguous()
            and a.dim() == 2 and b.dim() == 2 and bias.shape[0] == b.shape[1] and a.dtype in _LT_DTYPES)
