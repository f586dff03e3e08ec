"""Memory charged where CUDA allocates it: below autograd, at every ATen op, backward included.

FakeCudaMode (a TorchFunctionMode) sees what Python calls. The CUDA path allocates more than that: the autograd
engine runs backward formulas in C++ (gradients, their temporaries, the weight gradients it accumulates), and
composite ops allocate intermediates that never reach Python. None of those pass through a function mode, so
before this module they were charged late (when Python first read `.grad`) or never, and peaks came out 15-80%
low against native mode, which runs PyTorch's real CUDA path on our simulated memory.

The dispatcher calls a hook for every ATen op below autograd, in forward and in the engine's backward (the engine
carries the thread's dispatch state to the C++ it runs): ChargeHook, a C++ fallback on the `Fake` dispatch key
(charge_hook.cpp; compiled per torch by extension.py), or where it is not built ChargeMode, a TorchDispatchMode.
Both call ChargeRules: after the CPU kernel returns, each fresh output storage is charged to the fake device of
the op's inputs, and it is returned when the storage dies (the same StorageTracker, so a storage is charged once
whichever hook or mode sees it first).
The device of an input is its badge when it has one, else the device its storage is charged to, which is how
a gradient made in C++ (a plain CPU tensor to Python) is known to live on cuda:N.

What the CUDA kernels add beyond their outputs is modeled per op here too: the cuBLAS / cuBLASLt workspace
around each matrix product (workspace.py) and the staging buffers of reductions split across blocks
(reduce.py), in forward and backward alike.

Device moves and factories are charged by FakeCudaMode's handlers, which know the target device; they run their
CPU op with this mode suspended (`suspended()`), since to the dispatcher a copy to cuda:1 and a copy to the CPU
are the same CPU op. Tensor subclasses (DTensor) are left to their own dispatch; their local tensors are
charged as before, by FakeCudaMode.
"""

from __future__ import annotations

import atexit
import contextlib
import difflib
import functools
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fakegpu.fakecuda import copies, fidelity, reduce
from fakegpu.fakecuda.backward import accumulated_in_place, in_backward
from fakegpu.fakecuda.errors import ModelGPULost, ModelOutOfMemory
from fakegpu.fakecuda.tensor import (
    FAKE_TYPES,
    FakeCudaParameter,
    FakeCudaTensor,
    StorageTracker,
    gpu_lost_error,
    storage_key,
)

aten = torch.ops.aten


class _Local(threading.local):
    # Class defaults: the hot path reads these per op, and a missing attribute costs ~1 us (an AttributeError
    # raised and caught) where a class default costs ~0.1.
    off = 0


_local = _Local()

# Matrix products that go to cuBLAS on CUDA (after the dispatcher has decomposed matmul/linear/einsum).
_GEMMS = {aten.mm, aten.addmm, aten.bmm, aten.baddbmm, aten.addbmm, aten.mv, aten.addmv, aten._addmm_activation}
# What runs on the tensor cores on a GPU (cuBLAS, cuDNN convolutions, fused attention): compute work, which a GPU's
# power and temperature follow most; every other op is memory work (native/nvml/model.c).
_TENSOR_CORE = _GEMMS | {aten.convolution, aten.convolution_backward, aten._scaled_dot_product_flash_attention,
                         aten._scaled_dot_product_efficient_attention, aten._scaled_dot_product_cudnn_attention,
                         aten._scaled_dot_product_flash_attention_backward,
                         aten._scaled_dot_product_efficient_attention_backward}
# addmm with a 1-D bias is cuBLASLt's fused bias GEMM (linear's forward), with a workspace of its own.
_LT = {aten.addmm, aten._addmm_activation}
# Ops PyTorch's CUDA backend runs through cuDNN (cudnn enabled, its default): their first call loads cuDNN's kernels.
_CUDNN = {aten.convolution, aten.convolution_backward, aten.cudnn_convolution, aten.cudnn_batch_norm}


# ops fidelity.py knows fakecuda's memory does not match CUDA's for: counted, so reports can say so
_GAP_PACKETS = {getattr(aten, n): n for n in (*fidelity.KNOWN, *fidelity.UNCHECKED) if hasattr(aten, n)}

# Ops whose CUDA kernel allocates its outputs in another order than it returns them (native mode's trace):
# dropout makes its mask before its output.
_ALLOCATION_ORDER = {aten.native_dropout.default: (1, 0)}

# Ops with a rule of their own in ChargeRules.after besides those the sets above name.
_OWN_RULES = {aten.convolution_backward, aten.copy_, aten.native_layer_norm, aten.native_layer_norm_backward}

