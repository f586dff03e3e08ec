"""torch.cuda.memory's snapshot and history under fakecuda (snapshot.py): the model's segments and actions in the
dictionaries torch's tools read (torch.cuda._memory_viz is the checker here: it is what pytorch.org/memory_viz
and `python -m torch.cuda._memory_viz` run on a dumped snapshot)."""

from __future__ import annotations

import pickle

import pytest

pytestmark = pytest.mark.torch
MiB = 1 << 20


def _actions(trace: list[dict]) -> list[tuple[str, int]]:
    return [(e["action"], e["size"]) for e in trace if e["action"] != "snapshot"]


def test_snapshot_segments_are_the_models_and_agree_with_memory_stats(fakecuda):
    torch = pytest.importorskip("torch")
    from torch.cuda import _memory_viz

    fakecuda("a100:2")
    assert torch.cuda.memory_snapshot() == []  # nothing allocated yet: no segment
    keep = [torch.empty(1 << 20, device="cuda"), torch.empty(100, device="cuda"), torch.empty(3 * MiB, device="cuda:1")]
    dropped = torch.empty(256, device="cuda")
    side = torch.cuda.Stream()
    dropped.record_stream(side)
    del dropped  # used on another stream: its block waits for that work
    snap = torch.cuda.memory._snapshot()
    for device in (0, 1):
        stats = torch.cuda.memory_stats(device)
        segments = [s for s in snap["segments"] if s["device"] == device]
        assert sum(s["total_size"] for s in segments) == stats["reserved_bytes.all.current"]
        assert sum(s["allocated_size"] for s in segments) == stats["allocated_bytes.all.current"]
        assert sum(s["requested_size"] for s in segments) == stats["requested_bytes.all.current"]
        assert sum(s["active_size"] for s in segments) == stats["active_bytes.all.current"]
        for s in segments:
            assert sum(b["size"] for b in s["blocks"]) == s["total_size"]
            assert s["segment_type"] == ("small" if s["total_size"] == 2 * MiB else "large")
    states = [b["state"] for s in snap["segments"] for b in s["blocks"]]
    assert states.count("active_allocated") == 3 and states.count("active_awaiting_free") == 1
    assert "inactive" in states
    assert "segments: 3" in _memory_viz.segsum(snap)  # its own size checks pass
    assert torch.cuda.memory_snapshot() == [s for s in snap["segments"]]
    assert keep


def test_history_records_the_allocators_actions_with_the_programs_frames(fakecuda, tmp_path):
    torch = pytest.importorskip("torch")
    from torch.cuda import _memory_viz

    fakecuda("a100")
    torch.cuda.memory._record_memory_history(max_entries=1000)
    x = torch.empty(1 << 20, device="cuda")  # 4 MiB: a 20 MiB segment of the large pool
    del x
    torch.cuda.empty_cache()
    snap = torch.cuda.memory._snapshot()
    trace = snap["device_traces"][0]
    assert _actions(trace) == [("segment_alloc", 20 * MiB), ("alloc", 4 * MiB), ("free_requested", 4 * MiB),
                               ("free_completed", 4 * MiB), ("segment_free", 20 * MiB)]
    assert len({e["addr"] for e in trace if e["action"] != "snapshot"}) == 1
    alloc = next(e for e in trace if e["action"] == "alloc")
    assert alloc["frames"][0]["name"] == "test_history_records_the_allocators_actions_with_the_programs_frames"
    assert not any("fakegpu/fakecuda" in f["filename"] for e in trace for f in e["frames"])
    path = tmp_path / "snapshot.pickle"
    torch.cuda.memory._dump_snapshot(str(path))
    loaded = pickle.loads(path.read_bytes())
    assert _actions(loaded["device_traces"][0])[:5] == _actions(trace)
    assert "<html" in _memory_viz.trace_plot(loaded).lower()
    torch.cuda.memory._record_memory_history(enabled=None)  # off: the trace goes, as torch's does
    after = torch.empty(10, device="cuda")
    assert _actions(torch.cuda.memory._snapshot()["device_traces"][0]) == [] and after.is_cuda


