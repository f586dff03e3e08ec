"""CPU tensors that carry a CUDA device: fakeness is data (the tensor's type and its `_fc_index`).

A fake CUDA tensor is an ordinary CPU tensor whose Python class is switched to FakeCudaTensor (or
FakeCudaParameter) in place. The C++ side (dispatcher, autograd engine, kernels) sees a plain CPU tensor, so
math and backward run at native CPU speed with no Python on the way; Python sees `device == cuda:N`,
`is_cuda == True`. PyTorch keeps a tensor's Python object (and its class and attributes) alive as long as
the C++ tensor lives, so the badge survives round trips through C++ (autograd, containers, hooks).

Memory accounting is per storage, like the real allocator: the first time a storage is seen under a fake
device, a block of its size is taken from that device's allocator model, and it is returned when the storage
dies: here through a weak reference to the storage's Python object (which PyTorch preserves for as long as the
storage lives); where the C++ extension is loaded, through the storage's memory instead (storage_watch.cpp).
Storages are found by their StorageImpl's address (`storage_key`), not through `untyped_storage()`: that makes the
storage's Python object, which then holds the storage for its whole life, and the autograd engine sums gradients in
place only into one whose storage nothing else holds.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from fakegpu.fakecuda.errors import ModelGPULost, ModelOutOfMemory
from fakegpu.fakecuda.runtime import Runtime

_DEVICES: dict[int, torch.device] = {}

# A tensor's storage as tracker.live keys it (the StorageImpl's address, UntypedStorage._cdata), without making the
# storage's Python object (see the top of this file).
storage_key: Callable[[torch.Tensor], int] = torch._C._storage_id


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


def gpu_lost_error(lost: ModelGPULost) -> Exception:
    """What PyTorch raises for a call on a GPU that fell off the bus: torch.AcceleratorError (torch 2.8 on) for
    cudaErrorUnknown, else the RuntimeError older releases raise."""
    kind = getattr(torch, "AcceleratorError", RuntimeError)
    return kind(lost.message)


def malloc(runtime: Runtime, index: int, nbytes: int):
    """A block from the device's allocator model; the model's OOM surfaces as torch.cuda.OutOfMemoryError, a lost
    GPU as torch's error for it."""
    try:
        return runtime.malloc(index, nbytes)
    except ModelOutOfMemory as oom:
        raise torch.cuda.OutOfMemoryError(oom.message) from None
    except ModelGPULost as lost:
        raise gpu_lost_error(lost) from None


def launched(runtime: Runtime, index: int, started_ns: int | None = None) -> None:
    """A kernel ran on the device (a creation op's fill or random draw, a fused kernel fakecuda emulates; since
    started_ns when given): busy, and the context's first launch; a lost GPU raises torch's error for it."""
    try:
        runtime.ran(index, False, started_ns)
    except ModelGPULost as lost:
        raise gpu_lost_error(lost) from None