_EMPTY: dict[str, Any] = {}
_NONE: frozenset[int] = frozenset()
_now_ns = time.monotonic_ns
_STRIDED = torch.strided
_no_torch_function = torch._C.DisableTorchFunction
_hook_ext: Any = None  # the C++ extension while a ChargeHook is installed
_FOREVER_NS = (1 << 63) - 1


def _write_spots(func) -> tuple[tuple[int, str], ...]:
    """The arguments (position, name) the op writes into: in-place self, out=, batch norm's running stats."""
    return tuple((i, a.name) for i, a in enumerate(func._schema.arguments)
                 if a.alias_info is not None and a.alias_info.is_write)


def _written(spots: tuple[tuple[int, str], ...], args: tuple, kwargs: dict) -> set[int]:
    """Storages of the arguments the op writes into: its outputs that alias them belong to someone already,
    possibly a genuine CPU tensor."""
    keys = set()
    for i, name in spots:
        t = args[i] if i < len(args) else kwargs.get(name)
        for x in (t if isinstance(t, (list, tuple)) else (t,)):
            if isinstance(x, torch.Tensor) and x.layout is _STRIDED and x.is_cpu:  # (a fake tensor's is_cpu is False)
                keys.add(storage_key(x))
    return keys


class _Plan:
    """What the charging mode does for one ATen overload, decided once (the dispatcher hands the same OpOverload
    object every call): which of the per-op rules apply, so the common op pays for none of them."""

    __slots__ = ("add", "compute", "cudnn", "gap", "gemm", "order", "packet", "reduction", "special", "writes")

    def __init__(self, func) -> None:
        packet = func.overloadpacket
        self.packet = packet
        self.compute = packet in _TENSOR_CORE
        self.add = func is aten.add.Tensor
        self.gap = _GAP_PACKETS.get(packet)
        self.cudnn = packet in _CUDNN
        self.gemm = packet in _GEMMS
        self.reduction = packet in _REDUCTIONS
        self.writes = _write_spots(func)
        self.order = _ALLOCATION_ORDER.get(func)
        self.special = (self.add or self.gap is not None or self.cudnn or self.gemm or self.reduction
                        or packet in _OWN_RULES)


# keyed by id(): OpOverload's own hash is Python code, and the dispatcher hands the same object at every call
_PLANS: dict[int, _Plan] = {}
_PLAN_OPS: list[Any] = []  # holds the overloads, so that no id in _PLANS is ever reused


