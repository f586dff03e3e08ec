"""`replay-trace`: what a PyTorch profiler trace says about each rank's GPU time, and across ranks.

Definitions (those of HolisticTraceAnalysis, so the numbers can be compared with it one for one):

    window     the GPU activities (events with an integer args.stream) analysed. When a trace has two or more
               ProfilerStep#N annotations, the activities launched (through their correlation id) before the
               last step begins: the last step is cut off by the profiler's stop. Otherwise all of them.
    span       first activity start to last activity end in the window.
    busy       time at least one activity runs (the union over streams); idle = span - busy.
    compute    union of compute activities (trace_kernels.hta_category); non-compute = busy - compute, which
               holds communication, copies and the rest.
    overlap    time communication and compute run together, as a share of communication time.
    exposed    communication time with no compute under it.

Shares are of the span. Times are microseconds, as the trace has them, not rounded; HTA rounds each event inward
to whole microseconds (start up, end down) when a trace has fractional timestamps (PyTorch 2.4+ writes them),
which shortens every kernel by up to 1 us: `round_us` reads the trace that way too, to compare with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fakegpu.errors import UsageError
from fakegpu.perf.trace_collect import MemorySeries, RankTrace
from fakegpu.perf.trace_collectives import across_summary, collectives, cross_rank, summary
from fakegpu.perf.trace_flops import count as count_flops
from fakegpu.perf.trace_flops import notes as flop_notes
from fakegpu.perf.trace_flops import overall as overall_mfu
from fakegpu.perf.trace_flops import section as flop_section
from fakegpu.perf.trace_intervals import intersection_length, length, union
from fakegpu.perf.trace_kernels import CATEGORIES, CLASSES, COMMUNICATION, COMPUTE, hta_category, kernel_class
from fakegpu.perf.trace_whatif import source_profile
from fakegpu.perf.trace_window import Window, ranges, read_ranks, window
from fakegpu.profiles import Profile
from fakegpu.reports import schema_id

SCHEMA = schema_id("replay-trace")
MEMORY_POINTS = 100
TOP_KERNELS = 10
TOP_ANNOTATIONS = 20


def _breakdown(w: Window) -> dict[str, Any]:
    t = w.trace
    spans: dict[str, list[tuple[float, float]]] = {c: [] for c in CATEGORIES}
    everything: list[tuple[float, float]] = []
    classes = {c: [0, 0.0] for c in CLASSES}
    by_name: dict[int, list[float]] = {}
    streams: dict[int, list[float]] = {}
    for i in w.kept:
        s = t.start[i]
        d = t.dur[i]
        span = (s, s + d)
        everything.append(span)
        name, cat = t.names[t.name_id[i]]
        spans[hta_category(name)].append(span)
        slot = classes[kernel_class(name, cat)]
        slot[0] += 1
        slot[1] += d
        acc = by_name.setdefault(t.name_id[i], [0, 0.0])
        acc[0] += 1
        acc[1] += d
        st = streams.setdefault(t.stream[i], [0, 0.0])
        st[0] += 1
        st[1] += d
    if not everything:
        return {}
    busy_iv = union(everything)
    span_us = busy_iv[-1][1] - busy_iv[0][0]
    busy = length(busy_iv)
    merged = {c: union(v) for c, v in spans.items()}
    compute = length(merged[COMPUTE])
    comm = length(merged[COMMUNICATION])
    overlap = intersection_length(merged[COMPUTE], merged[COMMUNICATION])

    def pct(x: float, of: float) -> float | None:
        return round(100.0 * x / of, 4) if of else None

    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:TOP_KERNELS]
    return {
        "start_us": busy_iv[0][0],
        "span_us": span_us,
        "busy_us": busy,
        "idle_us": span_us - busy,
        "compute_us": compute,
        "non_compute_us": busy - compute,
        "communication_us": comm,
        "memory_us": length(merged["memory"]),
        "other_us": length(merged["other"]),
        "overlap_us": overlap,
        "exposed_communication_us": comm - overlap,
        "idle_pct": pct(span_us - busy, span_us),
        "compute_pct": pct(compute, span_us),
        "non_compute_pct": pct(busy - compute, span_us),
        "communication_pct": pct(comm, span_us),
        "exposed_communication_pct": pct(comm - overlap, span_us),
        "overlap_pct": pct(overlap, comm),
        "step_us": span_us / w.steps if w.steps else span_us,
        "classes": {c: {"count": n, "total_us": d, "share_pct": pct(d, sum(v[1] for v in classes.values()))}
                    for c, (n, d) in classes.items() if n},
        "top_kernels": [{"name": t.names[k][0], "class": kernel_class(*t.names[k]), "count": n, "total_us": d}
                        for k, (n, d) in top],
        "streams": {str(s): {"count": n, "total_us": d} for s, (n, d) in sorted(streams.items())},
    }


def _no_gpu(w: Window) -> dict[str, Any]:
    """The breakdown of a window with no GPU activity (a CPU-only profile): zeros, shares unknown."""
    zero = dict.fromkeys(("span_us", "busy_us", "idle_us", "compute_us", "non_compute_us", "communication_us",
                          "memory_us", "other_us", "overlap_us", "exposed_communication_us", "step_us"), 0.0)
    shares = dict.fromkeys(("idle_pct", "compute_pct", "non_compute_pct", "communication_pct",
                            "exposed_communication_pct", "overlap_pct"))
    return {"start_us": w.trace.first_ts or 0.0, **zero, **shares, "classes": {}, "top_kernels": [], "streams": {}}


def _memory(t: RankTrace, origin: float) -> dict[str, Any]:
    return {kind: _series(t.memory.get(kind), origin) for kind in ("device", "host")}


def _series(m: MemorySeries | None, origin: float) -> dict[str, Any]:
    """Peak and a timeline of at most MEMORY_POINTS samples (each the highest of its time bucket)."""
    n = len(m.ts) if m else 0
    if not n:
        return {"samples": 0, "devices": [], "peak_allocated_bytes": None, "peak_reserved_bytes": None,
                "peak_at_us": None, "timeline": []}
    peak_i = max(range(n), key=m.allocated.__getitem__)
    reserved = max(m.reserved)
    lo, hi = min(m.ts), max(m.ts)
    buckets = min(MEMORY_POINTS, n)
    width = (hi - lo) / buckets or 1.0
    best: dict[int, tuple[float, int, int]] = {}
    for ts, a, r in zip(m.ts, m.allocated, m.reserved, strict=True):
        b = min(int((ts - lo) / width), buckets - 1)
        if b not in best or a > best[b][1]:
            best[b] = (ts, a, r)
    timeline = [{"t_us": ts - origin, "allocated_bytes": a, "reserved_bytes": r if r >= 0 else None}
                for ts, a, r in (best[b] for b in sorted(best))]
    return {"samples": n, "devices": sorted(m.devices), "peak_allocated_bytes": m.allocated[peak_i],
            "peak_reserved_bytes": reserved if reserved >= 0 else None, "peak_at_us": m.ts[peak_i] - origin,
            "timeline": timeline}


def analyse(paths: list[str | Path], include_last_step: bool = False, round_us: bool = False,
            allow_missing_ranks: bool = False, from_profile: str | None = None
            ) -> tuple[dict[str, Any], dict[int, Window]]:
    """The replay-trace report (without a what-if) and the windows it was computed from. `round_us` reads every
    event's times as HolisticTraceAnalysis does (start rounded up, end down to whole microseconds), for comparing
    with it; by default the trace's own (nanosecond) times are used. MFU is against `from_profile`'s peaks, else
    those of the board the trace names (none when the catalog does not know it)."""
    ranks, missing = read_ranks(paths, round_us, allow_missing_ranks)
    windows = {r: window(t, include_last_step) for r, t in ranks.items()}
    board = _board(windows, from_profile)
    rows = []
    colls = {r: collectives(r, w) for r, w in windows.items()}
    for r, w in windows.items():
        t = w.trace
        b = _breakdown(w) or _no_gpu(w)
        rows.append({
            "rank": r,
            "file": t.path,
            "compressed": t.compressed,
            "device": t.device_name,
            "window": {"mode": w.mode, "steps": w.steps, "step_names": w.step_names, "activities": len(w.kept),
                       "outside_window": w.outside},
            **b,
            "memory": _memory(t, b["start_us"]),
            "annotations": _annotations(t),
            "collectives": summary(colls[r]),
            "flops": flop_section(w, count_flops(w), b["step_us"], board),
            "events": {"total": t.events, "used": dict(sorted(t.used.items())),
                       "ignored": dict(sorted(t.ignored.items())), "unusable": dict(sorted(t.unusable.items()))},
        })
    crossed = cross_rank(colls) if len(windows) > 1 else None
    world = next(iter(windows.values())).trace.world_size
    report = {
        "schema": SCHEMA,
        "input": {"files": [w.trace.path for w in windows.values()], "ranks": sorted(windows),
                  "world_size": world, "missing_ranks": missing, "include_last_step": include_last_step,
                  "round_us": round_us},
        "ranks": rows,
        "across_ranks": across_summary(rows, crossed),
        "mfu": overall_mfu(rows),
        "what_if": None,
        "notes": _notes(rows, windows) + flop_notes(rows)
        + ([f"rank(s) {ranges(missing)} of the job are not in the input: the wait times are among the ranks given"]
           if missing else []),
    }
    return report, windows


def _board(windows: dict[int, Window], from_profile: str | None) -> Profile | None:
    """The board MFU is measured against; None when the trace does not name one the catalog knows (a CPU-only
    profile), where MFU is left unknown rather than guessed."""
    if from_profile is not None:
        return source_profile(windows, from_profile)  # a name the catalog does not know is the user's error
    try:
        return source_profile(windows, None)
    except UsageError:
        return None


def _annotations(t: RankTrace) -> dict[str, Any]:
    def top(table):
        rows = sorted(table.items(), key=lambda kv: -kv[1].total_us)[:TOP_ANNOTATIONS]
        return [{"name": k, "count": v.count, "total_us": v.total_us} for k, v in rows]

    return {"host": top(t.annotations), "gpu": top(t.gpu_annotations),
            "distinct": len(t.annotations) + len(t.gpu_annotations)}


def _notes(rows: list[dict[str, Any]], windows: dict[int, Window]) -> list[str]:
    notes = []
    for r in rows:
        w = r["window"]
        if not w["activities"]:
            notes.append(f"rank {r['rank']}: no GPU activity (kernels, copies, memsets: events with a stream) in "
                         "the window" + (f"; {w['outside_window']} fall outside it" if w["outside_window"] else
                                         ": a CPU-only profile has none, nor does a CUPTI counter-range profile"))
        if w["outside_window"]:
            notes.append(f"rank {r['rank']}: {w['outside_window']} GPU activit(ies) outside the window (launched "
                         "in the last, cut-off step, or their launch is not in the trace); --include-last-step keeps "
                         "the last step")
        bad = sum(r["events"]["unusable"].values())
        if bad:
            notes.append(f"rank {r['rank']}: {bad} event(s) could not be used: "
                         + "; ".join(f"{k}: {v}" for k, v in r["events"]["unusable"].items()))
        unknown = [name for name, c in r["collectives"].items() if name == "unknown"]
        if unknown:
            notes.append(f"rank {r['rank']}: NCCL kernels without collective metadata (no record_param_comms args)")
    if len(rows) == 1 and (rows[0].get("collectives")) and (windows[rows[0]["rank"]].trace.world_size or 1) > 1:
        notes.append("one rank of a larger job: its NCCL time includes waiting for ranks not in the input")
    return notes