class StorageTracker:
    """Maps live storages (by StorageImpl address) to their allocator blocks."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        # storage address -> (device, block, weak reference to the storage's Python object, or None where the C++
        # extension watches the storage's memory instead: storage_watch.cpp)
        self.live: dict[int, tuple[int, object, weakref.ref | None]] = {}
        # what is called after a storage method that can swap a storage's memory (resize_, and sharing it
        # through shared memory): the extension's, to watch the storage again before it can die unseen
        self.after_swap: Callable[[], None] | None = None
        # the extension's StorageNative (storage_watch.cpp) while its hook is installed: storages charged and
        # looked at without their Python objects; None: through them, in Python
        self.native: Any = None

    def account(self, tensor: torch.Tensor, index: int, block=None) -> None:
        native = self.native
        storage = tensor.untyped_storage() if native is None else None
        key = storage._cdata if storage is not None else storage_key(tensor)
        if key in self.live:
            if block is not None:  # pre-allocated for a storage that turned out to be shared: give it back
                self.runtime.free(index, block)
            return
        if block is None:
            nbytes = storage.nbytes() if storage is not None else native.nbytes(tensor)
            # PyTorch's allocator hands out no block for zero bytes; the storage is still tracked, as it may
            # be resized later (resize() below)
            block = malloc(self.runtime, index, nbytes) if nbytes else None
        if storage is None:
            self.live[key] = (index, block, native.watch(tensor, key))
            return
        # a plain weakref with a callback costs less per op output than weakref.finalize
        self.live[key] = (index, block, weakref.ref(storage, lambda _ref, key=key: self._release(key)))

    def sole_owner(self, tensor: torch.Tensor) -> bool:
        """Whether nothing but `tensor` holds its storage (the storage's own Python object aside): what the autograd
        engine asks before summing a gradient into it in place."""
        if self.native is not None:
            return self.native.owners(tensor) == 1
        # (the storage's Python object, made here if it had none, holds one reference)
        return torch._C._storage_Use_Count(tensor.untyped_storage()._cdata) == 2

    def transfer(self, source: torch.Tensor, target: torch.Tensor) -> bool:
        """Hand `source`'s block to `target`'s (uncharged) storage, as if the op that made `target` had written
        into `source` in place (CUDA did; the CPU made a new tensor): the block is no longer freed when `source`'s
        storage dies. False when either side does not qualify."""
        if storage_key(target) in self.live:
            return False
        entry = self.live.pop(storage_key(source), None)
        if entry is None:
            return False
        self.account(target, entry[0], entry[1])
        return True

    def _release(self, key: int) -> None:
        entry = self.live.pop(key, None)
        if entry is not None and entry[1] is not None:
            self.runtime.free(entry[0], entry[1])

    def resize(self, storage: torch.UntypedStorage, nbytes: int, resize: Callable[..., Any]) -> Any:
        """`storage.resize_(nbytes)` on a fake device, as CUDA's resize_bytes does it: a new block of the new
        size (OOM before anything changes), the bytes copied over, the old block freed; zero bytes free it.
        FSDP frees and re-allocates its unsharded parameters this way (`untyped_storage().resize_(0)`)."""
        key = storage._cdata
        entry = self.live.get(key)
        if entry is None:
            return resize(storage, nbytes)
        index, block, ref = entry
        new = malloc(self.runtime, index, nbytes) if nbytes else None
        try:
            out = resize(storage, nbytes)
        except BaseException:
            if new is not None:
                self.runtime.free(index, new)
            raise
        if block is not None:
            self.runtime.free(index, block)
        self.live[key] = (index, new, ref)
        if self.after_swap is not None:
            self.after_swap()
        return out


# (name, what UntypedStorage's own dict held under it, or _INHERITED), to put back
_storage_methods_installed: list[tuple[str, Any]] = []
_INHERITED = object()
# The methods that move a CPU storage's bytes into shared memory (share_memory_, and torch.multiprocessing's
# pickling of a storage), swapping its memory without an op the hook sees. torch wraps them in UntypedStorage
# itself (a lock around the C method); resize_ is StorageBase's, inherited.
_SHARING = ("_share_fd_cpu_", "_share_filename_cpu_")


def install_storage_methods(tracker: StorageTracker) -> None:
    """Route `UntypedStorage.resize_` through the tracker and let it know after a sharing method; see uninstall."""
    if _storage_methods_installed:
        return
    original = torch.UntypedStorage.resize_

    def resize_(self, size):
        return tracker.resize(self, int(size), original)

    replacements = {"resize_": resize_}
    for name in _SHARING:
        replacements[name] = _after_swap(tracker, getattr(torch.UntypedStorage, name))
    for name, method in replacements.items():
        _storage_methods_installed.append((name, torch.UntypedStorage.__dict__.get(name, _INHERITED)))
        setattr(torch.UntypedStorage, name, method)


def _after_swap(tracker: StorageTracker, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        out = method(self, *args, **kwargs)
        if tracker.after_swap is not None:
            tracker.after_swap()
        return out
    return wrapper


def uninstall_storage_methods() -> None:
    while _storage_methods_installed:
        name, own = _storage_methods_installed.pop()
        if own is _INHERITED:
            delattr(torch.UntypedStorage, name)  # the inherited C method shows through again
        else:
            setattr(torch.UntypedStorage, name, own)


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
        # A tensor subclass (a user's, DTensor): leave its type alone and do not pretend it moved.
        if block is not None:  # sized for it by a factory or a device move: nothing holds that block now
            tracker.runtime.free(index, block)
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
