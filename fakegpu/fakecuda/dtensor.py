"""DTensor under fakecuda: the local shard of a DTensor on a `cuda` mesh is a fake CUDA tensor.

DTensor runs every op on its local tensors in C++ (torch's dispatchDTensorOp), below the torch-function layer,
so a DTensor that an op returns wraps a fresh local tensor that reached Python as a plain CPU tensor. FSDP2
(`fully_shard`) takes those local tensors (`_local_tensor`, `to_local()`) and mixes them with the fake CUDA
buffers it allocates, which the mode rejects as a cpu/cuda mismatch, and the allocator model never sees them.

Every torch call from Python that returns a DTensor passes FakeCudaMode.__torch_function__ with no fake tensor
among its direct arguments (a DTensor is neither), so the mode hands such results here and the plain local
tensor of a DTensor whose mesh is on `cuda` gets the badge, on the device of a DTensor argument's fake local
tensor, or the current device (the one DeviceMesh and FSDP2 take for the rank) when no argument is a DTensor.
DTensor arguments whose local tensors are all genuine CPU ones (FSDP2's CPU offload) leave the results on the
CPU. Only that path (no fake tensor argument) pays for it; ordinary ops on fake tensors never reach here.

A DTensor's own `device` is its C++ device, that of its local tensor in C++: cpu. While fakecuda is active,
DTensor's `device`, `is_cuda`, `is_cpu` and `get_device()` answer from the local tensor's Python face instead
(properties set on the DTensor class, torch's own surface; deactivate() removes them): FSDP2 compares
`param.device` with its mesh's device, and programs print it. A DTensor whose local tensor is a genuine CPU
tensor (CPU offload, a cpu mesh) still says cpu.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from fakegpu.fakecuda.tensor import FAKE_TYPES, badge

_API = "torch.distributed.tensor._api"  # where torch defines DTensor; nothing is imported until a program does


_patched: list[tuple[type, str, Any]] = []  # (DTensor, attribute, what the class itself had: None if nothing)
_enabled = False


def dtensor_class() -> type | None:
    """DTensor, once the program has imported torch.distributed.tensor; None before (no DTensor can exist)."""
    module = sys.modules.get(_API)
    cls = None if module is None else getattr(module, "DTensor", None)
    if cls is not None and _enabled and not _patched:
        _patch(cls)
    return cls


def install() -> None:
    """Give DTensor its CUDA face now if torch.distributed.tensor is loaded, else when the mode first meets it."""
    global _enabled
    _enabled = True
    dtensor_class()


def uninstall() -> None:
    global _enabled
    _enabled = False
    while _patched:
        cls, name, own = _patched.pop()
        if own is None:
            delattr(cls, name)
        else:
            setattr(cls, name, own)


def _device(self) -> torch.device:
    local = self._local_tensor
    return local.device if type(local) in FAKE_TYPES else _BASE["device"].__get__(self)


def _is_cuda(self) -> bool:
    return type(self._local_tensor) in FAKE_TYPES or _BASE["is_cuda"].__get__(self)


def _is_cpu(self) -> bool:
    return type(self._local_tensor) not in FAKE_TYPES and _BASE["is_cpu"].__get__(self)


def _get_device(self) -> int:
    local = self._local_tensor
    return local._fc_index if type(local) in FAKE_TYPES else _BASE["get_device"](self)


_BASE = {name: getattr(torch._C.TensorBase, name) for name in ("device", "is_cuda", "is_cpu", "get_device")}
_FACE = {"device": property(_device), "is_cuda": property(_is_cuda), "is_cpu": property(_is_cpu),
         "get_device": _get_device}


def _patch(cls: type) -> None:
    for name, face in _FACE.items():
        _patched.append((cls, name, cls.__dict__.get(name)))
        setattr(cls, name, face)


def badge_locals(mode: Any, out: Any, args: tuple, kwargs: dict) -> Any:
    """`out` with the plain local tensors of its cuda-mesh DTensors (out itself, or in a list/tuple) badged."""
    cls = dtensor_class()
    if cls is None:
        return out
    if type(out) is cls:
        _badge_local(mode, out, _input_index(cls, args, kwargs, mode))
    elif type(out) is tuple or type(out) is list:
        index = None
        for o in out:
            if type(o) is cls:
                if index is None:
                    index = _input_index(cls, args, kwargs, mode)
                _badge_local(mode, o, index)
    return out


def local_index(tensor: Any) -> int | None:
    """The fake device of a DTensor's local tensor; None for anything else. `dtensor.to("cuda")` on a DTensor
    already there is then the no-op it is in torch, not a device move."""
    cls = dtensor_class()
    if cls is not None and type(tensor) is cls and type(tensor._local_tensor) in FAKE_TYPES:
        return tensor._local_tensor._fc_index
    return None


def _badge_local(mode: Any, dt: Any, index: int | None) -> None:
    local = dt._local_tensor
    if index is not None and type(local) is torch.Tensor and dt._spec.mesh.device_type == "cuda":
        badge(local, index, mode.tracker)


def _input_index(cls: type, args: tuple, kwargs: dict, mode: Any) -> int | None:
    """Where the results' local tensors live: the fake device of the first DTensor argument (also inside lists)
    whose local tensor is fake; None when the DTensor arguments all hold genuine CPU local tensors (FSDP2's CPU
    offload keeps its shards on the CPU under a cuda mesh); the current device when no argument is a DTensor."""
    seen = False
    for group in (args, kwargs.values()):
        for a in group:
            for x in (a if type(a) is list or type(a) is tuple else (a,)):
                if type(x) is cls:
                    if type(x._local_tensor) in FAKE_TYPES:
                        return x._local_tensor._fc_index
                    seen = True
    return None if seen else mode.runtime.current
