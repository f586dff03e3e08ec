"""allocator.py's model of PyTorch's caching allocator, run in C++ (allocator.cpp, in fakecuda's extension).

fakecuda takes a block from the model for every storage an op creates and returns it when the storage dies; in
Python that bookkeeping was most of the charging rules' cost per op (bench/bench_fakecuda.py). The C++ model makes
the same decisions (tests/fakecuda/test_allocator_cxx.py replays random workloads through both and compares every
address, statistic, segment and event); activate() puts it in wherever the C++ charging hook is used, so
FAKEGPU_FAKECUDA_HOOK=python runs the Python model, the reference.

A block handle here is the block's device address (an int); statistics are read through a view that builds
allocator.py's DeviceStats from the C++ counters on each read.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from fakegpu.fakecuda.allocator import AllocatorFace, DeviceAllocator
from fakegpu.fakecuda.config import AllocatorConfig
from fakegpu.fakecuda.stats import DeviceStats


class StatsView:
    """A C++ allocator's statistics with DeviceStats' reading methods; resets act on the C++ counters."""

    def __init__(self, allocator: Any) -> None:
        self._allocator = allocator

    def snapshot(self) -> DeviceStats:
        return DeviceStats.from_table(self._allocator.config.max_split_size, self._allocator.stats_table())

    @property
    def core(self) -> dict:
        return self.snapshot().core

    def current(self, name: str) -> int:
        return self.snapshot().current(name)

    def as_nested_dict(self) -> dict[str, Any]:
        return self.snapshot().as_nested_dict()

    def flat(self) -> dict[str, int]:
        return self.snapshot().flat()

    def reset_peak(self) -> None:
        self._allocator.reset_peak()

    def reset_accumulated(self) -> None:
        self._allocator.reset_accumulated()

    def __getattr__(self, name: str) -> Any:  # the counters: num_ooms, num_alloc_retries, ...
        if name.startswith("num_") or name.startswith("oversize_"):
            return getattr(self.snapshot(), name)
        raise AttributeError(name)


def allocator_class(ext: ModuleType) -> type:
    """The C++ model's class for the loaded extension `ext`: its Allocator with AllocatorFace's methods."""
    cached = getattr(ext, "_fakegpu_device_allocator", None)
    if cached is not None:
        return cached

    class CxxDeviceAllocator(ext.Allocator, AllocatorFace):
        def __init__(self, device: int, device_total: int, config: AllocatorConfig | None = None,
                     non_pytorch_bytes: int = 0) -> None:
            config = config or AllocatorConfig()
            # a division count past 2**63 (any power of two the config accepts) acts as 2**63 does: no size reaches
            # 512 times it, so it never rounds; C++ takes 64-bit counts
            divisions = [min(d, 1 << 63) for d in config.roundup_power2_divisions]
            super().__init__(device, device_total, config.max_split_size, config.max_non_split_rounding_size,
                             divisions, non_pytorch_bytes)
            self.config = config
            self.others = tuple
            self.stats = StatsView(self)
            if config.per_process_memory_fraction < 1.0:
                self.set_memory_fraction(config.per_process_memory_fraction)

        def __repr__(self) -> str:
            return f"CxxDeviceAllocator(device={self.device}, reserved={self.total_allocated_memory})"

    ext._fakegpu_device_allocator = CxxDeviceAllocator
    return CxxDeviceAllocator


def replace(old: DeviceAllocator, cls: type) -> Any:
    """A C++ model in place of a Python one no block was taken from yet, with its settings."""
    if old.stats.num_device_alloc or old.active_blocks:
        raise RuntimeError(f"device {old.device}: the allocator model is in use; it cannot be replaced")
    new = cls(old.device, old.device_total, old.config, old.non_pytorch_bytes)
    new.allowed_memory_maximum = old.allowed_memory_maximum
    new.others = old.others
    new.on_event = old.on_event
    return new
