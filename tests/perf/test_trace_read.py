"""The streaming trace reader: the same events whatever the chunk size or compression, and a clear error for each
way a file can be broken (truncated, not a Kineto trace, a bad gzip stream, malformed JSON)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from fakegpu.errors import TraceError
from fakegpu.perf.trace_collect import collect
from fakegpu.perf.trace_read import TraceFile
from tests.perf.kineto import Trace, training_steps

REPO = Path(__file__).resolve().parents[2]
CPU_TRACE = REPO / "tests" / "data" / "traces" / "mlp-cpu.json.gz"


def _trace(tmp_path: Path, name: str = "t.json") -> Path:
    t = Trace()
    training_steps(t, 3)
    return t.write(tmp_path / name)


def _events(path: Path, chunk: int = 1 << 20) -> tuple[list, dict]:
    f = TraceFile(path, chunk)
    return list(f.events()), f.header


@pytest.mark.parametrize("chunk", [1, 7, 64, 4096])
def test_any_chunk_size_reads_the_same_events_as_json_load(tmp_path, chunk):
    path = _trace(tmp_path)
    doc = json.loads(path.read_text())
    events, header = _events(path, chunk)
    assert events == doc["traceEvents"]
    assert header == {k: v for k, v in doc.items() if k != "traceEvents"}


def test_gzip_is_read_by_its_content_not_its_name(tmp_path):
    plain = _trace(tmp_path, "a.json")
    gz = _trace(tmp_path, "b.json.gz")
    disguised = tmp_path / "c.json"
    disguised.write_bytes(gz.read_bytes())
    assert _events(plain)[0] == _events(gz)[0] == _events(disguised)[0]
    assert collect(str(gz)).compressed and not collect(str(plain)).compressed


def test_header_keys_after_the_events_and_a_trailing_comma_are_read(tmp_path):
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "cat": "cpu_op"},],\n'
                 ' "distributedInfo": {"rank": 3, "world_size": 4}, "schemaVersion": 1}')
    t = collect(str(p))
    assert t.rank == 3 and t.world_size == 4 and t.events == 1


def test_a_truncated_trace_says_it_is_truncated_and_where(tmp_path):
    path = _trace(tmp_path)
    text = path.read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    with pytest.raises(TraceError, match=r"truncated: it ends inside event [\d,]+ at character [\d,]+, after"):
        collect(str(cut))
    cut.write_text(text[: text.rindex("]")])  # every event complete, the array never closed
    with pytest.raises(TraceError, match="truncated"):
        collect(str(cut))


def test_a_truncated_gzip_stream_is_named(tmp_path):
    gz = _trace(tmp_path, "t.json.gz")
    data = gz.read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="gzip stream ends early"):
        collect(str(cut))


def test_a_corrupt_gzip_stream_is_named(tmp_path):
    gz = _trace(tmp_path, "t.json.gz")
    data = bytearray(gz.read_bytes())
    for i in range(40, 200):
        data[i] ^= 0x5A
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(bytes(data))
    with pytest.raises(TraceError, match="cannot read the gzip stream"):
        collect(str(bad))


@pytest.mark.parametrize("text,message", [
    ("", "the file is empty"),
    ("[1, 2]", "not a Kineto trace: a trace is a JSON object"),
    ('{"schemaVersion": 1, "deviceProperties": []}', 'not a Kineto trace: no "traceEvents" array'),
    ("\x00\xff\xfe garbage", "not UTF-8|not a Kineto trace"),
    ('{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', "expected ',' or ']' after an event"),
    ('{"traceEvents": [{"ph": "X", "ts": 1e}, ' + '{"ph": "i"}, ' * 50 + '{}]}', "malformed JSON in event 1"),
    ('{"traceEvents": []} trailing', "text after the end of the trace object"),
])
def test_what_is_not_a_trace_is_refused_with_a_reason(tmp_path, text, message):
    p = tmp_path / "x.json"
    p.write_bytes(text.encode("latin-1"))
    with pytest.raises(TraceError, match=message):
        collect(str(p))


def test_a_missing_file_is_a_trace_error(tmp_path):
    with pytest.raises(TraceError, match="cannot open"):
        collect(str(tmp_path / "nope.json"))


def test_every_event_is_counted_used_ignored_or_unusable(tmp_path):
    t = Trace()
    training_steps(t, 2)
    t.events += [
        {"ph": "C", "name": "counter", "pid": 1, "ts": 1.0, "args": {"v": 1}},
        {"ph": "X", "name": "no-dur", "cat": "cpu_op", "ts": 1.0},
        {"ph": "X", "name": "nan-ts", "cat": "kernel", "ts": float("nan"), "dur": 1.0, "args": {"stream": 7}},
        {"ph": "X", "name": "inf-dur", "cat": "kernel", "ts": 1.0, "dur": float("inf"), "args": {"stream": 7}},
        {"ph": "i", "name": "[memory]", "ts": 2.0, "args": {"Bytes": 1}},
        "not an object",
    ]
    r = collect(str(t.write(tmp_path / "t.json")))
    total = sum(r.used.values()) + sum(r.ignored.values()) + sum(r.unusable.values())
    assert total == r.events == len(t.events)
    assert r.ignored == {"ph=C cat=-": 1}
    assert set(r.unusable) == {"not a JSON object", "[memory] event without Total Allocated",
                               "complete event without a number ts, dur >= 0 and a string name"}
    assert r.unusable["complete event without a number ts, dur >= 0 and a string name"] == 3  # NaN, inf: no numbers
    assert all(math.isfinite(s) for s in (r.first_ts, r.last_ts))


def test_a_real_cpu_profile_is_read_with_its_memory_events_and_annotations():
    r = collect(str(CPU_TRACE))
    assert r.compressed and r.events > 1000
    host = r.memory["host"]
    assert len(host.ts) > 100 and max(host.allocated) > 0  # profile_memory=True: the CPU allocator's [memory] events
    assert {"forward", "backward", "optimizer"} <= set(r.annotations)
    assert {n for n, _, _ in r.steps} == {"ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"}
    assert not r.unusable
    with gzip.open(CPU_TRACE, "rt") as f:
        assert r.events == len(json.load(f)["traceEvents"])


@pytest.mark.slow
def test_reading_holds_a_chunk_not_the_file(tmp_path):
    """A trace several times the reader's chunk is read with memory that grows with its GPU activities (a few
    words each, about 150 bytes with its launch's entry) and one chunk, not with the file (about 1 KB per kernel
    as PyTorch writes it): the peak stays under a third of the file's size
    here (0.22 measured)."""
    import tracemalloc

    t = Trace()
    training_steps(t, 1000)
    path = t.write(tmp_path / "big.json")
    size = path.stat().st_size
    assert size > 60 * (1 << 18)
    tracemalloc.start()
    try:
        collect(str(path), chunk_bytes=1 << 18)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < size / 3, (peak, size)
