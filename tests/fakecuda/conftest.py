"""fakecuda tests that import torch are marked `torch`; each active-fakecuda test gets a fresh runtime."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest


@pytest.fixture
def fakecuda():
    torch = pytest.importorskip("torch")
    import fakegpu.fakecuda as fc

    def start(devices: str = "a100:2"):
        return fc.activate(devices)

    # storage methods fakecuda wraps (tensor.py): torch defines some in UntypedStorage itself, others it inherits
    storage_methods = ("resize_", "_share_fd_cpu_", "_share_filename_cpu_")
    own = {name: torch.UntypedStorage.__dict__.get(name) for name in storage_methods}
    bootstrap = threading.Thread._bootstrap_inner  # (threads.py wraps it while active)
    # nn.DataParallel's Functions and streams, torch._C's collectives (comm.py): the originals, or none
    from torch.nn.parallel import _functions

    parallel = [(cls, dict(cls.__dict__)) for cls in (_functions.Broadcast, _functions.ReduceAddCoalesced,
                                                      _functions.Gather, _functions.Scatter)]
    get_stream = _functions._get_stream
    collectives = {name: getattr(torch._C, name, None) for name in ("_broadcast_coalesced", "_nccl_reduce")}
    # custom Functions' apply and their nodes' (backward.py)
    from torch.autograd.function import BackwardCFunction, Function

    functions = (Function.__dict__["apply"], dict(BackwardCFunction.__dict__))
    yield start
    fc.deactivate()
    # torch's own functions are back (ours are bound methods of FakeCudaApi)
    assert torch.cuda.is_available.__module__ == "torch.cuda" and not fc.is_active()
    assert {name: torch.UntypedStorage.__dict__.get(name) for name in storage_methods} == own
    assert threading.Thread._bootstrap_inner is bootstrap
    assert all(dict(cls.__dict__) == methods for cls, methods in parallel) and _functions._get_stream is get_stream
    assert {name: getattr(torch._C, name, None) for name in collectives} == collectives
    assert (Function.__dict__["apply"], dict(BackwardCFunction.__dict__)) == functions


@pytest.fixture
def requested():
    """`with requested() as sizes:` the bytes of each block the active runtime's allocator models hand out meanwhile,
    in order: their "alloc" events, whoever asks (the Python rules, or the C++ hook's fast path, which calls the
    model without passing through Runtime.malloc)."""
    from fakegpu.fakecuda import _active

    @contextlib.contextmanager
    def record() -> Iterator[list[int]]:
        sizes: list[int] = []
        models = [device.allocator for device in _active["runtime"].devices]
        previous = [model.on_event for model in models]

        def on_event(action: str, address: int, size: int, stream: int, extra: dict) -> None:
            if action == "alloc":
                sizes.append(size)

        for model in models:
            model.on_event = on_event
        try:
            yield sizes
        finally:
            for model, old in zip(models, previous, strict=True):
                model.on_event = old

    return record
