"""torch.save / torch.load of fake CUDA tensors, and pinned host memory.

Saving: a fake tensor's storage is a CPU storage, which torch would tag "cpu". A tagger registered through
torch.serialization.register_package (torch's extension point for device tags) tags it "cuda:N" instead, so a
checkpoint written under fakecuda is the one a GPU run writes: loaded on a real CUDA machine it goes to the GPU,
loaded on a CPU-only machine without map_location it raises torch's own error.

Loading: map_location (None, "cuda:1", "cpu", a torch.device, a dict) is resolved by torch into a location
string per storage; our deserializer claims "cuda..." locations (validated by torch's validate_cuda_device, so
a missing ordinal gives torch's message), keeps the CPU storage and remembers its device. Every tensor torch
rebuilds goes through torch._utils._rebuild_tensor (both loaders, weights_only or not); its replacement badges
the tensors of remembered storages onto their device, which charges the allocator model as the real load would.
(The `set_(storage)` inside it does not reach a TorchFunctionMode, so there is no handler to hang this on.)

Pinned memory: pinning needs the CUDA driver; here a pinned tensor is an ordinary host copy whose storage is
remembered as pinned (so views report is_pinned() too). Pinned host memory is not device memory: no charge.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch._utils
import torch.serialization

from fakegpu.fakecuda.mode import FakeCudaMode, factory, register
from fakegpu.fakecuda.tensor import FAKE_TYPES, badge

_state: dict[str, Any] = {"mode": None, "registered": False, "rebuild": None}
_loaded: dict[int, tuple[int, weakref.ref]] = {}   # storage address -> (device, the storage)
_pinned: dict[int, weakref.ref] = {}                # storage address -> the storage


def _remember(table: dict, storage, value=None) -> None:
    key = storage._cdata
    ref = weakref.ref(storage, lambda _r, key=key: table.pop(key, None))
    table[key] = ref if value is None else (value, ref)


def _tag(storage) -> str | None:
    mode = _state["mode"]
    if mode is None or not isinstance(storage, torch.UntypedStorage):
        return None
    entry = mode.tracker.live.get(storage._cdata)
    return None if entry is None else f"cuda:{entry[0]}"


def _deserialize(storage, location: str):
    mode = _state["mode"]
    if mode is None or not location.startswith("cuda"):
        return None
    index = torch.serialization.validate_cuda_device(location)
    _remember(_loaded, storage, index)
    return storage


def _rebuild_tensor(storage, storage_offset, size, stride):
    tensor = _state["rebuild"](storage, storage_offset, size, stride)
    mode = _state["mode"]
    entry = _loaded.get(storage._untyped_storage._cdata) if mode is not None else None
    return tensor if entry is None else badge(tensor, entry[0], mode.tracker)


def install(mode: FakeCudaMode) -> None:
    _state["mode"] = mode
    _state["rebuild"] = torch._utils._rebuild_tensor
    torch._utils._rebuild_tensor = _rebuild_tensor
    if not _state["registered"]:
        # before torch's cpu (10) and cuda (20) entries; inactive (returns None) once fakecuda is deactivated
        torch.serialization.register_package(5, _tag, _deserialize)
        _state["registered"] = True


def uninstall() -> None:
    if _state["rebuild"] is not None:
        torch._utils._rebuild_tensor = _state["rebuild"]
        _state["rebuild"] = None
    _state["mode"] = None
    _loaded.clear()
    _pinned.clear()


def _is_pinned_storage(tensor: torch.Tensor) -> bool:
    return type(tensor) not in FAKE_TYPES and tensor.untyped_storage()._cdata in _pinned


def pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
    """Tensor.pin_memory while fakecuda is active, on any thread: DataLoader(pin_memory=True, num_workers=N) pins
    its batches on a thread of its own, where fakecuda's mode is not on and torch's own method asks the driver."""
    with torch._C.DisableTorchFunction():
        if type(self) in FAKE_TYPES:
            legacy = self.type().rsplit(".", 1)[-1]  # C++ sees the CPU type name, e.g. FloatTensor
            raise RuntimeError(f"cannot pin 'torch.cuda.{legacy}' only dense CPU tensors can be pinned")
        if _is_pinned_storage(self):
            return self  # torch returns an already pinned tensor as is
        out = self.clone()
        _remember(_pinned, out.untyped_storage())
        return out


def is_pinned(self: torch.Tensor, device: Any = None) -> bool:
    """Tensor.is_pinned while fakecuda is active, on any thread."""
    with torch._C.DisableTorchFunction():
        return _is_pinned_storage(self)


def replacements() -> list[tuple[Any, str, Any]]:
    """(owner, name, value) pairs cuda_api installs and restores with its other replacements."""
    return [(torch.Tensor, "pin_memory", pin_memory), (torch.Tensor, "is_pinned", is_pinned)]


@register(torch._C.TensorBase.pin_memory)  # (called as TensorBase's method, past the replacement)
def _pin_memory(mode: FakeCudaMode, func, args, kwargs):
    return pin_memory(*args, **kwargs)


@register(torch._C.TensorBase.is_pinned)
def _is_pinned(mode: FakeCudaMode, func, args, kwargs):
    return is_pinned(*args, **kwargs)


_PIN_FACTORIES = (torch.empty, torch.zeros, torch.ones, torch.full, torch.empty_strided, torch.rand, torch.randn,
                  torch.randint, torch.arange, torch.tensor, torch.empty_like, torch.zeros_like, torch.ones_like,
                  torch.full_like)


@register(*_PIN_FACTORIES)
def _factory_pin(mode: FakeCudaMode, func, args, kwargs):
    """Factories take pin_memory=True; with a CUDA device= torch rejects it, on the CPU it pins."""
    if not kwargs.get("pin_memory"):
        if kwargs.get("device") is not None:
            return factory(mode, func, args, kwargs)
        return mode.run_default(func, args, kwargs)
    kwargs = {k: v for k, v in kwargs.items() if k != "pin_memory"}
    if kwargs.get("device") is not None and mode.resolve(kwargs["device"]) is not None:
        raise RuntimeError("Only dense CPU tensors can be pinned")
    out = func(*args, **kwargs)
    _remember(_pinned, out.untyped_storage())
    return out
