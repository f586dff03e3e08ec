"""The caching-allocator model against values derived by hand from PyTorch's rules (no torch needed).

Every expected number below is worked out in the comment next to it from the constants: 512-byte rounding,
2 MiB small segments, 20 MiB segments for 1-10 MiB requests, 2 MiB rounding above, split thresholds of
512 bytes (small) and > 1 MiB (large), max_split_size / max_non_split_rounding for oversize blocks.
"""

from __future__ import annotations

import pytest

from fakegpu.fakecuda.allocator import DeviceAllocator, allocation_size, round_size
from fakegpu.fakecuda.config import AllocatorConfig, parse_alloc_conf
from fakegpu.fakecuda.errors import AllocatorConfigError, ModelOutOfMemory
from fakegpu.fakecuda.oom import format_size

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def make(total: int = 80 * GiB, conf: str = "", context: int = 0) -> DeviceAllocator:
    return DeviceAllocator(0, total, parse_alloc_conf(conf), non_pytorch_bytes=context)


def stat(a: DeviceAllocator, key: str) -> int:
    return a.stats.flat()[key]


@pytest.mark.parametrize(
    ("request_bytes", "rounded", "segment"),
    [
        (1, 512, 2 * MiB),                     # below the minimum block
        (512, 512, 2 * MiB),
        (513, 1024, 2 * MiB),                  # next 512-byte multiple
        (1 * MiB, 1 * MiB, 2 * MiB),           # largest small request
        (1 * MiB + 1, 1 * MiB + 512, 20 * MiB),  # large pool, under 10 MiB: a 20 MiB segment
        (10 * MiB - 512, 10 * MiB - 512, 20 * MiB),
        (10 * MiB, 10 * MiB, 10 * MiB),        # from 10 MiB: rounded to 2 MiB
        (11 * MiB + 1, 11 * MiB + 512, 12 * MiB),
    ],
)
def test_rounding_and_segment_size(request_bytes, rounded, segment):
    assert round_size(request_bytes, AllocatorConfig()) == rounded
    assert allocation_size(rounded) == segment


def test_small_allocation_splits_a_2mib_segment_and_coalesces_on_free():
    a = make()
    block = a.malloc(1)
    assert a.allocated_bytes == 512 and a.reserved_bytes == 2 * MiB
    assert stat(a, "requested_bytes.all.current") == 1
    assert stat(a, "allocated_bytes.small_pool.current") == 512
    assert stat(a, "allocated_bytes.large_pool.current") == 0
    # the rest of the segment is one inactive split block
    assert stat(a, "inactive_split.all.current") == 1
    assert stat(a, "inactive_split_bytes.all.current") == 2 * MiB - 512
    a.free(block)
    # merged back into one unsplit 2 MiB block: cached, not split, still reserved
    assert a.allocated_bytes == 0 and a.reserved_bytes == 2 * MiB
    assert stat(a, "inactive_split.all.current") == 0
    assert stat(a, "inactive_split_bytes.all.current") == 0
    assert [len(s) for s in a.segments()] == [1]
    a.empty_cache()
    assert a.reserved_bytes == 0
    assert stat(a, "num_device_alloc") == 1 and stat(a, "num_device_free") == 1
    assert stat(a, "num_sync_all_streams") == 1
    assert stat(a, "reserved_bytes.all.peak") == 2 * MiB
    assert stat(a, "allocation.all.allocated") == 1 and stat(a, "allocation.all.freed") == 1