def _plan(func) -> _Plan:
    plan = _PLANS[id(func)] = _Plan(func)
    _PLAN_OPS.append(func)
    return plan


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Run ops without charging their outputs here (the caller charges them, to the device it knows)."""
    depth = _local.off
    _local.off = depth + 1
    ext = _hook_ext
    # (the C++ hook off too: it would call the rules, which would only return)
    excluded = ext.set_excluded(True) if ext is not None else False
    try:
        yield
    finally:
        if ext is not None:
            ext.set_excluded(excluded)
        _local.off = depth


class ChargeRules:
    """What is charged for one ATen op, whichever hook the dispatcher calls: ChargeMode (Python) or ChargeHook (C++).
    Called after the op's CPU kernel ran, with its arguments and outputs as a TorchDispatchMode sees them."""

    def __init__(self, tracker: StorageTracker) -> None:
        self.tracker = tracker
        self.live = tracker.live
        self.runtime = tracker.runtime
        # deactivate()d: a ChargeMode left on a thread's stack (threads.py) passes ops through
        self.retired = False

    # -- the C++ hook's entries (charge_hook.cpp): `Fake` is excluded while they run, so their ops are not charged

    def hook_after(self, func, args: tuple, kwargs: dict, out: Any, started: int) -> None:
        try:
            if in_backward():  # (see ChargeMode: the bookkeeping's attribute reads, not through the function mode)
                with _no_torch_function():
                    self.after(func, args, kwargs, out, started, True)
            else:
                self.after(func, args, kwargs, out, started, False)
        except ModelGPULost as lost:
            raise gpu_lost_error(lost) from None
        except ModelOutOfMemory as oom:  # a buffer the op takes for the call (an operand copy, staging): torch's OOM
            raise torch.cuda.OutOfMemoryError(oom.message) from None

    def hook_factory(self, func, args: tuple, kwargs: dict, started: int) -> Any:
        try:
            if in_backward():
                with _no_torch_function():
                    return self.factory(func, args, kwargs, kwargs["device"], started)
            return self.factory(func, args, kwargs, kwargs["device"], started)
        except ModelGPULost as lost:
            raise gpu_lost_error(lost) from None
        except ModelOutOfMemory as oom:  # a buffer the op takes for the call (an operand copy, staging): torch's OOM
            raise torch.cuda.OutOfMemoryError(oom.message) from None

    # -- the C++ hook's fast path (charge_fast.cpp): the common op's charge in C++, these answer what it cannot know

    def fast_kind(self, func) -> int:
        """0 when `func` needs these rules (a rule of its own, outputs in another order), else 1 (memory work) or
        2 (tensor-core work): after() then only marks the device busy and charges the fresh outputs. A GEMM
        whose only rule is _gemm's adds FAST_GEMM and the bits that say how _gemm reads its arguments; cuDNN's
        convolution FAST_CUDNN, its backward FAST_CONVOLUTION_BACKWARD too, a reduction FAST_REDUCTION, layer norm
        FAST_LAYER_NORM(_BACKWARD), an add FAST_ADD (fast only with grad mode on), an op with a known gap FAST_GAP:
        the rules charge_fast.cpp runs for them, with what fast_gemm, fast_cudnn, fast_staging and fast_gap answer."""
        plan = _PLANS.get(id(func)) or _plan(func)
        kind = 2 if plan.compute else 1
        if plan.order is not None:
            return 0
        if not plan.special:
            return kind
        if plan.add:  # the engine's sums in backward (accumulated_in_place) run without grad mode: those stay here
            return kind | FAST_ADD
        if plan.gap is not None:
            kind |= FAST_GAP  # counted in runtime.gap_calls, under fast_gap's name
        if func is aten.convolution.default:  # the common op, once cuDNN is loaded (fast_cudnn)
            return kind | FAST_CUDNN
        if func is aten.convolution_backward.default:  # _convolution_backward's rule
            return kind | FAST_CUDNN | FAST_CONVOLUTION_BACKWARD
        if func is aten.native_layer_norm.default:  # its input's contiguous copy (_contiguous_copies)
            return kind | FAST_LAYER_NORM
        if func is aten.native_layer_norm_backward.default:  # its input's copy and dY's
            return kind | FAST_LAYER_NORM_BACKWARD
        packet = plan.packet
        if plan.cudnn or packet in _OWN_RULES:
            return 0
        if plan.gemm:
            if plan.reduction:
                return 0
            kind |= FAST_GEMM
            if packet in _BIAS_FIRST:
                kind |= FAST_GEMM_BIAS_FIRST
            if packet in _MATRIX_OPERANDS:
                kind |= FAST_GEMM_COPIES
            if packet in _LT:
                kind |= FAST_GEMM_LT
            return kind
        if plan.reduction:
            return kind | FAST_REDUCTION  # the common op, then _reduction's staging (fast_staging)
        return kind  # only a known gap to count

    def fast_gap(self, func) -> str:
        """The name runtime.gap_calls counts `func`'s calls under (one fast_kind marked FAST_GAP)."""
        return (_PLANS.get(id(func)) or _plan(func)).gap

    def fast_gemm(self, index: int) -> tuple[int, int, int]:
        """(whether the fast path may charge a GEMM on device `index` itself, the bytes of cuBLASLt's workspace for
        the call, of cuBLAS's). The first: GEMM_FAST where cuBLAS is loaded and workspaces are taken per call
        (Workspaces.after_gemm's branch without a held table, torch 2.15's default), which the fast path then takes
        and frees around the call as _gemm does; GEMM_NOT_YET before cuBLAS is loaded (the rules load it at the
        device's first GEMM: asked again at the next); GEMM_RULES for held workspaces (asked again only when the
        workspaces or their version change, as they do when cuda_api's size setters run)."""
        runtime = self.runtime
        workspaces = runtime.workspaces
        if workspaces is not None and workspaces.caching(index):
            return GEMM_RULES, 0, 0
        if "cublas" not in runtime.devices[index].context_parts:
            return GEMM_NOT_YET, 0, 0
        if workspaces is None:
            return GEMM_FAST, 0, 0
        return GEMM_FAST, workspaces.lt_bytes(index), workspaces.chosen_bytes(index)

    def fast_cudnn(self, index: int) -> bool:
        """Whether cuDNN is loaded on device `index` (its context part charged): the fast path then charges its ops;
        until then the rules do, and load it."""
        return "cudnn" in self.runtime.devices[index].context_parts

    def fast_staging(self, func, index: int, shape: tuple[int, ...], strides: tuple[int, ...], offset: int,
                     dtype: torch.dtype, dims: Any) -> tuple[int, ...]:
        """The bytes of the buffers a reduction takes for its launch (its staging buffer and semaphores, in the
        order _transient takes them; none when it is not split across blocks), for an input of this layout and the
        op's `dim` argument as it was given (dims); for convolution_backward, its bias gradient's sum over all but
        the channel dim. A pure function of these: the fast path asks once per distinct call and remembers."""
        if func is aten.convolution_backward.default:
            reduced, launch = _bias_gradient_sum(len(shape), dtype)
        else:
            reduced, launch = _dims_reduced(len(shape), dims), _REDUCTIONS[func.overloadpacket](dtype)
        if reduced is None:
            return ()
        return self._staging_sizes(index, shape, strides, offset, reduced, launch)

    def fast_window(self, index: int) -> tuple[int, int]:
        """(until when, CLOCK_MONOTONIC ns, the fast path may charge the device's ops without asking; its board).
        Runtime.ran and malloc owe nothing beyond busy time and the block while the device is initialized and
        launched and no fault board can speak (its quiet() answers without looking until it looks again)."""
        runtime = self.runtime
        dev = runtime.devices[index]
        if not dev.initialized or "first_launch" not in dev.context_parts:
            return 0, dev.board
        faults = runtime.faults
        if faults is None:
            return _FOREVER_NS, dev.board
        return (faults.quiet_until_ns() if faults.quiet() else 0), dev.board

    def fast_allocated(self, index: int, reserved: int, segments: int, oom: tuple[int, int] | None) -> None:
        """The fast path's malloc took a segment, released cached ones, or ran out (oom: the cudaMalloc size and
        the request): what Runtime.malloc and tensor.malloc do then; raises torch's OOM."""
        runtime = self.runtime
        try:
            if oom is not None:
                try:
                    runtime.devices[index].allocator._out_of_memory(*oom)
                except ModelOutOfMemory as error:
                    runtime.out_of_memory(error)
                    raise torch.cuda.OutOfMemoryError(error.message) from None
        finally:
            runtime.allocated(index, reserved, segments)

    def fast_busy(self, records: list[tuple[int, bool, int, int]]) -> None:
        """Busy time the fast path kept: (board, compute, started, ended) per op, in order."""
        on_busy = self.runtime.on_busy
        if on_busy is not None:
            for board, compute, started, ended in records:
                on_busy(board, compute, started, ended)

    # -- the rules

    def after(self, func, args: tuple, kwargs: dict, out: Any, started: int, backward: bool) -> None:
        """The op ran (since `started`, monotonic ns) and returned `out`: charge it to its inputs' fake device."""
        if _local.off:
            return
        index = self._device(args, kwargs)
        if index is None:
            return
        plan = _PLANS.get(id(func))
        if plan is None:
            plan = _plan(func)
        runtime = self.runtime
        runtime.ran(index, plan.compute, started)
        if not plan.special:  # the common op: its fresh outputs charged, nothing around them
            self._charge(out, index, _written(plan.writes, args, kwargs) if plan.writes else _NONE, plan.order)
            return
        if backward and plan.add:
            source = accumulated_in_place(self.tracker, args, kwargs, out)
            if source is not None and self.tracker.transfer(source, out):
                return
        packet = plan.packet
        if plan.gap is not None:
            calls = runtime.gap_calls
            calls[plan.gap] = calls.get(plan.gap, 0) + 1
        if plan.cudnn:
            runtime.loaded(index, "cudnn")
        if packet is aten.convolution_backward:
            self._convolution_backward(index, args, out)
            return
        if packet is aten.copy_:
            self._cross_device_copy(args)
            return
        held = [runtime.malloc(index, n) for n in _contiguous_copies(packet, args)]
        try:
            self._charge(out, index, _written(plan.writes, args, kwargs) if plan.writes else _NONE, plan.order)
            if packet is aten.native_layer_norm_backward and not _is_contiguous(args[0]):
                self._transient(index, [_nbytes(args[0])])  # dY, made contiguous inside the kernel
        finally:  # (an output that runs out of memory: the copies go back all the same)
            for block in reversed(held):
                runtime.free(index, block)
        if plan.gemm and _calls_cublas(packet, args):
            self._gemm(packet, index, args, kwargs)
        elif plan.reduction:
            self._reduction(func, index, args, kwargs)

    def factory(self, func, args: tuple, kwargs: dict, device: torch.device, started: int) -> Any:
        """A creation op for a CUDA device that reached the dispatcher: Python code running inside one of
        FakeCudaMode's handlers, where the mode is off the stack (torch's fractional max pooling draws its
        samples with `torch.rand(..., device=input.device)`, svd_lowrank its test matrix). Made on the CPU and
        charged to the fake device, as FakeCudaMode's factories are."""
        out = func(*args, **{**kwargs, "device": torch.device("cpu")})
        if not _local.off:
            index = self.runtime.current if device.index is None else device.index
            self.runtime.ran(index, False, started)
            self._charge(out, index, _NONE, _ALLOCATION_ORDER.get(func))
            if func is aten._to_copy.default and self._index_of(args[0]) is None:  # from the host
                self._transient(index, copies.to_device(args[0], out))
        return out

    def _cross_device_copy(self, args: tuple) -> None:
        """copy_ between the host and a fake device: its device buffers for the call (copies.py)."""
        dst, src = args[0], args[1]
        if not isinstance(src, torch.Tensor):
            return
        to_dev, from_dev = self._index_of(dst), self._index_of(src)
        non_blocking = bool(args[2]) if len(args) > 2 else False
        if to_dev is not None and from_dev is None:
            self._transient(to_dev, copies.to_device(src, dst))
        elif from_dev is not None and to_dev is None:
            self._transient(from_dev, copies.to_host(src, dst, non_blocking))

    def _transient(self, index: int, sizes: list[int]) -> None:
        """Buffers a kernel takes after its outputs and gives back before it returns (last taken, first freed)."""
        blocks = [self.runtime.malloc(index, n) for n in sizes if n]
        for block in reversed(blocks):
            self.runtime.free(index, block)

    def _convolution_backward(self, index: int, args: tuple, out: tuple) -> None:
        """cuDNN's backward, as ATen drives it: grad_output made contiguous first (a transposed gradient from a
        layer norm over channels-last features is not), grad_input and grad_weight, the copy freed, then
        grad_bias as a sum of grad_output over all but the channel dim (a split reduction, reduce.py)."""
        grad_output = args[0]
        copy = None if _is_contiguous(grad_output) else self.runtime.malloc(index, _nbytes(grad_output))
        grad_input, grad_weight, grad_bias = out
        try:
            for t in (grad_input, grad_weight):
                if t is not None:
                    self._charge(t, index)
        finally:  # (an output that runs out of memory: the copy goes back all the same)
            if copy is not None:
                self.runtime.free(index, copy)
        if grad_bias is not None:
            self._charge(grad_bias, index)
            self._staging(index, grad_output, *_bias_gradient_sum(grad_output.dim(), grad_output.dtype))

    def _staging(self, index: int, x: torch.Tensor, reduced: set[int], launch: reduce.Launch) -> None:
        self._transient(index, list(self._staging_sizes(index, tuple(x.shape), x.stride(), x.storage_offset(),
                                                        reduced, launch)))

    def _staging_sizes(self, index: int, shape: tuple[int, ...], strides: tuple[int, ...], offset: int,
                       reduced: set[int], launch: reduce.Launch) -> tuple[int, ...]:
        """The staging buffer's and semaphores' bytes, in the order they are taken; none when the reduction is not
        split across blocks."""
        profile = self.runtime.devices[index].profile
        sizes = _scratch(shape, strides, frozenset(reduced), launch, profile.sm_count,
                         profile.data["sm_limits"]["max_threads_per_sm"], offset)
        return tuple(n for n in sizes if n) if sizes[0] else ()

    def _reduction(self, func, index: int, args: tuple, kwargs: dict) -> None:
        """A reduction split across blocks: its staging buffer and semaphores, for the launch only (allocated
        after the output, freed semaphores first, as Reduce.cuh's locals are)."""
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor) or x.layout is not torch.strided:
            return
        reduced = _reduced_dims(func, x, args, kwargs)
        if reduced is None:
            return
        self._staging(index, x, reduced, _REDUCTIONS[func.overloadpacket](x.dtype))

    def _gemm(self, packet, index: int, args: tuple, kwargs: dict) -> None:
        """What a cuBLAS call takes beyond its output, for the call only: a contiguous copy of each operand
        whose layout cuBLAS cannot read (ATen's prepare_matrix_for_cublas; a stride-0 gradient from sum's
        backward is one), then the workspace."""
        self.runtime.loaded(index, "cublas")
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
        if (cls is torch.Tensor or cls is torch.nn.Parameter) and t.layout is _STRIDED and t.is_cpu:
            entry = self.live.get(storage_key(t))
            if entry is not None:
                return entry[0]
        return None

    def _device(self, args: tuple, kwargs: dict) -> int | None:
        for a in args:
            cls = type(a)
            if cls in FAKE_TYPES:  # the common case, first: a badged argument
                return a._fc_index
            if cls is list or cls is tuple:
                for x in a:
                    if isinstance(x, torch.Tensor):
                        index = self._index_of(x)
                        if index is not None:
                            return index
            elif isinstance(a, torch.Tensor):
                index = self._index_of(a)
                if index is not None:
                    return index
        for a in kwargs.values():
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

    def _charge(self, out: Any, index: int, written: set[int] | frozenset[int] = _NONE,
                order: tuple[int, ...] | None = None) -> None:
        """Charge the op's fresh output storages (in the kernel's allocation order), not those it wrote into."""
        if type(out) is torch.Tensor:  # the common case: one output
            if out.layout is _STRIDED and out.is_cpu and (not written or storage_key(out) not in written):
                self.tracker.account(out, index)
            return
        outs = out if type(out) is tuple or type(out) is list else (out,)
        if order is not None:
            outs = [outs[i] for i in order]
        for o in outs:
            if (type(o) is torch.Tensor or type(o) is torch.nn.Parameter) and o.layout is _STRIDED and o.is_cpu and (
                    not written or storage_key(o) not in written):
                self.tracker.account(o, index)


