"""A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, native backend).

It decides, for every tensor allocation and free, which cached block is reused, when a block is split, when a
new segment is "cudaMalloc'ed", and what is released before an out-of-memory error, by the same rules as the
real allocator, so memory_allocated / memory_reserved / memory_stats() report what a real board would.
Pure Python: no torch needed; the fakecuda mode feeds it storage sizes. allocator.cpp runs the same rules in C++
under fakecuda's C++ hook (allocator_cxx.py); this module is the reference both are tested against.

The rules, in PyTorch's words and constants:
- sizes round up to 512 bytes (or to power-of-two divisions when roundup_power2_divisions asks);
- requests <= 1 MiB use the small pool, packed in 2 MiB segments; larger ones the large pool, where
  requests < 10 MiB get a 20 MiB segment and bigger ones a segment rounded up to 2 MiB;
- a free block is found best-fit in the pool of the same stream (ordered by stream, size, address);
  blocks >= max_split_size are not split and serve only requests within max_non_split_rounding of them;
- a found block is split when the rest is >= 512 bytes (small pool) or > 1 MiB (large pool);
- freed blocks merge with free neighbours of the same segment;
- when cudaMalloc would fail: free oversize cached blocks and retry, then free every unsplit cached block
  and retry (counted in num_alloc_retries), then raise OutOfMemoryError with PyTorch's message.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from fakegpu.fakecuda.config import SIZE_MAX, AllocatorConfig
from fakegpu.fakecuda.errors import ModelOutOfMemory
from fakegpu.fakecuda.oom import oom_message
from fakegpu.fakecuda.stats import DeviceStats

_insort, _bisect_left = bisect.insort, bisect.bisect_left

K_MIN_BLOCK_SIZE = 512
K_SMALL_SIZE = 1 << 20
K_SMALL_BUFFER = 2 << 20
K_LARGE_BUFFER = 20 << 20
K_MIN_LARGE_ALLOC = 10 << 20
K_ROUND_LARGE = 2 << 20

# Each fake device's address range: distinct, plausible 64-bit device addresses.
_ADDRESS_BASE = 0x7F00_0000_0000
_ADDRESS_STRIDE = 1 << 40


class AddressSpace:
    """Where cudaMalloc places segments: at the lowest free range that holds them, freed ranges given back and
    reused. The order matters beyond looks: among free blocks of equal size the caching allocator takes the lowest
    address. On a real H200 (torch 2.11, tests/data/gpu/h200/mem_workloads.json) the reuse is visible:
    activation_checkpointing's trace equals fakecuda's event by event only with freed ranges reused (addresses
    that only grow miss it), and adamw_step's and rmsnorm_silu_dropout's only bottom-up (native mode's pages,
    mapped top-down by the kernel's mmap, miss both). Where the driver puts a segment is not known in general:
    transformer_encoder, gpt2_causal_lm and embedding_cross_entropy_large_vocab each show a later segment below an
    earlier one of the same size, which no single rule tried (bottom-up, top-down, best fit, either above a size)
    reproduces together with the others; the driver's own untraced allocations take address space too."""

    def __init__(self, base: int, span: int) -> None:
        self._free: list[tuple[int, int]] = [(base, base + span)]  # [start, end), by address

    def take(self, size: int) -> int:
        for i, (start, end) in enumerate(self._free):
            if end - start >= size:
                if end - start == size:
                    del self._free[i]
                else:
                    self._free[i] = (start + size, end)
                return start
        raise MemoryError("fake device address space exhausted")

    def give(self, ptr: int, size: int) -> None:
        free = self._free
        i = bisect.bisect_left(free, (ptr, ptr))
        start, end = ptr, ptr + size
        if i < len(free) and free[i][0] == end:
            end = free.pop(i)[1]
        if i > 0 and free[i - 1][1] == start:
            start = free.pop(i - 1)[0]
            i -= 1
        free.insert(i, (start, end))


class Block:
    __slots__ = ("allocated", "device", "next", "pool", "prev", "ptr", "requested_size", "size", "stream",
                 "stream_uses")

    def __init__(self, device: int, stream: int, size: int, pool: BlockPool, ptr: int) -> None:
        self.device = device
        self.stream = stream
        self.size = size
        self.requested_size = 0
        self.pool = pool
        self.ptr = ptr
        self.allocated = False
        self.prev: Block | None = None
        self.next: Block | None = None
        self.stream_uses: set[int] = set()

    @property
    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def key(self) -> tuple[int, int, int]:
        return (self.stream, self.size, self.ptr)

    def __repr__(self) -> str:
        state = "allocated" if self.allocated else "free"
        return f"Block(size={self.size}, stream={self.stream}, ptr={self.ptr:#x}, {state})"


class BlockPool:
    """Free blocks of one size class, ordered like PyTorch's BlockComparatorSize: (stream, size, address)."""

    def __init__(self, is_small: bool) -> None:
        self.is_small = is_small
        self.pool_name = "small_pool" if is_small else "large_pool"
        self._keys: list[tuple[int, int, int]] = []
        self._blocks: dict[tuple[int, int, int], Block] = {}

    def insert(self, block: Block) -> None:
        key = (block.stream, block.size, block.ptr)
        _insort(self._keys, key)
        self._blocks[key] = block

    def remove(self, block: Block) -> None:
        key = (block.stream, block.size, block.ptr)
        del self._keys[_bisect_left(self._keys, key)]
        del self._blocks[key]

    def lower_bound(self, stream: int, size: int) -> int:
        return bisect.bisect_left(self._keys, (stream, size, -1))

    def at(self, index: int) -> Block | None:
        return self._blocks[self._keys[index]] if 0 <= index < len(self._keys) else None

    def __iter__(self) -> Iterator[Block]:
        return iter([self._blocks[k] for k in self._keys])

    def __len__(self) -> int:
        return len(self._keys)


def round_size(size: int, config: AllocatorConfig) -> int:
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    divisions = config.divisions_for(size)
    if divisions > 1 and size > K_MIN_BLOCK_SIZE * divisions:
        return _roundup_power2_next_division(size, divisions)
    return K_MIN_BLOCK_SIZE * ((size + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE)


def _roundup_power2_next_division(size: int, divisions: int) -> int:
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    rounded = size & ~(step - 1)
    return size if rounded == size else rounded + step


def allocation_size(size: int) -> int:
    """The segment size cudaMalloc is asked for when no cached block fits a (rounded) request."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


class AllocatorFace:
    """What both implementations of the model (DeviceAllocator here, allocator_cxx.CxxDeviceAllocator in C++) offer
    on top of malloc / free / record_stream / release_cached_blocks / device_free / segment_table: the parts
    computed from their state the same way. A block handle is whatever malloc returned; only the model reads it."""

    device: int
    device_total: int
    non_pytorch_bytes: int
    total_allocated_memory: int
    allowed_memory_maximum: int | None
    others: Callable[[], Sequence[tuple[int | None, int]]]
    stats: Any  # DeviceStats, or a view with its reading methods

    def set_memory_fraction(self, fraction: float) -> None:
        self.allowed_memory_maximum = int(fraction * self.device_total)

    def empty_cache(self) -> None:
        self.release_cached_blocks()

    @property
    def allocated_bytes(self) -> int:
        return self.stats.current("allocated_bytes")

    @property
    def reserved_bytes(self) -> int:
        return self.stats.current("reserved_bytes")

    def oom_message(self, alloc_size: int) -> str:
        return oom_message(
            device=self.device, alloc_size=alloc_size, device_total=self.device_total,
            device_free=self.device_free(), process_in_use=self.non_pytorch_bytes + self.total_allocated_memory,
            allowed=self.allowed_memory_maximum, allocated=self.allocated_bytes, reserved=self.reserved_bytes,
            others=self.others(),
        )

    def _out_of_memory(self, alloc_size: int, orig_size: int) -> NoReturn:
        raise ModelOutOfMemory(self.oom_message(alloc_size), self.device, orig_size)


class DeviceAllocator(AllocatorFace):
    """The caching allocator of one device.

    `device_total` is what cudaMemGetInfo reports as total (the profile's CUDA total); `non_pytorch_bytes` is
    device memory this process holds outside the allocator (the CUDA context), which cudaMalloc cannot use; nor
    can it use what `others()` says the run's other processes hold on the device ((pid, bytes) each, from the
    shared state; pid None: held outside the run, by a memory-pressure fault).
    """

    def __init__(self, device: int, device_total: int, config: AllocatorConfig | None = None,
                 non_pytorch_bytes: int = 0) -> None:
        self.device = device
        self.device_total = device_total
        self.non_pytorch_bytes = non_pytorch_bytes
        self.others: Callable[[], Sequence[tuple[int | None, int]]] = tuple
        self.config = config or AllocatorConfig()
        self.stats = DeviceStats(self.config.max_split_size)
        self.small_blocks = BlockPool(is_small=True)
        self.large_blocks = BlockPool(is_small=False)
        self.active_blocks: set[Block] = set()
        self.total_allocated_memory = 0  # bytes in live segments ("cudaMalloc'ed")
        self.allowed_memory_maximum: int | None = None
        self._pending_frees: list[Block] = []
        # (action, address, size, stream, extra) at each of the allocator's actions, as CUDACachingAllocator's
        # history records them (snapshot.py): the size is the request's for alloc / free_requested /
        # free_completed, the segment's for segment_alloc / segment_free, the rounded one for oom; None: nobody
        # listens, the per-block path pays one test
        self.on_event: Callable[[str, int, int, int, dict], None] | None = None
        self._addresses = AddressSpace(_ADDRESS_BASE + device * _ADDRESS_STRIDE, _ADDRESS_STRIDE)
        # CUDACachingAllocator's mutex: the threads of a program (threads.py) and the deaths they see call malloc
        # and free at once, and a change to the pools is several Python steps another thread may come between.
        # Re-entrant: on_event and others() are Python, and a collection they set off frees on the same thread.
        self._lock = threading.RLock()
        if self.config.per_process_memory_fraction < 1.0:
            self.set_memory_fraction(self.config.per_process_memory_fraction)

    # -- what cudaMemGetInfo and cudaMalloc see

    def device_free(self) -> int:
        others = sum(used for _, used in self.others())
        return max(0, self.device_total - self.non_pytorch_bytes - self.total_allocated_memory - others)

    @property
    def num_device_alloc(self) -> int:
        return self.stats.num_device_alloc

    # -- the public operations

    def malloc(self, orig_size: int, stream: int = 0) -> Block:
        with self._lock:
            return self._malloc(orig_size, stream)

    def free(self, block: Block) -> None:
        with self._lock:
            self._free(block)

    def release_cached_blocks(self) -> bool:
        with self._lock:
            return self._release_cached_blocks()

    def _malloc(self, orig_size: int, stream: int) -> Block:
        if self._pending_frees:  # PyTorch's process_events: reclaim blocks whose other-stream work is done
            self._drain_pending()
        size = round_size(orig_size, self.config)
        pool = self.small_blocks if size <= K_SMALL_SIZE else self.large_blocks
        alloc_size = allocation_size(size)
        block = self._get_free_block(pool, stream, size)
        if block is None:
            block = (
                self._alloc_block(pool, stream, alloc_size, is_retry=False)
                or (self._release_available_cached_blocks(pool, stream, size)
                    and self._alloc_block(pool, stream, alloc_size, is_retry=False))
                or (self.release_cached_blocks() and self._alloc_block(pool, stream, alloc_size, is_retry=True))
                or None
            )
        if block is None:
            self.stats.num_ooms += 1
            if self.on_event is not None:
                self.on_event("oom", 0, size, stream, {"device_free": self.device_free()})
            self._out_of_memory(alloc_size, orig_size)
        return self._alloc_found_block(block, pool, stream, size, orig_size)

    def _free(self, block: Block) -> None:
        if not block.allocated:
            raise AssertionError(f"double free of {block!r}")
        block.allocated = False
        if self.on_event is not None:
            self.on_event("free_requested", block.ptr, block.requested_size, block.stream, {})
        self.stats.returned(block.pool.pool_name, block.size)
        if block.size >= self.config.max_split_size:
            self.stats.oversize_allocations.decrease(1)
        if block.stream_uses:
            # Work queued on other streams may still read the block; it is reclaimed once that work is done,
            # which the host-executed fake finds at the next malloc (PyTorch's process_events).
            self._pending_frees.append(block)
        else:
            self._free_block(block)

    def record_stream(self, block: Block, stream: int) -> None:
        if stream != block.stream:
            block.stream_uses.add(stream)

    def _release_cached_blocks(self) -> bool:
        self._synchronize_and_free_events()
        for pool in (self.large_blocks, self.small_blocks):
            for block in pool:
                if not block.is_split:
                    self._release_block(block)
        return True

    # -- the rules

    def _get_free_block(self, pool: BlockPool, stream: int, size: int) -> Block | None:
        keys = pool._keys
        found = _bisect_left(keys, (stream, size, -1))
        if found == len(keys):
            return None
        block = pool._blocks[keys[found]]
        if block.stream != stream:
            return None
        max_split = self.config.max_split_size
        if size < max_split and block.size >= max_split:
            return None  # an oversize block never serves a request that could be split
        if size >= max_split and block.size >= size + self.config.max_non_split_rounding_size:
            return None  # nor one it would round up too far
        pool.remove(block)
        return block

    def _alloc_block(self, pool: BlockPool, stream: int, size: int, is_retry: bool) -> Block | None:
        if is_retry:
            self.stats.num_alloc_retries += 1
        if self.allowed_memory_maximum is not None and self.total_allocated_memory + size > self.allowed_memory_maximum:
            return None
        if size > self.device_free():
            return None
        ptr = self._addresses.take(size)
        self.total_allocated_memory += size
        block = Block(self.device, stream, size, pool, ptr)
        self.stats.increase("segment", pool.pool_name, 1)
        self.stats.increase("reserved_bytes", pool.pool_name, size)
        if size >= self.config.max_split_size:
            self.stats.oversize_segments.increase(1)
        self.stats.num_device_alloc += 1
        if self.on_event is not None:
            self.on_event("segment_alloc", ptr, size, stream, {})
        return block

    def _should_split(self, block: Block, size: int) -> bool:
        remaining = block.size - size
        if block.pool.is_small:
            return remaining >= K_MIN_BLOCK_SIZE
        return size < self.config.max_split_size and remaining > K_SMALL_SIZE

    def _alloc_found_block(self, block: Block, pool: BlockPool, stream: int, size: int, orig_size: int) -> Block:
        name = pool.pool_name
        already_split = block.is_split
        if self._should_split(block, size):
            remaining = block
            block = Block(self.device, stream, size, pool, remaining.ptr)
            block.prev = remaining.prev
            if block.prev is not None:
                block.prev.next = block
            block.next = remaining
            remaining.prev = block
            remaining.ptr += size
            remaining.size -= size
            pool.insert(remaining)
            if already_split:
                self.stats.decrease("inactive_split_bytes", name, block.size)
            else:
                self.stats.increase("inactive_split_bytes", name, remaining.size)
                self.stats.increase("inactive_split", name, 1)
        elif already_split:
            self.stats.decrease("inactive_split_bytes", name, block.size)
            self.stats.decrease("inactive_split", name, 1)
        block.allocated = True
        block.requested_size = orig_size
        self.active_blocks.add(block)
        self.stats.taken(name, block.size, orig_size)
        if block.size >= self.config.max_split_size:
            self.stats.oversize_allocations.increase(1)
        if self.on_event is not None:
            self.on_event("alloc", block.ptr, orig_size, stream, {})
        return block

    def _free_block(self, block: Block) -> None:
        pool = block.pool
        original_size, requested = block.size, block.requested_size
        if self.on_event is not None:
            self.on_event("free_completed", block.ptr, requested, block.stream, {})
        split_blocks_change = 0
        split_bytes_change = 0
        for candidate in (block.prev, block.next):
            subsumed = self._try_merge_blocks(block, candidate, pool)
            if subsumed:
                split_blocks_change -= 1
                split_bytes_change -= subsumed
        self.active_blocks.discard(block)
        pool.insert(block)
        if block.is_split:
            split_blocks_change += 1
            split_bytes_change += block.size
        name = pool.pool_name
        if split_blocks_change > 0:
            self.stats.increase("inactive_split", name, split_blocks_change)
        elif split_blocks_change < 0:
            self.stats.decrease("inactive_split", name, -split_blocks_change)
        if split_bytes_change > 0:
            self.stats.increase("inactive_split_bytes", name, split_bytes_change)
        elif split_bytes_change < 0:
            self.stats.decrease("inactive_split_bytes", name, -split_bytes_change)
        self.stats.inactive(name, original_size, requested)

    def _try_merge_blocks(self, dst: Block, src: Block | None, pool: BlockPool) -> int:
        if src is None or src.allocated or src.stream_uses or src in self._pending_frees:
            return 0
        pool.remove(src)
        if dst.prev is src:
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    def _release_available_cached_blocks(self, pool: BlockPool, stream: int, size: int) -> bool:
        """Free oversize cached blocks, the smallest that suffices or else the largest first."""
        max_split = self.config.max_split_size
        if max_split == SIZE_MAX:
            return False
        target = max(size, max_split)
        index = pool.lower_bound(stream, target)
        block = pool.at(index)
        if block is not None and block.stream == stream:
            self._release_block(block)
            return True
        released = 0
        index -= 1
        while released < target and index >= 0:
            block = pool.at(index)
            if block is None or block.size < max_split or block.stream != stream:
                break
            released += block.size
            self._release_block(block)
            index -= 1
        return released >= target

    def _release_block(self, block: Block) -> None:
        if self.on_event is not None:
            self.on_event("segment_free", block.ptr, block.size, block.stream, {})
        self.stats.num_device_free += 1
        self.total_allocated_memory -= block.size
        name = block.pool.pool_name
        self.stats.decrease("segment", name, 1)
        self.stats.decrease("reserved_bytes", name, block.size)
        if block.size >= self.config.max_split_size:
            self.stats.oversize_segments.decrease(1)
        block.pool.remove(block)
        self._addresses.give(block.ptr, block.size)

    def _synchronize_and_free_events(self) -> None:
        self.stats.num_sync_all_streams += 1
        self._drain_pending()

    def _drain_pending(self) -> None:
        pending, self._pending_frees = self._pending_frees, []
        for block in pending:
            block.stream_uses.clear()
            self._free_block(block)

    def segments(self) -> list[list[Block]]:
        """Every live segment as its chain of blocks, by address (for snapshots and tests)."""
        # (a freed block awaiting other streams' work is still among the active ones, and in _pending_frees)
        heads = {id(b): b for b in [*self.active_blocks, *self.small_blocks, *self.large_blocks, *self._pending_frees]
                 if b.prev is None}
        chains = []
        for head in sorted(heads.values(), key=lambda b: b.ptr):
            chain, block = [], head
            while block is not None:
                chain.append(block)
                block = block.next
            chains.append(chain)
        return chains

    def segment_table(self) -> list[list[tuple[int, int, int, str, int, bool]]]:
        """segments() as (address, size, requested_size, state, stream, is_small) per block, the state as PyTorch's
        snapshots name it (active_allocated, active_awaiting_free, inactive)."""
        pending = {id(b) for b in self._pending_frees}
        return [[(b.ptr, b.size, b.requested_size,
                  "active_allocated" if b.allocated else "active_awaiting_free" if id(b) in pending else "inactive",
                  b.stream, b.pool.is_small) for b in chain] for chain in self.segments()]