def test_medium_requests_share_a_20mib_segment_and_small_remainders_are_not_split():
    a = make()
    first = a.malloc(5 * MiB)    # new 20 MiB segment, 15 MiB remains (> 1 MiB: split)
    second = a.malloc(5 * MiB)   # best fit: the 15 MiB remainder, 10 MiB remains (split)
    assert a.reserved_bytes == 20 * MiB and a.allocated_bytes == 10 * MiB
    third = a.malloc(9 * MiB + MiB // 2)  # the 10 MiB remainder; 0.5 MiB left is not > 1 MiB: no split
    assert third.size == 10 * MiB
    # memory_allocated counts the whole block, more than was requested
    assert a.allocated_bytes == 20 * MiB
    assert stat(a, "requested_bytes.all.current") == 19 * MiB + MiB // 2
    assert stat(a, "segment.large_pool.current") == 1 and stat(a, "segment.small_pool.current") == 0
    assert stat(a, "inactive_split.all.current") == 0
    for b in (second, first, third):
        a.free(b)
    assert a.allocated_bytes == 0
    assert [[blk.size for blk in seg] for seg in a.segments()] == [[20 * MiB]]


def test_large_request_rounds_to_2mib_and_best_fit_picks_the_smallest_cached_block():
    a = make()
    big = a.malloc(11 * MiB + 1)      # 11 MiB + 512 rounded; 12 MiB segment; 1 MiB - 512 left: no split
    assert big.size == 12 * MiB and a.allocated_bytes == 12 * MiB
    x = a.malloc(30 * MiB)
    y = a.malloc(50 * MiB)
    a.free(x)
    a.free(y)
    z = a.malloc(25 * MiB)            # best fit is the 30 MiB block; 5 MiB left (> 1 MiB) is split off
    assert z.size == 25 * MiB
    assert a.reserved_bytes == (12 + 30 + 50) * MiB
    assert stat(a, "inactive_split.large_pool.current") == 1
    assert stat(a, "inactive_split_bytes.large_pool.current") == 5 * MiB
    a.empty_cache()                   # the 50 MiB block is released; the split 30 MiB segment is not
    assert a.reserved_bytes == (12 + 30) * MiB


def test_released_segment_addresses_are_reused_lowest_first():
    # on a real H200 (tests/data/gpu/h200/mem_workloads.json, activation_checkpointing) a segment made after an
    # empty_cache lies where a released one was, so the caching allocator's lowest-address tie-break prefers it
    a = make()
    x, y, z = a.malloc(16 * MiB), a.malloc(16 * MiB), a.malloc(16 * MiB)
    low, mid, high = x.ptr, y.ptr, z.ptr
    assert low < mid < high
    a.free(x)
    a.free(y)
    a.empty_cache()                   # the two lower ranges merge into one free range
    w = a.malloc(20 * MiB)            # fits the merged hole, at its start
    assert w.ptr == low
    v = a.malloc(12 * MiB)            # the rest of the hole (12 MiB) before fresh space above z
    assert v.ptr == low + 20 * MiB < high
    a.free(w)
    a.free(v)
    u = a.malloc(16 * MiB)            # both blocks are cached: no new segment, best fit is the 20 MiB one
    assert u.ptr == low and a.reserved_bytes == (20 + 12 + 16) * MiB


def test_coalescing_three_neighbours():
    a = make()
    b1, b2, b3 = a.malloc(1000), a.malloc(1000), a.malloc(1000)   # 1024 each from one 2 MiB segment
    assert stat(a, "inactive_split.all.current") == 1
    assert stat(a, "inactive_split_bytes.all.current") == 2 * MiB - 3 * 1024
    a.free(b2)                        # neighbours allocated: a second inactive split block
    assert stat(a, "inactive_split.all.current") == 2
    assert stat(a, "inactive_split_bytes.all.current") == 2 * MiB - 2 * 1024
    a.free(b1)                        # merges with b2's block
    assert stat(a, "inactive_split.all.current") == 2
    assert stat(a, "inactive_split_bytes.all.current") == 2 * MiB - 1024
    a.free(b3)                        # merges both sides: the whole segment, unsplit
    assert stat(a, "inactive_split.all.current") == 0
    assert [[blk.size for blk in seg] for seg in a.segments()] == [[2 * MiB]]
    assert stat(a, "active.all.current") == 0 and stat(a, "active_bytes.all.peak") == 3 * 1024


def test_blocks_are_not_shared_between_streams():
    a = make()
    a.free(a.malloc(4096, stream=0))
    a.malloc(4096, stream=1)          # the cached block belongs to stream 0: a new segment
    assert a.reserved_bytes == 4 * MiB
    a.malloc(4096, stream=0)          # stream 0 reuses its own cached segment
    assert a.reserved_bytes == 4 * MiB


def test_record_stream_defers_reuse_until_the_next_allocation():
    a = make()
    blk = a.malloc(4096, stream=0)
    a.record_stream(blk, 7)
    a.free(blk)
    assert a.allocated_bytes == 0
    assert stat(a, "active_bytes.all.current") == 4096  # still in use by stream 7's work
    a.malloc(512, stream=0)           # process_events finds stream 7's work done and reclaims the block
    assert stat(a, "active_bytes.all.current") == 512
    assert a.reserved_bytes == 2 * MiB


def test_oversize_blocks_follow_max_split_size_and_non_split_rounding():
    a = make(conf="max_split_size_mb:40")
    assert stat(a, "max_split_size") == 40 * MiB
    big = a.malloc(50 * MiB)
    assert stat(a, "oversize_allocations.current") == 1 and stat(a, "oversize_segments.current") == 1
    a.free(big)
    small = a.malloc(30 * MiB)        # < max_split: an oversize block never serves it -> new segment
    assert small.size == 30 * MiB and a.reserved_bytes == 80 * MiB
    again = a.malloc(45 * MiB)        # >= max_split and 50 < 45 + 20: the cached 50 MiB block, unsplit
    assert again.size == 50 * MiB and a.reserved_bytes == 80 * MiB
    assert a.allocated_bytes == 80 * MiB
    a.free(again)
    a.free(a.malloc(100 * MiB))       # cache a 100 MiB oversize block too
    c = a.malloc(70 * MiB)            # 100 >= 70 + 20 is too far to round; 50 too small -> new segment
    assert c.size == 70 * MiB and a.reserved_bytes == (30 + 50 + 100 + 70) * MiB


def test_oversize_release_before_retry():
    a = make(total=180 * MiB, conf="max_split_size_mb:40")
    a.free(a.malloc(60 * MiB))
    a.free(a.malloc(100 * MiB))       # 160 MiB cached, all oversize; 20 MiB free on the device
    # 30 MiB (< max_split) may not take an oversize block; cudaMalloc(30 MiB) fails; release_available frees
    # the smallest oversize block >= max(30, 40) MiB, i.e. the 60 MiB one, and the retry succeeds without a
    # full flush (no retry counted, no stream sync).
    e = a.malloc(30 * MiB)
    assert e.size == 30 * MiB
    assert a.reserved_bytes == 130 * MiB
    assert stat(a, "num_alloc_retries") == 0 and stat(a, "num_sync_all_streams") == 0
    assert stat(a, "oversize_segments.current") == 1 and stat(a, "num_device_free") == 1


def test_free_cache_and_retry_then_oom_with_pytorchs_message():
    a = make(total=100 * MiB)
    a.free(a.malloc(40 * MiB))        # cached 40 MiB segment
    b = a.malloc(70 * MiB)            # 60 free < 70: release every unsplit cached block, retry, succeed
    assert b.size == 70 * MiB and a.reserved_bytes == 70 * MiB
    assert stat(a, "num_alloc_retries") == 1 and stat(a, "num_device_free") == 1
    with pytest.raises(ModelOutOfMemory) as info:
        a.malloc(40 * MiB)            # 30 MiB free, nothing to release
    assert stat(a, "num_ooms") == 1 and stat(a, "num_alloc_retries") == 2
    assert str(info.value) == (
        "CUDA out of memory. Tried to allocate 40.00 MiB. GPU 0 has a total capacity of 100.00 MiB of which "
        "30.00 MiB is free. Including non-PyTorch memory, this process has 70.00 MiB memory in use. Of the "
        "allocated memory 70.00 MiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. "
        "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "to avoid fragmentation.  See documentation for Memory Management  "
        "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
    )


def test_context_memory_counts_against_capacity_and_the_fraction_limits_segments():
    a = make(total=100 * MiB, context=50 * MiB)
    assert a.device_free() == 50 * MiB
    with pytest.raises(ModelOutOfMemory, match=r"this process has 50\.00 MiB memory in use"):
        a.malloc(60 * MiB)
    f = make(total=100 * MiB)
    f.set_memory_fraction(0.5)
    f.malloc(40 * MiB)
    with pytest.raises(ModelOutOfMemory, match=r"50\.00 MiB allowed; Of the allocated memory 40\.00 MiB"):
        f.malloc(20 * MiB)            # 40 + 20 > 50 allowed, though 60 MiB are free on the device


def test_peak_and_accumulated_resets():
    a = make()
    blk = a.malloc(3 * MiB)
    a.free(blk)
    assert stat(a, "allocated_bytes.all.peak") == 3 * MiB
    a.stats.reset_peak()
    assert stat(a, "allocated_bytes.all.peak") == 0
    assert stat(a, "reserved_bytes.all.peak") == 20 * MiB  # reserved is still current
    a.stats.reset_accumulated()
    assert stat(a, "allocated_bytes.all.allocated") == 0 and stat(a, "num_device_alloc") == 0


def test_roundup_power2_divisions():
    conf = parse_alloc_conf("roundup_power2_divisions:4")
    assert round_size(5 * MiB + 1, conf) == 6 * MiB      # quarters of [4, 8) MiB
    assert round_size(1200, conf) == 1536               # <= 512 * 4: plain 512-byte rounding
    assert round_size(8 * MiB, conf) == 8 * MiB          # powers of two stay
    table = parse_alloc_conf("roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]")
    assert [table.divisions_for(n * MiB) for n in (32, 64, 128, 256, 512, 1024, 2048)] == [8, 8, 2, 4, 2, 4, 1]


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ("max_split_size_mb:10", "too small, must be >= 20"),
        ("roundup_power2_divisions:3", "power of 2"),
        ("bogus_option:1", "Unrecognized CachingAllocator option: bogus_option"),
        ("backend:cudaMallocAsync", "not modeled"),
        ("max_split_size_mb", "expected :"),
    ],
)
def test_bad_alloc_conf_is_rejected(conf, message):
    with pytest.raises(AllocatorConfigError, match=message):
        parse_alloc_conf(conf)


def test_format_size_matches_pytorch():
    assert [format_size(n) for n in (0, 1024, 1025, MiB, MiB + 1, GiB, 80 * GiB)] == [
        "0 bytes", "1024 bytes", "1.00 KiB", "1024.00 KiB", "1.00 MiB", "1024.00 MiB", "80.00 GiB",
    ]
    assert KiB == 1024
