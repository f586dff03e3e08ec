"""CUDA streams and events for a device whose work runs on the host, synchronously.

Every op has finished when its Python call returns, so streams are always idle (query() is True), waits
return at once, and an event records the host clock: elapsed_time() between two events is the real duration
of the host work between them. Stream ids follow CUDA's convention that 0 is the default (legacy) stream.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import torch

_stream_ids = itertools.count(1)


class FakeStream:
    """What torch.cuda.Stream offers (query, synchronize, wait_event, wait_stream, record_event, ...)."""

    def __init__(self, device: Any = None, priority: int = 0, *, stream_id: int | None = None, index: int = 0):
        self.device_index = index
        self.priority = priority
        self.stream_id = next(_stream_ids) if stream_id is None else stream_id

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self.device_index)

    @property
    def device_type(self) -> int:
        return 1  # c10::DeviceType::CUDA

    @property
    def cuda_stream(self) -> int:
        return self.stream_id

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
    """The current stream of each device."""

    def __init__(self, count: int) -> None:
        self.default = [FakeStream(stream_id=0, index=i) for i in range(count)]
        self.current = list(self.default)


class StreamContext:
    """torch.cuda.stream(s): make `s` current on its device for the block."""

    def __init__(self, state: StreamState, stream: FakeStream | None) -> None:
        self.state, self.stream, self.previous = state, stream, None

    def __enter__(self) -> FakeStream | None:
        if self.stream is not None:
            self.previous = self.state.current[self.stream.device_index]
            self.state.current[self.stream.device_index] = self.stream
        return self.stream

    def __exit__(self, *exc: object) -> None:
        if self.stream is not None:
            self.state.current[self.stream.device_index] = self.previous