class ChargeMode(TorchDispatchMode):
    """The rules' Python hook: a TorchDispatchMode, for a torch the C++ hook is not built for."""

    def __init__(self, tracker: StorageTracker, rules: ChargeRules | None = None) -> None:
        super().__init__()
        self.rules = rules if rules is not None else ChargeRules(tracker)

    def in_thread(self) -> ChargeMode:
        """The same rules on another thread: a mode of its own to push there (a dispatch mode keeps per-instance
        state while entered)."""
        return ChargeMode(self.rules.tracker, self.rules)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.rules.retired:
            return func(*args, **(kwargs or {}))
        try:
            if in_backward():
                # The engine's ops reach here first, with the function mode on the stack: calling them from Python
                # would hand badged (fake CUDA) arguments to the function mode, which would charge the outputs
                # before the rules can put the kernel's own buffers in CUDA's order around them; and every tensor
                # attribute the bookkeeping reads would be a trip through that mode.
                with _no_torch_function():
                    return self._dispatch(func, args, kwargs or _EMPTY, True)
            return self._dispatch(func, args, kwargs or _EMPTY, False)
        except ModelGPULost as lost:  # an op on a GPU that fell off the bus, or one lost by this op's allocations
            raise gpu_lost_error(lost) from None
        except ModelOutOfMemory as oom:
            raise torch.cuda.OutOfMemoryError(oom.message) from None

    def _dispatch(self, func, args: tuple, kwargs: dict, backward: bool) -> Any:
        started = _now_ns()  # the op's CPU time is the device's busy time (shared_state.py)
        if kwargs:
            device = kwargs.get("device")
            # (device="cpu" says nothing: a fake tensor's options name the CPU, so C++ code that means "the
            # input's device", autograd's backward of a dtype conversion for one, asks for it)
            if type(device) is torch.device and device.type == "cuda":
                return self.rules.factory(func, args, kwargs, device, started)
        out = func(*args, **kwargs)
        self.rules.after(func, args, kwargs, out, started, backward)
        return out


