"""CUDA streams and events for a device whose work runs on the host, synchronously.

Every op has finished when its Python call returns, so streams are always idle (query() is True), waits
return at once, and an event records the host clock: elapsed_time() between two events is the real duration
of the host work between them. Stream ids follow CUDA's convention that 0 is the default (legacy) stream.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from fakegpu.fakecuda.runtime import HostThread

_stream_ids = itertools.count(1)


class FakeStream(torch.Stream):
    """What torch.cuda.Stream offers (query, synchronize, wait_event, wait_stream, record_event, ...).

    A torch.Stream (device type CUDA, made from ids only, which touches no driver) because C++ entry points
    such as `Tensor.record_stream` accept nothing else; every method that would reach the device is
    answered here. stream_id, device_index, device_type and device are torch.Stream's own.
    """

    def __new__(cls, device: Any = None, priority: int = 0, *, stream_id: int | None = None, index: int = 0):
        stream_id = next(_stream_ids) if stream_id is None else stream_id
        return super().__new__(cls, stream_id=stream_id, device_index=index, device_type=1)  # 1: CUDA

    def __init__(self, device: Any = None, priority: int = 0, **_ids: Any) -> None:
        self.priority = priority

    @property
    def cuda_stream(self) -> int:
        return self.stream_id

    def __enter__(self) -> FakeStream:
        """`with stream:` makes it the calling thread's current stream on its device (torch.Stream's own
        `__enter__` would reach the driver); nn.DataParallel's workers enter theirs so."""
        if active is not None:
            active.enter(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if active is not None:
            active.exit()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def wait_event(self, event: FakeEvent) -> None:
        return None

    def wait_stream(self, stream: FakeStream) -> None:
        return None

    def record_event(self, event: FakeEvent | None = None) -> FakeEvent:
        event = event or FakeEvent()
        event.record(self)
        return event

    def is_capturing(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, FakeStream) and other.stream_id == self.stream_id
                and other.device_index == self.device_index)

    def __hash__(self) -> int:
        return hash((self.stream_id, self.device_index))

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream device=cuda:{self.device_index} cuda_stream={self.stream_id:#x}>"


class FakeEvent:
    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                 external: bool = False) -> None:
        self.enable_timing = enable_timing
        self._time: float | None = None

    def record(self, stream: FakeStream | None = None) -> None:
        self._time = time.perf_counter()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def wait(self, stream: FakeStream | None = None) -> None:
        return None

    def elapsed_time(self, end_event: FakeEvent) -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._time is None or end_event._time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._time - self._time) * 1000.0


class StreamState:
    """The current stream of each device, per thread, as PyTorch keeps it; its id also goes to the runtime's
    HostThread, which picks the allocator pool a new block comes from, as the caching allocator picks the pool of
    the current stream."""

    def __init__(self, count: int, thread: HostThread) -> None:
        self.default = [FakeStream(stream_id=0, index=i) for i in range(count)]
        self._thread = thread
        self._local = _Streams()

    def current(self, index: int) -> FakeStream:
        """The calling thread's current stream on device `index`."""
        return self._local.streams.get(index) or self.default[index]

    def set_current(self, stream: FakeStream) -> FakeStream:
        """Make `stream` current on its device for the calling thread; returns the stream it replaces."""
        index = stream.device_index
        previous = self.current(index)
        self._local.streams[index] = stream
        self._thread.stream_ids[index] = stream.stream_id
        return previous

    def enter(self, stream: FakeStream) -> None:
        self._local.entered.append(self.set_current(stream))

    def exit(self) -> None:
        if self._local.entered:
            self.set_current(self._local.entered.pop())


class _Streams(threading.local):
    def __init__(self) -> None:
        self.streams: dict[int, FakeStream] = {}
        self.entered: list[FakeStream] = []  # what `with stream:` replaced, innermost last


# The active fakecuda's streams (cuda_api installs it, deactivate() puts None back): what `with stream:` changes.
active: StreamState | None = None


class StreamContext:
    """torch.cuda.stream(s): make `s` current on its device for the block."""

    def __init__(self, state: StreamState, stream: FakeStream | None) -> None:
        self.state, self.stream, self.previous = state, stream, None

    def __enter__(self) -> FakeStream | None:
        if self.stream is not None:
            self.previous = self.state.set_current(self.stream)
        return self.stream

    def __exit__(self, *exc: object) -> None:
        if self.stream is not None:
            self.state.set_current(self.previous)
