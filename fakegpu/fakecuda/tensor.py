"""CPU tensors that carry a CUDA device: fakeness is data (the tensor's type and its `_fc_index`).

A fake CUDA tensor is an ordinary CPU tensor whose Python class is switched to FakeCudaTensor (or
FakeCudaParameter) in place. The C++ side (dispatcher, autograd engine, kernels) sees a plain CPU tensor, so
math and backward run at native CPU speed with no Python on the way; Python sees `device == cuda:N`,
`is_cuda == True`. PyTorch keeps a tensor's Python object (and its class and attributes) alive as long as
the C++ tensor lives, so the badge survives round trips through C++ (autograd, containers, hooks).

Memory accounting is per storage, like the real allocator: the first time a storage is seen under a fake
device, a block of its size is taken from that device's allocator model, and it is returned when the storage
dies (a finalizer on the storage object, which PyTorch preserves for as long as the storage lives).
"""

from __future__ import annotations

import weakref

import torch
from torch import nn

from fakegpu.fakecuda.errors import ModelOutOfMemory
from fakegpu.fakecuda.runtime import Runtime

_DEVICES: dict[int, torch.device] = {}


def cuda_device(index: int) -> torch.device:
    dev = _DEVICES.get(index)
    if dev is None:
        dev = _DEVICES[index] = torch.device("cuda", index)
    return dev


class _FakeCudaMixin:
    """The CUDA face of a CPU tensor. Properties shadow TensorBase's C getters for these classes only."""

    _fc_index: int

    @property
    def device(self) -> torch.device:
        return cuda_device(self._fc_index)

    @property
    def is_cuda(self) -> bool:
        return True

    @property
    def is_cpu(self) -> bool:
        return False

    def get_device(self) -> int:
        return self._fc_index

    def __reduce_ex__(self, proto):
        # Pickle exactly what torch pickles for a CUDA tensor: a plain tensor or parameter, whose storage
        # persist.py tags "cuda:N". The badge (class, _fc_index) is lifted for the call only.
        cls, index = type(self), self._fc_index
        self.__class__ = _PLAIN_OF[cls]
        del self._fc_index
        try:
            return self.__reduce_ex__(proto)
        finally:
            self.__class__ = cls
            self._fc_index = index

    def __repr__(self, *args, **kwargs) -> str:
        # torch prints a subclass's name where a real CUDA tensor prints "tensor("
        text = super().__repr__(*args, **kwargs)
        return text.replace(f"{type(self).__name__}(", "tensor(", 1)


class FakeCudaTensor(_FakeCudaMixin, torch.Tensor):
    # Torch functions reach FakeCudaMode (a global mode) instead; no per-class Python hop on top.
    __torch_function__ = torch._C._disabled_torch_function_impl


class FakeCudaParameter(_FakeCudaMixin, nn.Parameter):
    __torch_function__ = torch._C._disabled_torch_function_impl


FAKE_TYPES = frozenset({FakeCudaTensor, FakeCudaParameter})
_PLAIN_OF = {FakeCudaTensor: torch.Tensor, FakeCudaParameter: nn.Parameter}


def malloc(runtime: Runtime, index: int, nbytes: int):
    """A block from the device's allocator model; the model's OOM surfaces as torch.cuda.OutOfMemoryError."""
    try:
        return runtime.malloc(index, nbytes)
    except ModelOutOfMemory as oom:
        raise torch.cuda.OutOfMemoryError(oom.message) from None


class StorageTracker:
    """Maps live storages (by StorageImpl address) to their allocator blocks."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.live: dict[int, tuple[int, object, weakref.ref]] = {}

    def account(self, tensor: torch.Tensor, index: int, block=None) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self.live:
            if block is not None:  # pre-allocated for a storage that turned out to be shared: give it back
                self.runtime.free(index, block)
            return
        nbytes = storage.nbytes()
        if block is None:
            if nbytes == 0:
                return  # PyTorch's allocator hands out no block for zero bytes
            block = malloc(self.runtime, index, nbytes)
        # a plain weakref with a callback costs less per op output than weakref.finalize
        self.live[key] = (index, block, weakref.ref(storage, lambda _ref, key=key: self._release(key)))

    def _release(self, key: int) -> None:
        entry = self.live.pop(key, None)
        if entry is not None:
            self.runtime.free(entry[0], entry[1])


def badge(tensor: torch.Tensor, index: int, tracker: StorageTracker, block=None) -> torch.Tensor:
    """Make `tensor` (a fresh CPU result) a fake CUDA tensor of device `index`, in place."""
    cls = type(tensor)
    if cls is torch.Tensor:
        tensor.__class__ = FakeCudaTensor
    elif cls is nn.Parameter:
        tensor.__class__ = FakeCudaParameter
    elif cls in FAKE_TYPES:
        tensor._fc_index = index
        return tensor
    else:
        # A user's tensor subclass: leave its type alone and do not pretend it moved.
        return tensor
    tensor._fc_index = index
    tracker.account(tensor, index, block)
    return tensor


def unbadge(tensor: torch.Tensor) -> torch.Tensor:
    plain = _PLAIN_OF.get(type(tensor))
    if plain is not None:
        tensor.__class__ = plain
        del tensor._fc_index
    return tensor