class ChargeHook:
    """The rules' C++ hook (charge_hook.cpp, extension.py): a dispatcher fallback turned on for this thread as a
    mode is, which runs each op itself and calls Python for the bookkeeping only. Raises ExtensionUnavailable
    when the extension is not built for this torch. One at a time: the extension holds one set of rules."""

    _installed: ChargeHook | None = None

    def __init__(self, tracker: StorageTracker, fast: bool = True) -> None:
        from fakegpu.fakecuda import extension

        self.rules = ChargeRules(tracker)
        self.ext = extension.load()
        self.fast = fast  # the common op charged in C++ (charge_fast.cpp); off: every op through the Python rules
        self._was_enabled = False

    def __enter__(self) -> ChargeHook:
        if ChargeHook._installed is not None:
            raise RuntimeError("fakecuda's C++ charging hook is already installed")
        global _hook_ext
        self.ext.install(self.rules.hook_after, self.rules.hook_factory)
        # storages the fast path charged are watched through their memory (storage_watch.cpp), which a resize or a
        # move to shared memory swaps
        self.rules.tracker.after_swap = self.ext.rewatch_swapped
        self.rules.tracker.native = self.ext.StorageNative(self.rules.live, self.rules.runtime.devices)
        self.rules.runtime.busy_ring = self.ext.BusyRing
        if self.fast:
            self._install_fast()
        ChargeHook._installed = self
        _hook_ext = self.ext
        self._was_enabled = self.ext.enabled()
        self.ext.set_enabled(True)
        return self

    @contextlib.contextmanager
    def in_thread(self) -> Iterator[None]:
        """The hook on for the calling thread (another than the one that entered it) while inside."""
        was = self.ext.enabled()
        self.ext.set_enabled(True)
        try:
            yield
        finally:
            self.ext.set_enabled(was)

    def __exit__(self, *exc: object) -> None:
        global _hook_ext
        self.ext.set_enabled(self._was_enabled)
        self._uninstall_fast()
        self.ext.uninstall()
        self.rules.tracker.native = None
        self.rules.runtime.busy_ring = None  # (a ring already open stays the state file's writer until it closes)
        ChargeHook._installed = None
        _hook_ext = None

    def set_fast(self, on: bool) -> bool:
        """The fast path on or off while installed (a bench's or a test's comparison); the previous setting."""
        was, self.fast = self.fast, on
        if ChargeHook._installed is self and on != was:
            if on:
                self._install_fast()
            else:
                self._uninstall_fast()
        return was

    def _install_fast(self) -> None:
        runtime = self.rules.runtime
        self.ext.fast_install(self.rules, self.rules.live, runtime.devices, runtime.thread,
                              (FakeCudaTensor, FakeCudaParameter))
        runtime.busy_backlog = self.ext.fast_drain
        # a program that ends without deactivating: its last busy time reaches the state file before the publisher
        # closes it (registered after the publisher's close, so run before it)
        atexit.register(self.ext.fast_drain)

    def _uninstall_fast(self) -> None:
        atexit.unregister(self.ext.fast_drain)
        self.ext.fast_uninstall()  # (its busy time handed over first)
        self.rules.runtime.busy_backlog = None


