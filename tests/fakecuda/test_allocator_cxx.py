"""The C++ allocator model (allocator.cpp, allocator_cxx.py) against the Python one (allocator.py), the reference.

Random workloads (a seeded mix of small, medium and oversize requests on three streams, frees in random order,
record_stream, empty_cache, context growth, other processes' memory, peak and accumulated resets) run through both
models side by side under the allocator settings that change decisions (max_split_size, roundup_power2_divisions,
max_non_split_rounding, a memory fraction, a small device that runs out). After every step the two must agree on
the address handed out or the OOM message, and at checkpoints on every statistic, segment and recorded event."""

from __future__ import annotations

import random

import pytest

from fakegpu.fakecuda.allocator import DeviceAllocator
from fakegpu.fakecuda.config import parse_alloc_conf
from fakegpu.fakecuda.errors import ModelOutOfMemory

pytestmark = pytest.mark.torch
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@pytest.fixture(scope="module")
def cxx_class():
    """The C++ model's class for this torch: `make test` builds the extension first; built here otherwise."""
    pytest.importorskip("torch")
    from fakegpu.fakecuda import allocator_cxx, extension

    extension.build()
    return allocator_cxx.allocator_class(extension.load())


def _size(rng: random.Random) -> int:
    kind = rng.random()
    if kind < 0.5:
        return rng.randint(1, 1 * MiB)  # small pool
    if kind < 0.8:
        return rng.randint(1 * MiB + 1, 10 * MiB)  # large pool, 20 MiB segments
    if kind < 0.97:
        return rng.randint(10 * MiB, 300 * MiB)  # large, own segments; oversize under max_split_size
    return rng.choice([0, 512, 1 * MiB, 2 * MiB, 10 * MiB, 20 * MiB])  # the boundaries


def _pair(cls, total: int, conf: str, context: int) -> tuple[DeviceAllocator, object, list, list]:
    python = DeviceAllocator(1, total, parse_alloc_conf(conf), non_pytorch_bytes=context)
    cxx = cls(1, total, parse_alloc_conf(conf), non_pytorch_bytes=context)
    seen: tuple[list, list] = ([], [])
    for model, events in zip((python, cxx), seen, strict=True):
        model.on_event = lambda *event, events=events: events.append(event)
    return python, cxx, *seen


def _agree(python: DeviceAllocator, cxx, events: tuple[list, list], where: str) -> None:
    assert cxx.stats.flat() == python.stats.flat(), where
    table = python.segment_table()
    assert cxx.segment_table() == table, where
    # each segment once, and they add up to what is reserved (a segment whose first block awaits another stream's
    # work was listed twice by the Python model until this test compared the two)
    assert len({segment[0][0] for segment in table}) == len(table), where
    assert sum(b[1] for segment in table for b in segment) == python.total_allocated_memory, where
    assert events[1] == events[0], where
    assert (cxx.total_allocated_memory, cxx.device_free()) == (python.total_allocated_memory, python.device_free())


CONFIGS = [
    (80 * GiB, ""),
    (80 * GiB, "max_split_size_mb:64"),
    (80 * GiB, "max_split_size_mb:40,max_non_split_rounding_mb:24"),
    (80 * GiB, "roundup_power2_divisions:4"),
    (80 * GiB, "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"),
    # division counts whose 512-fold overflows 64 bits, and one past 64 bits: never round, as in Python
    (80 * GiB, "roundup_power2_divisions:[1:36028797018963968,256:36893488147419103232,>:4]"),
    (2 * GiB, ""),  # runs out: OOMs, frees of cached blocks before them, retries
    (2 * GiB, "max_split_size_mb:64"),  # releases oversize cached blocks first
    (16 * GiB, "per_process_memory_fraction:0.1"),
]


