"""FakeCudaMode: the one TorchFunctionMode that maps `cuda` to the CPU and keeps the CUDA face consistent.

Every torch function call from Python passes here once. The common case (an op on fake CUDA tensors) costs a
scan of the arguments, the CPU op itself, and a badge on fresh results. Special cases (device moves,
factories with a device, .numpy(), the .data setter, ...) live in a registry, one small handler each.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from fakegpu.fakecuda import amp, copies
from fakegpu.fakecuda.backward import in_backward, wrap_tensor_hook
from fakegpu.fakecuda.dispatch import suspended
from fakegpu.fakecuda.dtensor import badge_locals, local_index
from fakegpu.fakecuda.runtime import Runtime
from fakegpu.fakecuda.tensor import (
    FAKE_TYPES,
    FakeCudaParameter,
    FakeCudaTensor,
    StorageTracker,
    badge,
    launched,
    malloc,
    storage_key,
    unbadge,
)

Handler = Callable[["FakeCudaMode", Any, tuple, dict], Any]
HANDLERS: dict[Any, Handler] = {}

_autocast_on = torch.is_autocast_enabled
# a TLS read with no argument to parse ("cuda" is a device string: parsed, and the accelerator looked up, per call)
_any_autocast = torch._C._is_any_autocast_enabled

# Ops that legitimately combine a CUDA tensor with CPU tensors (cross-device copies, CPU index tensors and split
# points, autograd over a graph that crosses devices: the gradient of `x.cpu()` with respect to a CUDA leaf).
_MIXED_OK: set[Any] = {
    torch.Tensor.copy_, torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.index_put_,
    torch.Tensor.index_put, torch.Tensor.to, torch.Tensor.data.__set__, torch.Tensor.grad.__set__,
    torch.autograd.grad, torch.autograd.backward, torch.Tensor.backward, torch.tensor_split,
    torch.Tensor.tensor_split,
}


def _queries() -> frozenset[Any]:
    """Questions about one tensor that return no tensor (its shape, dtype, flags, a scalar's value): no device to
    check, nothing to badge, no autocast cast, so the mode calls them straight. The optimizer asks several per
    parameter per step, which made them most of the mode's calls."""
    base = torch._C.TensorBase
    getters = ("shape", "dtype", "is_sparse", "is_sparse_csr", "is_nested", "is_quantized", "is_meta", "is_mkldnn",
               "requires_grad", "is_leaf", "layout", "ndim", "grad_fn", "names", "_version", "output_nr",
               "is_inference")
    methods = ("dim", "ndimension", "size", "stride", "numel", "nelement", "element_size", "storage_offset",
               "is_contiguous", "is_complex", "is_floating_point", "is_signed", "is_conj", "is_neg", "item",
               "untyped_storage", "data_ptr", "__len__")
    found: set[Any] = set()
    for name in getters:
        descriptor = base.__dict__.get(name)
        if descriptor is not None and hasattr(descriptor, "__get__"):
            found.add(descriptor.__get__)
    for name in methods:
        method = getattr(base, name, None)
        if method is not None and not isinstance(method, property):
            found.add(method)
    found.update(f for f in (torch.is_complex, torch.is_floating_point, torch.numel) if f is not None)
    return frozenset(found)


_QUERIES = _queries()


def register(*funcs: Any) -> Callable[[Handler], Handler]:
    def wrap(handler: Handler) -> Handler:
        for func in funcs:
            if func in HANDLERS or func in _QUERIES:
                raise ValueError(f"two fakecuda handlers for {func!r}")
            HANDLERS[func] = handler
        return handler

    return wrap


def device_mismatch(a: str, b: str) -> RuntimeError:
    return RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, {a} and {b}!")


def invalid_ordinal() -> Exception:
    error = getattr(torch, "AcceleratorError", RuntimeError)
    return error(
        "CUDA error: invalid device ordinal\nGPU device may be out of range, do you have enough GPUs?\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
        "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
    )


class FakeCudaMode(TorchFunctionMode):
    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self.runtime = runtime
        self.tracker = StorageTracker(runtime)
        # deactivate()d: still on the stacks of threads started while active (threads.py), where it now does nothing
        self.retired = False

    def use_cxx(self, ext: Any) -> None:
        """Run the common path of __torch_function__ in C++ (mode_fast.cpp, in the charging hook's extension): an
        instance attribute, a method of this mode as torch requires, that hands every other call to the Python
        method below with the same arguments."""
        function = ext.mode_fast_function(
            (FakeCudaTensor, FakeCudaParameter), (torch.Tensor, torch.nn.Parameter), _QUERIES, HANDLERS,
            self.tracker.live, self.tracker.account, FakeCudaMode.__torch_function__)
        self.__torch_function__ = types.MethodType(function, self)

    def retire(self) -> None:
        """deactivate(): calls that still reach this mode (threads.py) pass through, in Python."""
        self.retired = True
        self.__dict__.pop("__torch_function__", None)

    # -- device helpers used by handlers and the CUDA API

    def resolve(self, device: Any) -> int | None:
        """The fake index a device argument names, or None for a non-CUDA device."""
        if isinstance(device, int):
            index = device  # torch treats a bare int device as an accelerator ordinal
        else:
            dev = device if isinstance(device, torch.device) else torch.device(device)
            if dev.type != "cuda":
                return None
            index = self.runtime.current if dev.index is None else dev.index
        if not self.runtime.valid(index):
            raise invalid_ordinal()
        return index

    def to_device(self, tensor: torch.Tensor, index: int | None, non_blocking: bool = False,
                  **options: Any) -> torch.Tensor:
        """A copy of `tensor` on fake device `index` (None: the CPU), through autograd's _to_copy; a copy between
        the host and a device takes device buffers for the call where CUDA's does (copies.py)."""
        source = tensor._fc_index if type(tensor) in FAKE_TYPES else None
        host = type(tensor) in (torch.Tensor, torch.nn.Parameter) and tensor.device.type == "cpu"
        if index is not None:
            nbytes = tensor.numel() * (options.get("dtype") or tensor.dtype).itemsize
            block = malloc(self.runtime, index, nbytes) if nbytes else None
            with suspended():
                out = tensor.to("cpu", copy=True, **options)
            if host:
                self._transient(index, copies.to_device(tensor, out))
            return badge(out, index, self.tracker, block)
        with suspended():
            out = tensor.to("cpu", copy=True, **options)
        if source is not None:
            self._transient(source, copies.to_host(tensor, out, non_blocking))
        return unbadge(out) if type(out) in FAKE_TYPES else out

    def _transient(self, index: int, sizes: list[int]) -> None:
        blocks = [malloc(self.runtime, index, n) for n in sizes if n]
        for block in reversed(blocks):
            self.runtime.free(index, block)

    # -- the entry point (its common path in C++ where the extension is built: use_cxx)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _QUERIES or self.retired:
            return func(*args, **kwargs) if kwargs else func(*args)
        kwargs = kwargs or {}
        handler = HANDLERS.get(func)
        if handler is not None:
            return handler(self, func, args, kwargs)
        device = kwargs.get("device")
        if device is not None:
            return factory(self, func, args, kwargs)
        index = self._common_device(func, args, kwargs)
        if index is None:  # no fake tensor argument: CPU tensors, scalars, or DTensors (dtensor.py)
            return badge_locals(self, func(*args, **kwargs), args, kwargs)
        # CUDA's autocast rules, applied here because the kernels are CPU ones
        if _any_autocast() and _autocast_on("cuda"):
            args, kwargs = amp.cast_args(self, func, args, kwargs)
        return self._badge_outputs(func(*args, **kwargs), index, args)

    def run_default(self, func, args: tuple, kwargs: dict):
        """What __torch_function__ does for a function without a handler (inlined there: it is the hot path)."""
        index = self._common_device(func, args, kwargs)
        if index is None:
            return badge_locals(self, func(*args, **kwargs), args, kwargs)
        if _any_autocast() and _autocast_on("cuda"):
            args, kwargs = amp.cast_args(self, func, args, kwargs)
        return self._badge_outputs(func(*args, **kwargs), index, args)

    def _common_device(self, func, args, kwargs) -> int | None:
        """The fake device of the inputs; raises PyTorch's error when inputs sit on different devices."""
        index = None
        cpu_seen = False
        for group in (args, kwargs.values()):
            for a in group:
                t = type(a)
                if t in FAKE_TYPES:
                    if index is None:
                        index = a._fc_index
                    elif a._fc_index != index and func not in _MIXED_OK:
                        raise device_mismatch(f"cuda:{index}", f"cuda:{a._fc_index}")
                elif t is torch.Tensor or t is torch.nn.Parameter:
                    if a.dim() != 0:  # zero-dim CPU tensors mix with CUDA ones, as in real PyTorch
                        cpu_seen = True
                elif t is list or t is tuple:
                    for x in a:
                        tx = type(x)
                        if tx in FAKE_TYPES:
                            if index is None:
                                index = x._fc_index
                            elif x._fc_index != index and func not in _MIXED_OK:
                                raise device_mismatch(f"cuda:{index}", f"cuda:{x._fc_index}")
                        elif (tx is torch.Tensor or tx is torch.nn.Parameter) and x.dim() != 0:
                            cpu_seen = True
        # In backward, C++ kernels' fresh gradients reach Python as plain CPU tensors (backward.py): let them mix.
        if index is not None and cpu_seen and func not in _MIXED_OK and not in_backward():
            raise device_mismatch(f"cuda:{index}", "cpu")
        return index

    def _badge_outputs(self, out, index: int, args: tuple):
        t = type(out)
        if t is torch.Tensor:
            if args and out is args[0]:
                return out  # an in-place op on a CPU tensor stays on the CPU
            return badge(out, index, self.tracker)
        if isinstance(out, (tuple, list)):
            for o in out:
                if type(o) is torch.Tensor:
                    badge(o, index, self.tracker)
        return out


def factory(mode: FakeCudaMode, func, args, kwargs):
    """A creation op with a device=: CUDA ones are made on the CPU, sized against the allocator first."""
    index = mode.resolve(kwargs["device"])
    if index is None:
        return func(*args, **kwargs)
    probe = func(*args, **{**kwargs, "device": "meta"}) if func not in _NO_META else None
    block = None
    if isinstance(probe, torch.Tensor):
        nbytes = probe.untyped_storage().nbytes()
        block = malloc(mode.runtime, index, nbytes) if nbytes else None
        if nbytes and func not in _NO_KERNEL:
            launched(mode.runtime, index)
    with suspended():
        out = func(*args, **{**kwargs, "device": "cpu"})
    if isinstance(out, torch.Tensor):
        return badge(out, index, mode.tracker, block)
    return out


# torch.tensor/as_tensor on meta copy nothing but still walk the data; the result is sized after creation.
_NO_META: set[Any] = {torch.tensor, torch.as_tensor, torch.asarray}
# Creation ops that launch no kernel on CUDA: uninitialised memory, and copies of host data (which _NO_META's are).
_NO_KERNEL: set[Any] = {torch.empty, torch.empty_like, torch.empty_strided, *_NO_META}


@register(torch.Tensor.to)
def _to(mode: FakeCudaMode, func, args, kwargs):
    self = args[0]
    kwargs = dict(kwargs)
    copy = kwargs.pop("copy", False)  # _parse_to knows device/dtype/non_blocking/memory_format only
    rest = list(args[1:])
    flags = [i for i, a in enumerate(rest) if isinstance(a, bool)]
    if len(flags) == 2:  # to(..., non_blocking, copy) positionally
        copy = rest.pop(flags[1]) or copy
    device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*rest, **kwargs)
    options = {"dtype": dtype or self.dtype}
    if memory_format is not None:
        options["memory_format"] = memory_format
    src = self._fc_index if type(self) in FAKE_TYPES else local_index(self)
    dst = src if device is None else mode.resolve(device)
    if dst == src:
        out = func(self, dtype=dtype or self.dtype, copy=copy, **({"memory_format": memory_format} if memory_format
                                                                   else {}))
        if src is None or out is self:
            return out
        return badge(out, src, mode.tracker) if type(self) in FAKE_TYPES else badge_locals(mode, out, args, kwargs)
    return mode.to_device(self, dst, non_blocking=bool(non_blocking), **options)