HOOKS = ("auto", "cxx", "python")


def charging(tracker: StorageTracker, hook: str | None = None) -> ChargeMode | ChargeHook:
    """The hook that charges ATen ops, not yet entered: `hook` (else $FAKEGPU_FAKECUDA_HOOK, else "auto") is "cxx"
    (the C++ extension, an error when it is not built), "python" (the TorchDispatchMode) or "auto" (C++ where it
    is built for this torch, else Python)."""
    from fakegpu.fakecuda.extension import ExtensionUnavailable

    choice = hook if hook is not None else (os.environ.get("FAKEGPU_FAKECUDA_HOOK") or "auto")
    if choice not in HOOKS:
        # (a long value is no near miss, and the message echoes only its start)
        close = difflib.get_close_matches(choice, HOOKS, n=1) if len(choice) <= 40 else []
        hint = f"; did you mean {close[0]!r}?" if close else ""
        given = "FAKEGPU_FAKECUDA_HOOK" if hook is None else "hook"
        shown = repr(choice) if len(choice) <= 40 else f"{choice[:40]!r}... ({len(choice)} characters)"
        raise ValueError(f"{given}={shown} is not a charging hook; accepted: {', '.join(HOOKS)}{hint}")
    if choice == "python":
        return ChargeMode(tracker)
    try:
        return ChargeHook(tracker)
    except ExtensionUnavailable:
        if choice == "cxx":
            raise
        return ChargeMode(tracker)


