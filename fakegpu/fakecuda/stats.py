"""The allocator's statistics, shaped as PyTorch's DeviceStats so memory_stats() keys match the real ones."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

# The per-pool breakdown PyTorch reports for every core statistic ("allocated_bytes.all.current", ...).
POOL_TYPES = ("all", "small_pool", "large_pool")
CORE_STATS = (
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
)


@dataclass(slots=True)
class Stat:
    current: int = 0
    peak: int = 0
    allocated: int = 0
    freed: int = 0

    def increase(self, amount: int) -> None:
        current = self.current = self.current + amount
        if current > self.peak:
            self.peak = current
        self.allocated += amount

    def decrease(self, amount: int) -> None:
        self.current -= amount
        if self.current < 0:
            raise AssertionError("negative allocator statistic: the model lost track of a block")
        self.freed += amount

    def reset_peak(self) -> None:
        self.peak = self.current

    def reset_accumulated(self) -> None:
        self.allocated = 0
        self.freed = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class DeviceStats:
    """Every counter of one device's allocator; `core[name][pool]` is a Stat."""

    def __init__(self, max_split_size: int) -> None:
        self.core: dict[str, dict[str, Stat]] = {n: {p: Stat() for p in POOL_TYPES} for n in CORE_STATS}
        self.oversize_allocations = Stat()
        self.oversize_segments = Stat()
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self.max_split_size = max_split_size
        # The stats a block's allocation and free move, per pool, as (aggregate, pool) pairs: the allocator's
        # per-tensor path updates them in one call each (taken / returned / inactive) instead of one per name.
        core = self.core
        self._pairs = {name: {pool: (per_pool["all"], per_pool[pool]) for pool in POOL_TYPES[1:]}
                       for name, per_pool in core.items()}
        self._counts = {pool: (*self._pairs["allocation"][pool], *self._pairs["active"][pool])
                        for pool in POOL_TYPES[1:]}
        self._bytes = {pool: (*self._pairs["allocated_bytes"][pool], *self._pairs["active_bytes"][pool])
                       for pool in POOL_TYPES[1:]}

    @classmethod
    def from_table(cls, max_split_size: int, table: tuple) -> DeviceStats:
        """The statistics as allocator.cpp's stats_table() lists them: the core stats by CORE_STATS and POOL_TYPES
        as (current, peak, allocated, freed), the two oversize stats, then the five counters."""
        stats = cls(max_split_size)
        core, oversize_allocations, oversize_segments, *counters = table
        # filled in place: the per-pool pairs made in __init__ keep pointing at these Stats
        targets = [stats.core[name][pool] for name in CORE_STATS for pool in POOL_TYPES]
        targets += [stats.oversize_allocations, stats.oversize_segments]
        values = [v for row in core for v in row] + [oversize_allocations, oversize_segments]
        for stat, (current, peak, allocated, freed) in zip(targets, values, strict=True):
            stat.current, stat.peak, stat.allocated, stat.freed = current, peak, allocated, freed
        (stats.num_alloc_retries, stats.num_ooms, stats.num_sync_all_streams, stats.num_device_alloc,
         stats.num_device_free) = counters
        return stats

    def increase(self, name: str, pool: str, amount: int) -> None:
        """Adds to the aggregate and to one pool, as PyTorch's per-pool stat types do."""
        for stat in self._pairs[name][pool]:
            current = stat.current = stat.current + amount
            if current > stat.peak:
                stat.peak = current
            stat.allocated += amount

    def decrease(self, name: str, pool: str, amount: int) -> None:
        for stat in self._pairs[name][pool]:
            current = stat.current = stat.current - amount
            if current < 0:
                raise AssertionError("negative allocator statistic: the model lost track of a block")
            stat.freed += amount

    def taken(self, pool: str, size: int, requested: int) -> None:
        """A block of `size` bytes (`requested` asked for) handed out: allocation, active, allocated_bytes,
        active_bytes and requested_bytes rise, in the aggregate and the pool (Stat.increase, inlined)."""
        for stat in self._counts[pool]:
            current = stat.current = stat.current + 1
            if current > stat.peak:
                stat.peak = current
            stat.allocated += 1
        for stat in self._bytes[pool]:
            current = stat.current = stat.current + size
            if current > stat.peak:
                stat.peak = current
            stat.allocated += size
        self.increase("requested_bytes", pool, requested)

    def returned(self, pool: str, size: int) -> None:
        """A block of `size` bytes freed by its owner: allocation and allocated_bytes fall (Stat.decrease, inlined)."""
        self._fall(self._pairs["allocation"][pool], 1)
        self._fall(self._pairs["allocated_bytes"][pool], size)

    def inactive(self, pool: str, size: int, requested: int) -> None:
        """A freed block back in its pool: active, active_bytes and requested_bytes fall."""
        self._fall(self._pairs["active"][pool], 1)
        self._fall(self._pairs["active_bytes"][pool], size)
        self._fall(self._pairs["requested_bytes"][pool], requested)

    @staticmethod
    def _fall(pair: tuple[Stat, Stat], amount: int) -> None:
        for stat in pair:
            current = stat.current = stat.current - amount
            if current < 0:
                raise AssertionError("negative allocator statistic: the model lost track of a block")
            stat.freed += amount

    def current(self, name: str) -> int:
        return self.core[name]["all"].current

    def _all_stats(self) -> list[Stat]:
        return [s for per_pool in self.core.values() for s in per_pool.values()] + [
            self.oversize_allocations,
            self.oversize_segments,
        ]

    def reset_peak(self) -> None:
        for stat in self._all_stats():
            stat.reset_peak()

    def reset_accumulated(self) -> None:
        for stat in self._all_stats():
            stat.reset_accumulated()
        self.num_alloc_retries = self.num_ooms = self.num_sync_all_streams = 0
        self.num_device_alloc = self.num_device_free = 0

    def as_nested_dict(self) -> dict[str, Any]:
        """What torch._C._cuda_memoryStats returns; torch.cuda.memory_stats() flattens it with dots."""
        nested: dict[str, Any] = {
            name: {pool: stat.as_dict() for pool, stat in per_pool.items()} for name, per_pool in self.core.items()
        }
        nested.update(
            num_alloc_retries=self.num_alloc_retries,
            num_ooms=self.num_ooms,
            num_sync_all_streams=self.num_sync_all_streams,
            num_device_alloc=self.num_device_alloc,
            num_device_free=self.num_device_free,
            # No policy rejects allocations before cudaMalloc here (throw_on_cudamalloc_oom is not modeled).
            num_oom_rejections=0,
            max_split_size=self.max_split_size,
            oversize_allocations=self.oversize_allocations.as_dict(),
            oversize_segments=self.oversize_segments.as_dict(),
            reserved_bytes_by_private_pools={},
        )
        return nested

    def flat(self) -> dict[str, int]:
        """The flattened, sorted form torch.cuda.memory_stats() returns (for callers without torch)."""
        out: dict[str, int] = {}

        def walk(prefix: str, obj: Any) -> None:
            if isinstance(obj, dict):
                for key, value in obj.items():
                    walk(f"{prefix}.{key}" if prefix else str(key), value)
            else:
                out[prefix] = obj

        walk("", self.as_nested_dict())
        return dict(sorted(out.items()))
