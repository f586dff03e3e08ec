"""A simulated timeline written as the trace torch.profiler writes (Kineto's JSON), so the profiler's viewers,
Perfetto, HolisticTraceAnalysis and `fakegpu replay-trace` read it like a recorded one.

Layout as Kineto has it: host calls (cat cuda_runtime) on the process's pid and thread; kernels, copies and fills
(cat kernel, gpu_memcpy, gpu_memset) on pid = the device and tid = the stream, with args device, stream and
correlation (the launch's correlation id), and an ac2g flow from launch to work; ProfilerStep#N annotations (cat
user_annotation) between device-wide synchronisations; distributedInfo when the process had a rank. Times are
microseconds from the log's first instant, `baseTimeNanoseconds` the real time of that instant.

A program with steps is written from its first step on, as torch.profiler's schedule records the steps and not
the start-up before them (model set-up, CUDA's initialisation), which would otherwise dominate the trace.

And the summary `fakegpu run --timeline` prints: the predicted step time and MFU.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, TextIO

from fakegpu.perf.roofline import Board
from fakegpu.perf.timeline import LEGACY, Simulated
from fakegpu.profiles import Profile

DEFAULT_STREAM_ID = 7  # what CUPTI numbers the legacy default stream in PyTorch's traces


def _us(ns: float) -> float:
    return round(ns / 1e3, 3)


def _stream_ids(sim: Simulated) -> dict[tuple[int, int], int]:
    ids: dict[tuple[int, int], int] = {}
    for w in sim.gpu:
        key = (w.device, w.stream)
        if key not in ids:
            ids[key] = DEFAULT_STREAM_ID if w.stream == LEGACY else 13 + len([k for k in ids if k[1] != LEGACY])
    return ids


def _device_properties(profile: Profile, devices: list[int]) -> list[dict[str, Any]]:
    d = profile.data
    cc = d["compute_capability"]
    major, minor = (cc if isinstance(cc, list | tuple) else str(cc).split("."))[:2]
    return [{"id": i, "name": profile.name, "totalGlobalMem": int(d["memory"].get("cuda_total_bytes")
                                                                  or d["memory"].get("total_bytes", 0)),
             "computeMajor": int(major), "computeMinor": int(minor), "numSms": int(d.get("sm_count", 0) or 0)}
            for i in devices]


def kineto(sim: Simulated, profile: Profile) -> dict[str, Any]:
    """The trace document of one simulated process."""
    events: list[dict[str, Any]] = []
    pid = sim.pid
    ids = _stream_ids(sim)
    begin = sim.steps[0][0] if sim.steps else float("-inf")
    for h in sim.host:
        if h.start_ns < begin:
            continue
        e = {"ph": "X", "cat": "cuda_runtime", "name": h.name, "pid": pid, "tid": h.tid, "ts": _us(h.start_ns),
             "dur": _us(h.end_ns - h.start_ns), "args": {}}
        if h.correlation is not None:
            e["args"]["correlation"] = h.correlation
            events.append({"ph": "s", "id": h.correlation, "pid": pid, "tid": h.tid, "ts": _us(h.start_ns),
                           "cat": "ac2g", "name": "ac2g"})
        events.append(e)
    for w in sim.gpu:
        if w.start_ns < begin:
            continue
        sid = ids[(w.device, w.stream)]
        args = {"device": w.device, "stream": sid, "correlation": w.correlation, **w.args}
        events.append({"ph": "X", "cat": w.cat, "name": w.name, "pid": w.device, "tid": sid, "ts": _us(w.start_ns),
                       "dur": _us(w.end_ns - w.start_ns), "args": args})
        events.append({"ph": "f", "id": w.correlation, "pid": w.device, "tid": sid, "ts": _us(w.start_ns),
                       "cat": "ac2g", "name": "ac2g", "bp": "e"})
    for n, (start, end) in enumerate(sim.steps):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": pid,
                       "tid": sim.main_tid, "ts": _us(start), "dur": _us(end - start), "args": {}})
    devices = sorted({w.device for w in sim.gpu}) or [0]
    events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"python {pid}"}})
    for d in devices:
        events.append({"ph": "M", "name": "process_name", "pid": d, "tid": 0, "args": {"name": f"GPU {d}"}})
    for (d, _), sid in ids.items():
        events.append({"ph": "M", "name": "thread_name", "pid": d, "tid": sid, "args": {"name": f"stream {sid}"}})
    events.sort(key=lambda e: e.get("ts", -1.0))
    doc: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": _device_properties(profile, devices)}
    if sim.rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": sim.rank, "world_size": sim.world or 1}
    doc["traceEvents"] = events
    doc["traceName"] = f"fakegpu simulated timeline ({profile.id})"
    doc["baseTimeNanoseconds"] = sim.base_realtime_ns
    return doc


def dump(doc: dict[str, Any], f: TextIO) -> None:
    """The document laid out as Kineto lays it out: a key per line, an event per line, `"key": value` spacing.
    Readers look for that layout: HolisticTraceAnalysis finds a file's rank with the pattern `"rank":\\s+\\d+`,
    line by line."""
    f.write("{\n")
    items = list(doc.items())
    for i, (key, value) in enumerate(items):
        f.write(f"  {json.dumps(key)}: ")
        if key == "traceEvents":
            f.write("[\n")
            f.write(",\n".join(f"  {json.dumps(e)}" for e in value))
            f.write("\n  ]")
        else:
            f.write(json.dumps(value))
        f.write(",\n" if i < len(items) - 1 else "\n")
    f.write("}\n")


def write(path: Path, doc: dict[str, Any]) -> None:
    """Write the trace whole or not at all (a temporary file renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.fchmod(fd, 0o666 & ~umask)  # as an ordinary open() would have made it, not mkstemp's 0600
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            dump(doc, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def summary(sim: Simulated, profile: Profile) -> dict[str, Any]:
    """Predicted step time, GPU busy time, GEMM FLOPs and MFU (against the dense peak of the dtype with most FLOPs)
    per step: the mean of the steps between device-wide synchronisations but the last, which replay-trace and HTA
    leave out too (in a profiler's trace it is cut off; here it often holds the program's teardown); one step, or
    without steps the whole run, when that is all there is."""
    if sim.steps:
        windows = sim.steps[:-1] if len(sim.steps) > 1 else sim.steps
    else:
        start = min([w.start_ns for w in sim.gpu] + [h.start_ns for h in sim.host] or [0.0])
        end = max([w.end_ns for w in sim.gpu] + [h.end_ns for h in sim.host] or [0.0])
        windows = [(start, end)]
    span = sum(e - s for s, e in windows)
    inside = [w for w in sim.gpu if any(s <= w.start_ns < e for s, e in windows)]
    flops = sum(w.flops for w in inside)
    by_dtype: dict[str, float] = {}
    for w in inside:
        if w.dtype:
            by_dtype[w.dtype] = by_dtype.get(w.dtype, 0.0) + w.flops
    main = max(by_dtype, key=by_dtype.get) if by_dtype else None
    peak = Board.of(profile).matrix_peak(main) if main else None
    busy = sum(w.end_ns - w.start_ns for w in inside)
    return {"steps": len(windows) if sim.steps else 0, "step_us": span / len(windows) / 1e3,
            "gpu_busy_us": busy / len(windows) / 1e3,
            "kernels": sum(1 for w in inside if w.cat == "kernel") / len(windows),
            "estimated_kernels": sum(1 for w in inside if w.estimated) / len(windows),
            "gemm_flops": flops / len(windows), "mfu": flops / (span * 1e-9) / peak if peak and span else None,
            "mfu_dtype": main, "host_wait_us": sim.host_wait_ns / 1e3}