@functools.lru_cache(maxsize=4096)
def _scratch(shape: tuple[int, ...], strides: tuple[int, ...], reduced: frozenset[int], launch: reduce.Launch,
             sm_count: int, threads_per_sm: int, storage_offset: int) -> tuple[int, int]:
    """reduce.scratch, a pure function of the launch, remembered: a training step asks the same few every step."""
    return reduce.scratch(list(shape), list(strides), set(reduced), launch, sm_count, threads_per_sm, storage_offset)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _is_contiguous(t: Any) -> bool:
    return not isinstance(t, torch.Tensor) or t.is_contiguous()


def _contiguous_copies(packet, args: tuple) -> list[int]:
    """Bytes of the inputs a CUDA kernel copies to a contiguous buffer before its outputs and frees after them:
    layer norm's input, forward and backward (ATen's expect_contiguous)."""
    if packet is aten.native_layer_norm and not _is_contiguous(args[0]):
        return [_nbytes(args[0])]
    if packet is aten.native_layer_norm_backward and not _is_contiguous(args[1]):
        return [_nbytes(args[1])]
    return []


def _acc_bytes(dtype: torch.dtype) -> int:
    """The accumulator of sum / mean / prod / norm: float for 16-bit floats, int64 for integers and bool."""
    if dtype.is_complex or dtype.is_floating_point:
        return max(4, dtype.itemsize)
    return 8


def _launch(arg_bytes, vt0: int = 4):
    def of(dtype: torch.dtype) -> reduce.Launch:
        return reduce.Launch(arg_bytes(dtype), dtype.itemsize, vt0=vt0, input_vec_size=vt0,
                             max_threads=256 if dtype is torch.complex128 else 512)
    return of


def _pair_bytes(value_bytes: int) -> int:
    return 8 + max(8, value_bytes)  # (value, int64 index), aligned to 8


