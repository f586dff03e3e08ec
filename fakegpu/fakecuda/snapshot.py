"""torch.cuda.memory's snapshot and history from the allocator model: `_snapshot()`, `memory_snapshot()`,
`_dump_snapshot()` (the file pytorch.org/memory_viz reads) and `_record_memory_history()`.

torch answers these from its CUDA caching allocator, which a fake device never initializes: the snapshot came back
empty and recording history raised "Found no NVIDIA driver". Here the same dictionaries are made from the model
(allocator.py), which decides every segment, block and address by the caching allocator's rules:
- segments and their blocks as `torch._C._cuda_memorySnapshot` returns them (address, sizes, stream, pool, the
  block states active_allocated / active_awaiting_free / inactive, the frames of live allocations);
- while history is recorded, a trace per device of the allocator's actions (segment_alloc, alloc,
  free_requested, free_completed, segment_free, oom, snapshot) with Python stack frames, innermost first.
Addresses are the model's device addresses (those of a real run differ anyway), not the host pointers
`Tensor.data_ptr()` gives under fakecuda. Only Python frames exist here: `stacks="all"` records the same as
`"python"`.
"""

from __future__ import annotations

import collections
import os
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fakegpu.fakecuda.allocator import AllocatorFace
    from fakegpu.fakecuda.runtime import Runtime

_ENABLED = (None, "state", "all")
_CONTEXT = (None, "state", "alloc", "all")
_STACKS = ("python", "all")
_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom", "snapshot")
# fakecuda's own frames (this package's Python) are left out of the recorded stacks: they are not the program's
_OWN = __name__.rsplit(".", 1)[0].replace(".", "/") + "/"