@pytest.mark.parametrize(("total", "conf"), CONFIGS, ids=[f"{t >> 30}g-{c or 'default'}" for t, c in CONFIGS])
@pytest.mark.parametrize("seed", [1, 2])
def test_both_models_make_the_same_decisions_on_random_workloads(cxx_class, total, conf, seed):
    rng = random.Random(f"{seed}-{conf}-{total}")
    python, cxx, *events = _pair(cxx_class, total, conf, context=300 * MiB)
    others: list[tuple[int | None, int]] = []
    python.others = cxx.others = lambda: list(others)
    live: list[tuple[object, int]] = []  # (Python block, C++ handle)
    ooms = 0
    for step in range(3000):
        where = f"step {step}"
        action = rng.random()
        if action < 0.55 or not live:
            size, stream = _size(rng), rng.choice([0, 0, 0, 7, 9])
            try:
                block = python.malloc(size, stream)
            except ModelOutOfMemory as expected:
                with pytest.raises(ModelOutOfMemory) as got:
                    cxx.malloc(size, stream)
                assert (got.value.message, got.value.device) == (expected.message, expected.device), where
                ooms += 1
            else:
                handle = cxx.malloc(size, stream)
                assert handle == block.ptr, where
                live.append((block, handle))
        elif action < 0.93:
            block, handle = live.pop(rng.randrange(len(live)))
            python.free(block)
            cxx.free(handle)
        elif action < 0.97:
            block, handle = rng.choice(live)
            stream = rng.choice([0, 7, 9, 11])
            python.record_stream(block, stream)
            cxx.record_stream(handle, stream)
        elif action < 0.98:
            python.empty_cache()
            cxx.empty_cache()
        elif action < 0.99:
            grow = rng.choice([2, 8, 64]) * MiB  # the CUDA context grows (cuBLAS, cuDNN loaded)
            python.non_pytorch_bytes += grow
            cxx.non_pytorch_bytes += grow
        elif action < 0.995:
            others[:] = [(4242, rng.randint(0, total // 4))] if rng.random() < 0.7 else []
        else:
            for model in (python, cxx):
                model.stats.reset_peak() if step % 2 else model.stats.reset_accumulated()
        if step % 100 == 0:
            _agree(python, cxx, events, where)
    _agree(python, cxx, events, "end")
    if total <= 2 * GiB:
        assert ooms > 0 and python.stats.num_alloc_retries > 0  # the small device did run out
    assert {e[0] for e in events[0]} >= {"alloc", "free_requested", "free_completed", "segment_alloc"}
    while live:  # everything back: both empty after empty_cache
        block, handle = live.pop()
        python.free(block)
        cxx.free(handle)
    python.empty_cache()
    cxx.empty_cache()
    _agree(python, cxx, events, "drained")
    assert cxx.segment_table() == [] and cxx.stats.flat()["reserved_bytes.all.current"] == 0


def test_the_cxx_model_refuses_a_double_free_and_raises_the_python_models_oom(cxx_class):
    cxx = cxx_class(0, 100 * MiB)
    python = DeviceAllocator(0, 100 * MiB)
    handle = cxx.malloc(70 * MiB)
    python.malloc(70 * MiB)
    with pytest.raises(ModelOutOfMemory) as got:
        cxx.malloc(40 * MiB)
    with pytest.raises(ModelOutOfMemory) as expected:
        python.malloc(40 * MiB)
    assert got.value.message == expected.value.message and "Tried to allocate 40.00 MiB" in got.value.message
    assert got.value.requested == 40 * MiB
    cxx.free(handle)
    with pytest.raises(AssertionError, match=r"double free of the block at 0x7f0000000000 on device 0"):
        cxx.free(handle)
    with pytest.raises(AssertionError, match="double free"):
        cxx.free(12345)  # never handed out
    with pytest.raises(ValueError, match="allocation size must be >= 0"):
        cxx.malloc(-1)


def test_a_python_model_in_use_is_not_replaced(cxx_class):
    from fakegpu.fakecuda import allocator_cxx

    fresh = DeviceAllocator(2, 40 * GiB, parse_alloc_conf("max_split_size_mb:64,per_process_memory_fraction:0.5"),
                            non_pytorch_bytes=500 * MiB)
    fresh.others = lambda: [(1, 1 * GiB)]
    new = allocator_cxx.replace(fresh, cxx_class)
    assert (new.device, new.device_total, new.non_pytorch_bytes) == (2, 40 * GiB, 500 * MiB)
    assert new.allowed_memory_maximum == 20 * GiB and new.config.max_split_size == 64 * MiB
    assert new.device_free() == fresh.device_free() == 40 * GiB - 500 * MiB - 1 * GiB
    fresh.malloc(10)
    with pytest.raises(RuntimeError, match="device 2: the allocator model is in use"):
        allocator_cxx.replace(fresh, cxx_class)


def test_event_callbacks_run_once_the_operation_is_done(cxx_class):
    """on_event is Python and may let another thread in (or allocate itself): it runs after the malloc, free or
    release that caused it has finished, so it never meets a half-released pool."""
    cxx = cxx_class(0, 10 * GiB)
    for handle in [cxx.malloc(30 * MiB) for _ in range(3)]:
        cxx.free(handle)
    seen: list = []

    def on_event(action, address, size, stream, extra):
        seen.append((action, len(cxx.segment_table())))
        if len(seen) == 1:
            kept.append(cxx.malloc(1))  # re-entered: the three segments are gone already, a small one is made

    kept: list[int] = []
    cxx.on_event = on_event
    cxx.empty_cache()
    # all three segments were released before the first callback; the re-entrant malloc's own events come as it
    # returns, before the release's other two
    assert seen == [("segment_free", 0), ("segment_alloc", 1), ("alloc", 1), ("segment_free", 1),
                    ("segment_free", 1)]
    assert [[b[3] for b in segment] for segment in cxx.segment_table()] == [["active_allocated", "inactive"]]
    cxx.free(kept[0])


def test_an_operation_entered_through_others_keeps_both_operations_events(cxx_class):
    """others() is Python as well (the shared state's reader): another thread may allocate while it runs. Each
    operation hands over its own events; none is lost."""
    cxx = cxx_class(0, 10 * GiB)
    handle = cxx.malloc(1000)
    cxx.record_stream(handle, 7)
    cxx.free(handle)  # awaits stream 7: completed at the next malloc
    seen: list[tuple[str, int]] = []
    cxx.on_event = lambda action, address, size, stream, extra: seen.append((action, size))
    inner: list[int] = []

    def others():
        if not inner:
            inner.append(cxx.malloc(100))  # as another thread would, in the middle of the outer malloc
        return []

    cxx.others = others
    outer = cxx.malloc(30 * MiB)  # drains the pending free, then needs a segment: asks others()
    assert seen == [("alloc", 100), ("free_completed", 1000), ("segment_alloc", 30 * MiB), ("alloc", 30 * MiB)]
    cxx.free(outer)
    cxx.free(inner[0])