# The reductions ATen runs through Reduce.cuh's gpu_reduce_kernel, with their accumulator (arg_t) sizes.
_REDUCTIONS = {
    **dict.fromkeys([aten.sum, aten.nansum, aten.mean, aten.prod, aten.linalg_vector_norm], _launch(_acc_bytes)),
    **dict.fromkeys([aten.amax, aten.amin], _launch(lambda d: d.itemsize)),
    **dict.fromkeys([aten.argmax, aten.argmin], _launch(lambda d: _pair_bytes(_acc_bytes(d)))),
    **dict.fromkeys([aten.any, aten.all], _launch(lambda d: 1)),
    # Welford (mean, m2, count as int32, count as acc), launched with 2 values per thread
    **dict.fromkeys([aten.var, aten.std, aten.var_mean, aten.std_mean],
                    _launch(lambda d: 16 if _acc_bytes(d) == 4 else 32, vt0=2)),
}


def _reduced_dims(func, x: torch.Tensor, args: tuple, kwargs: dict) -> set[int] | None:
    """The input dims a reduction reduces (all when its dim is absent, None or empty), None when it is not one
    (a dim that the op reads as a number of dims, an unexpected schema)."""
    schema = func._schema.arguments
    position = next((i for i, a in enumerate(schema) if a.name == "dim"), None)
    if position is None:
        dims = None
    else:
        dims = args[position] if position < len(args) else kwargs.get("dim")
    return _dims_reduced(x.dim(), dims)


def _bias_gradient_sum(ndim: int, dtype: torch.dtype) -> tuple[set[int], reduce.Launch]:
    """cuDNN's convolution backward makes its bias gradient as a sum of grad_output over all but the channel dim."""
    return set(range(ndim)) - {1}, _REDUCTIONS[aten.sum](dtype)


def _dims_reduced(ndim: int, dims: Any) -> set[int] | None:
    """_reduced_dims for an input of `ndim` dims and the op's `dim` argument as given (None when absent)."""
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        return set(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    if not isinstance(dims, (list, tuple)) or not all(isinstance(d, int) for d in dims):
        return None
    if ndim == 0:
        return set()
    return {d % ndim for d in dims}


def _cublas_readable(t: torch.Tensor) -> bool:
    """Whether cuBLAS reads the last two dimensions as they are: one of them unit-stride, the other a leading
    dimension at least as long as the rows it steps over (column- or row-major)."""
    rows, cols = t.shape[-2], t.shape[-1]
    s_rows, s_cols = t.stride(-2), t.stride(-1)
    if s_cols == 1 and s_rows >= max(1, cols):
        return True
    return s_rows == 1 and s_cols >= max(1, rows)


# GEMMs whose first argument is a bias (their matrices follow it), and those whose two matrix operands ATen may
# copy for cuBLAS (matrix-vector products take any stride). charge_fast.cpp reads the same from fast_kind's bits.
_BIAS_FIRST = {aten.addmm, aten.baddbmm, aten.addbmm, aten._addmm_activation, aten.addmv}
_MATRIX_OPERANDS = {aten.mm, aten.bmm, aten.addmm, aten.baddbmm, aten.addbmm, aten._addmm_activation}
FAST_GEMM, FAST_GEMM_BIAS_FIRST, FAST_GEMM_COPIES, FAST_GEMM_LT = 4, 8, 16, 32
# fast_kind's bits for the other rules charge_fast.cpp runs: cuDNN's ops (convolution), the bias gradient's
# reduction of convolution_backward, the staging buffers of reductions, a call of an op with a known gap counted
FAST_CUDNN, FAST_CONVOLUTION_BACKWARD, FAST_REDUCTION, FAST_GAP = 64, 128, 256, 512
# an add charged as the common op while grad mode is on (no sum of the engine's then), layer norm's copies
FAST_ADD, FAST_LAYER_NORM, FAST_LAYER_NORM_BACKWARD = 1024, 2048, 4096
GEMM_RULES, GEMM_FAST, GEMM_NOT_YET = 0, 1, 2  # fast_gemm's answers


def _operand_copies(packet, args: tuple) -> list[int]:
    """Bytes of the operands ATen copies to a contiguous buffer before the call."""
    if packet not in _MATRIX_OPERANDS:
        return []
    operands = args[1:3] if packet in _BIAS_FIRST else args[:2]
    return [t.numel() * t.element_size() for t in operands
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.numel() and not _cublas_readable(t)]


def _calls_cublas(packet, args: tuple) -> bool:
    """ATen answers a product with an empty operand (zero rows, columns or inner dimension) without cuBLAS."""
    first = 1 if packet in _BIAS_FIRST else 0
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