class History:
    """What `_record_memory_history` turned on, and what it recorded, for every device of one runtime."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.enabled: str | None = None
        self.context: str | None = None
        self.max_entries = sys.maxsize
        self.skip: frozenset[str] = frozenset()
        self.traces: list[collections.deque] = [collections.deque() for _ in runtime.devices]
        self.frames: dict[int, list[dict[str, Any]]] = {}  # live block's address -> where it was allocated

    def record(self, enabled: str | None = "all", context: str | None = "all", stacks: str = "all",
               max_entries: int = sys.maxsize, clear_history: bool = False, *_rest: Any, **_options: Any) -> None:
        """torch._C._cuda_record_memory_history's arguments (the trailing ones, compile context, annotations and
        host memory, are accepted and have nothing to act on here, except skip_actions)."""
        for name, value, accepted in (("enabled", enabled, _ENABLED), ("context", context, _CONTEXT),
                                      ("stacks", stacks, _STACKS)):
            if value not in accepted:
                raise RuntimeError(f"_record_memory_history: {name}={value!r} is not one of "
                                   f"{', '.join(map(repr, accepted))}")
        if not isinstance(max_entries, int) or max_entries < 1:
            raise RuntimeError(f"_record_memory_history: max_entries must be a positive int, not {max_entries!r}")
        # (compile_context, global_record_annotations, skip_actions, ...) follow positionally from 2.15
        skip = _rest[2] if len(_rest) > 2 else _options.get("skip_actions") or []
        unknown = [a for a in skip if a not in _ACTIONS]
        if unknown:
            raise RuntimeError(f"_record_memory_history: unknown skip_actions {unknown}; accepted: "
                               f"{', '.join(_ACTIONS)}")
        self.enabled, self.context, self.skip = enabled, context, frozenset(skip)
        if clear_history or enabled is None:
            for trace in self.traces:
                trace.clear()
        if max_entries != self.max_entries:
            self.max_entries = max_entries
            self.traces = [collections.deque(trace, maxlen=None if max_entries == sys.maxsize else max_entries)
                           for trace in self.traces]
        if enabled is None:
            self.frames.clear()
        listen = self._event if enabled is not None else None
        for device in self.runtime.devices:
            device.allocator.on_event = _bind(listen, device.index) if listen is not None else None

    def record_legacy(self, enabled: bool, record_context: bool = True, trace_alloc_max_entries: int = 1,
                      trace_alloc_record_context: bool = False, *_rest: Any) -> None:
        """`_record_memory_history(enabled=True/False, ...)`, torch's older form, in the newer one's terms."""
        if not enabled:
            self.record(None)
            return
        context = ("all" if trace_alloc_record_context else "state") if record_context else None
        self.record("all" if trace_alloc_max_entries > 0 else "state", context, "python",
                    trace_alloc_max_entries if trace_alloc_max_entries > 0 else sys.maxsize)

    def _event(self, index: int, action: str, address: int, size: int, stream: int, extra: dict) -> None:
        context = self.context
        # "state": where live blocks were allocated (the snapshot's blocks); "alloc": the trace's allocations
        # too; "all": every trace entry
        frames = _python_frames() if context is not None and (action == "alloc" or context == "all") else None
        if self.enabled == "all" and action not in self.skip:
            with_frames = context == "all" or (context == "alloc" and action == "alloc")
            traced = frames if frames is not None and with_frames else []
            entry = {"action": action, "addr": address, "size": size, "stream": stream,
                     "time_us": time.monotonic_ns() // 1000, "frames": traced}
            if action == "oom":  # torch's entry for an OOM holds the device's free bytes where others hold addr
                del entry["addr"]
            entry.update(extra)
            self.traces[index].append(entry)
        if action == "alloc" and frames is not None:
            self.frames[address] = frames
        elif action == "free_requested":
            self.frames.pop(address, None)

    def snapshot(self, template: dict[str, Any]) -> dict[str, Any]:
        """torch's snapshot dictionary (`template`: torch's own, for the keys a release adds) from the model."""
        if self.enabled == "all" and "snapshot" not in self.skip:
            for trace in self.traces:
                trace.append({"action": "snapshot", "addr": 0, "size": 0, "stream": 0,
                              "time_us": time.monotonic_ns() // 1000, "frames": []})
        out = dict(template)
        out["segments"] = [segment for device in self.runtime.devices if device.initialized
                           for segment in _segments(device.index, device.allocator, self.frames)]
        out["device_traces"] = [list(trace) for trace in self.traces]
        settings = out.get("allocator_settings")
        if isinstance(settings, dict) and self.runtime.devices:
            out["allocator_settings"] = {**settings, "max_split_size": _max_split_size(self.runtime),
                                         "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
        return out


def _max_split_size(runtime: Runtime) -> int:
    """max_split_size as torch's settings report it (-1: unlimited)."""
    from fakegpu.fakecuda.config import SIZE_MAX

    size = runtime.devices[0].allocator.config.max_split_size
    return -1 if size == SIZE_MAX else size


def _bind(listen: Any, index: int) -> Any:
    def on_event(action: str, address: int, size: int, stream: int, extra: dict) -> None:
        listen(index, action, address, size, stream, extra)
    return on_event


def _python_frames() -> list[dict[str, Any]]:
    """The program's Python stack, innermost first, without fakecuda's own frames."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if _OWN not in code.co_filename.replace("\\", "/"):
            frames.append({"filename": code.co_filename, "line": frame.f_lineno, "name": code.co_name})
        frame = frame.f_back
    return frames


def _segments(index: int, allocator: AllocatorFace, frames: dict[int, list]) -> list[dict[str, Any]]:
    segments = []
    for chain in allocator.segment_table():
        blocks = [{"address": ptr, "size": size, "requested_size": requested if state != "inactive" else 0,
                   "state": state, "frames": frames.get(ptr, []) if state == "active_allocated" else []}
                  for ptr, size, requested, state, _stream, _small in chain]
        head = chain[0]
        segments.append({
            "device": index, "address": head[0], "total_size": sum(b["size"] for b in blocks),
            "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
            "active_size": sum(b["size"] for b in blocks if b["state"] != "inactive"),
            "requested_size": sum(b["requested_size"] for b in blocks),
            "stream": head[4], "segment_type": "small" if head[5] else "large",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks,
        })
    return segments