@register(torch.Tensor.cuda)
def _cuda(mode: FakeCudaMode, func, args, kwargs):
    self = args[0]
    device = args[1] if len(args) > 1 else kwargs.get("device")
    index = mode.runtime.current if device is None else mode.resolve(device if not isinstance(device, int)
                                                                      else torch.device("cuda", device))
    if (self._fc_index if type(self) in FAKE_TYPES else local_index(self)) == index:
        return self
    options = {}
    if "memory_format" in kwargs:
        options["memory_format"] = kwargs["memory_format"]
    return mode.to_device(self, index, non_blocking=bool(kwargs.get("non_blocking")), **options)


@register(torch.Tensor.cpu)
def _cpu(mode: FakeCudaMode, func, args, kwargs):
    self = args[0]
    if type(self) not in FAKE_TYPES:
        return func(*args, **kwargs)
    return mode.to_device(self, None, **kwargs)


@register(torch.Tensor.numpy)
def _numpy(mode: FakeCudaMode, func, args, kwargs):
    self = args[0]
    if type(self) in FAKE_TYPES:
        raise TypeError(
            f"can't convert cuda:{self._fc_index} device type tensor to numpy. Use Tensor.cpu() to copy the "
            "tensor to host memory first."
        )
    return func(*args, **kwargs)