def test_the_trace_gives_requested_sizes_for_blocks_and_rounded_ones_for_segments(fakecuda):
    """As CUDACachingAllocator records them: alloc, free_requested and free_completed carry the request (the
    block's requested_size), segment actions the segment's size."""
    torch = pytest.importorskip("torch")
    fakecuda("a100")
    torch.cuda.memory._record_memory_history(max_entries=1000)
    x = torch.empty(100, device="cuda")  # 400 bytes asked, a 512-byte block
    del x
    torch.cuda.empty_cache()
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    assert _actions(trace) == [("segment_alloc", 2 * MiB), ("alloc", 400), ("free_requested", 400),
                               ("free_completed", 400), ("segment_free", 2 * MiB)]
    torch.cuda.memory._record_memory_history(enabled=None)


def test_history_options_state_context_limits_and_oom(fakecuda):
    torch = pytest.importorskip("torch")
    fakecuda("t4")
    torch.cuda.memory._record_memory_history(enabled="state")  # where live blocks came from, no trace
    kept = torch.empty(1000, device="cuda")
    snap = torch.cuda.memory._snapshot()
    assert _actions(snap["device_traces"][0]) == []
    block = next(b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
    assert block["frames"][0]["name"] == "test_history_options_state_context_limits_and_oom"
    torch.cuda.memory._record_memory_history(context=None, max_entries=3)  # no frames, the last three
    for _ in range(4):
        torch.empty(1000, device="cuda")
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    assert len(trace) == 3 and all(e["frames"] == [] for e in trace)
    import inspect

    skips = "skip_actions" in inspect.signature(torch.cuda.memory._record_memory_history).parameters  # 2.15, not 2.10
    torch.cuda.memory._record_memory_history(clear_history=True, **({"skip_actions": ["free_requested"]} if skips
                                                                       else {}))
    with pytest.raises(torch.cuda.OutOfMemoryError):
        torch.empty(1 << 34, device="cuda")  # 64 GiB on a 15 GiB T4
    oom = [e for e in torch.cuda.memory._snapshot()["device_traces"][0] if e["action"] == "oom"]
    assert len(oom) == 1 and oom[0]["size"] == 1 << 36 and 0 < oom[0]["device_free"] < 16 << 30
    assert "addr" not in oom[0]  # (torch's OOM entry: device_free in addr's place)
    from torch.cuda import _memory_viz

    assert "raise OutOfMemoryError # 64.0GiB requested" in _memory_viz.trace(torch.cuda.memory._snapshot())
    del kept
    assert ("free_requested" in {e["action"] for e in torch.cuda.memory._snapshot()["device_traces"][0]}) != skips
    bad_calls = [(dict(enabled="some"), "enabled='some' is not one of None, 'state', 'all'"),
                 (dict(context="alloc+"), "context='alloc\\+' is not one of"),
                 (dict(stacks="cpp"), "stacks='cpp' is not one of 'python', 'all'"),
                 (dict(max_entries=0), "max_entries must be a positive int")]
    if skips:
        bad_calls.append((dict(skip_actions=["allocs"]), "unknown skip_actions \\['allocs'\\]"))
    for bad, match in bad_calls:
        with pytest.raises(RuntimeError, match=match):
            torch.cuda.memory._record_memory_history(**bad)


def test_deactivate_gives_torch_its_snapshot_functions_back(fakecuda):
    torch = pytest.importorskip("torch")
    import fakegpu.fakecuda as fc

    names = ("_cuda_memorySnapshot", "_cuda_record_memory_history")  # (absent from a CPU-only build of torch)
    before = [getattr(torch._C, n, None) for n in names]
    fakecuda("a100")
    assert torch.cuda.memory._snapshot()["segments"] == [] and torch._C._cuda_memorySnapshot is not before[0]
    fc.deactivate()
    assert [getattr(torch._C, n, None) for n in names] == before