@register(torch.tensor_split, torch.Tensor.tensor_split)
def _tensor_split(mode: FakeCudaMode, func, args, kwargs):
    """Split points given as a tensor must be on the CPU (torch reads them on the host)."""
    sections = args[1] if len(args) > 1 else kwargs.get("tensor_indices_or_sections")
    if type(sections) in FAKE_TYPES:
        raise RuntimeError("tensor_split expected tensor_indices_or_sections to be on cpu, but it's on "
                           f"cuda:{sections._fc_index}")
    return mode.run_default(func, args, kwargs)


@register(torch.Tensor.data.__set__)
def _set_data(mode: FakeCudaMode, func, args, kwargs):
    self, new = args
    func(self, new)
    if type(new) in FAKE_TYPES:
        badge(self, new._fc_index, mode.tracker)
    elif type(self) in FAKE_TYPES:
        unbadge(self)


@register(torch.device)
def _device(mode: FakeCudaMode, func, args, kwargs):
    """`torch.device(0)`: a bare ordinal names the accelerator, CUDA's under fakecuda. A CPU-only build has no
    accelerator and raises for it (nn.DataParallel's scatter makes its streams' devices so)."""
    if len(args) == 1 and not kwargs and type(args[0]) is int:
        return torch.device("cuda", args[0])
    return func(*args, **kwargs)


@register(torch.Tensor.register_hook)
def _register_hook(mode: FakeCudaMode, func, args, kwargs):
    self, hook = args[0], (args[1] if len(args) > 1 else kwargs.pop("hook"))
    return func(self, wrap_tensor_hook(mode, self, hook), *args[2:], **kwargs)


@register(torch.Tensor.record_stream)
def _record_stream(mode: FakeCudaMode, func, args, kwargs):
    """The allocator keeps the storage's block from reuse until work on `stream` is done (allocator.py).
    torch's argument parser has already required a torch.Stream (streams.FakeStream is one)."""
    self, stream = args[0], (args[1] if len(args) > 1 else kwargs["s"])
    if type(self) not in FAKE_TYPES:
        return func(*args, **kwargs)  # a CPU tensor: torch's own error
    entry = mode.tracker.live.get(storage_key(self))
    if entry is not None:
        mode.runtime.devices[entry[0]].allocator.record_stream(entry[1], stream.stream_id)
    return None


@register(torch._has_compatible_shallow_copy_type)
def _passthrough(mode: FakeCudaMode, func, args, kwargs):
    """Queries about tensors' C++ identity, not ops: no device check, nothing to badge."""
    return func(*args, **kwargs)
