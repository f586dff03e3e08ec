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

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakegpu.errors import TraceError
from fakegpu.perf.trace_collect import MemorySeries, RankTrace, collect
from fakegpu.perf.trace_intervals import intersection_length, length, union
from fakegpu.perf.trace_kernels import (
    CATEGORIES,
    CLASSES,
    COMMUNICATION,
    COMPUTE,
    collective_from_kernel,
    hta_category,
    kernel_class,
)
from fakegpu.reports import schema_id

SCHEMA = schema_id("replay-trace")
MEMORY_POINTS = 100
TOP_KERNELS = 10
TOP_ANNOTATIONS = 20
TRACE_SUFFIXES = (".json", ".json.gz")
# Bytes per element of the dtype names PyTorch writes in a collective's metadata (c10's ScalarType names).
DTYPE_BYTES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Int": 4, "Long": 8, "Short": 2, "Char": 1,
               "Byte": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "ComplexFloat": 8, "ComplexDouble": 16,
               "UInt32": 4, "UInt64": 8}


@dataclass
class Window:
    """One rank's analysed activities and how the window was chosen."""

    trace: RankTrace
    kept: list[int]
    steps: int
    step_names: list[str]
    outside: int
    mode: str


@dataclass
class Collective:
    """One NCCL activity in a window, with the metadata PyTorch recorded for it."""

    rank: int
    index: int
    name: str
    collective: str
    group: str
    seq: int
    start: float
    dur: float
    nbytes: int | None
    group_size: int | None
    meta: dict[str, Any] = field(default_factory=dict)


def trace_files(paths: list[str | Path]) -> list[Path]:
    """The files to read: each path, or every trace file in a directory."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
            if not found:
                raise TraceError(str(p), "no trace files (*.json, *.json.gz) in this directory")
            out += found
        else:
            out.append(p)
    if not out:
        raise TraceError("-", "no trace file given")
    return out


def read_ranks(paths: list[str | Path], round_us: bool = False) -> dict[int, RankTrace]:
    """Every file read and keyed by its rank (distributedInfo); a set of files must hold every rank once."""
    files = trace_files(paths)
    traces = [collect(str(f), round_us=round_us) for f in files]
    if len(traces) == 1:
        t = traces[0]
        return {t.rank if t.rank is not None else 0: t}
    by_rank: dict[int, RankTrace] = {}
    for t in traces:
        if t.rank is None:
            raise TraceError(t.path, "no distributedInfo.rank: with several files each must say which rank it is")
        if t.rank in by_rank:
            raise TraceError(t.path, f"rank {t.rank} again (also {by_rank[t.rank].path})")
        by_rank[t.rank] = t
    sizes = {t.world_size for t in traces}
    if len(sizes) != 1 or None in sizes:
        raise TraceError(traces[0].path, "the files disagree on distributedInfo.world_size "
                         f"({', '.join(sorted(map(str, sizes)))})")
    world = sizes.pop()
    missing = sorted(set(range(world)) - set(by_rank))
    if missing:
        raise TraceError(str(files[0].parent), f"rank(s) {', '.join(map(str, missing))} missing: the files hold "
                         f"rank(s) {', '.join(map(str, sorted(by_rank)))} of world size {world}")
    return dict(sorted(by_rank.items()))


def window(t: RankTrace, include_last_step: bool = False) -> Window:
    names = sorted({n for n, _, _ in t.steps}, key=_step_key)
    n = len(t.start)
    if len(names) < 2:
        return Window(t, list(range(n)), max(1, len(names)), names, 0,
                      "all activities (fewer than two ProfilerStep annotations)")
    starts = [ts for _, ts, _ in t.steps]
    ends = [end for _, _, end in t.steps]
    kept: list[int] = []
    launches = t.launches
    if include_last_step:
        limit = max(ends)
        for i in range(n):
            c = t.corr[i]
            at = launches.get(c) if c >= 0 else t.start[i]
            if at is not None and at <= limit:
                kept.append(i)
        return Window(t, kept, len(names), names, n - len(kept), "activities launched up to the end of the last "
                      "ProfilerStep")
    limit = max(starts)
    for i in range(n):
        c = t.corr[i]
        at = launches.get(c) if c >= 0 else t.start[i]
        if at is not None and at < limit:
            kept.append(i)
    return Window(t, kept, len(names) - 1, names[:-1], n - len(kept),
                  "activities launched before the last ProfilerStep begins (the profiler's stop cuts it off)")


def _step_key(name: str) -> tuple[int, str]:
    digits = "".join(c for c in name.rsplit("#", 1)[-1] if c.isdigit())
    return (int(digits) if digits else -1, name)


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


def collectives(rank: int, w: Window) -> list[Collective]:
    """The window's NCCL activities in order, numbered per process group so ranks can be matched."""
    t = w.trace
    seq: dict[str, int] = {}
    out = []
    for i in sorted((i for i in w.kept if i in t.collectives), key=t.start.__getitem__):
        meta = t.collectives[i]
        name = t.names[t.name_id[i]][0]
        group = str(meta.get("pg_name", "default"))
        n = seq.get(group, 0)
        seq[group] = n + 1
        nelems = meta.get("in_nelems")
        size = DTYPE_BYTES.get(str(meta.get("dtype")))
        nbytes = int(nelems) * size if isinstance(nelems, int | float) and size else (
            meta.get("in_bytes") if isinstance(meta.get("in_bytes"), int) else None)
        gs = meta.get("group_size")
        out.append(Collective(rank, i, name, str(meta.get("collective") or collective_from_kernel(name) or "unknown"),
                              group, n, t.start[i], t.dur[i], nbytes, gs if isinstance(gs, int) else None, meta))
    return out


def _collective_summary(cs: list[Collective]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in cs:
        slot = out.setdefault(c.collective, {"count": 0, "total_us": 0.0, "bytes": 0, "bytes_known": 0,
                                             "group_sizes": set()})
        slot["count"] += 1
        slot["total_us"] += c.dur
        if c.nbytes is not None:
            slot["bytes"] += c.nbytes
            slot["bytes_known"] += 1
        if c.group_size:
            slot["group_sizes"].add(c.group_size)
    for slot in out.values():
        slot["group_sizes"] = sorted(slot["group_sizes"])
        slot["algbw_gb_s"] = slot["bytes"] / (slot["total_us"] * 1e3) if slot["bytes_known"] == slot["count"] \
            and slot["total_us"] else None
    return out


def cross_rank(per_rank: dict[int, list[Collective]]) -> dict[str, Any]:
    """Collectives matched across ranks by (process group, order in it): who arrives last, who waits how long."""
    matched: dict[tuple[str, int], list[Collective]] = {}
    for cs in per_rank.values():
        for c in cs:
            matched.setdefault((c.group, c.seq), []).append(c)
    wait = dict.fromkeys(per_rank, 0.0)
    last = dict.fromkeys(per_rank, 0)
    skews = []
    for group in matched.values():
        if len(group) < 2:
            continue
        latest = max(group, key=lambda c: c.start)
        last[latest.rank] += 1
        skews.append(latest.start - min(c.start for c in group))
        for c in group:
            wait[c.rank] += latest.start - c.start
    n = sum(1 for g in matched.values() if len(g) >= 2)
    return {"matched_collectives": n, "wait_us": wait, "last_arrivals": last,
            "skew_us": {"mean": statistics.fmean(skews) if skews else 0.0, "max": max(skews, default=0.0)}}


def analyse(paths: list[str | Path], include_last_step: bool = False,
            round_us: bool = False) -> tuple[dict[str, Any], dict[int, Window]]:
    """The replay-trace report (without a what-if) and the windows it was computed from. `round_us` reads every
    event's times as HolisticTraceAnalysis does (start rounded up, end down to whole microseconds), for comparing
    with it; by default the trace's own (nanosecond) times are used."""
    ranks = read_ranks(paths, round_us)
    windows = {r: window(t, include_last_step) for r, t in ranks.items()}
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
            "collectives": _collective_summary(colls[r]),
            "events": {"total": t.events, "used": dict(sorted(t.used.items())),
                       "ignored": dict(sorted(t.ignored.items())), "unusable": dict(sorted(t.unusable.items()))},
        })
    across = cross_rank(colls) if len(windows) > 1 else None
    world = next(iter(windows.values())).trace.world_size
    report = {
        "schema": SCHEMA,
        "input": {"files": [w.trace.path for w in windows.values()], "ranks": sorted(windows),
                  "world_size": world, "include_last_step": include_last_step, "round_us": round_us},
        "ranks": rows,
        "across_ranks": _across(rows, across),
        "what_if": None,
        "notes": _notes(rows, windows),
    }
    return report, windows


def _annotations(t: RankTrace) -> dict[str, Any]:
    def top(table):
        rows = sorted(table.items(), key=lambda kv: -kv[1].total_us)[:TOP_ANNOTATIONS]
        return [{"name": k, "count": v.count, "total_us": v.total_us} for k, v in rows]

    return {"host": top(t.annotations), "gpu": top(t.gpu_annotations),
            "distinct": len(t.annotations) + len(t.gpu_annotations)}


def _across(rows: list[dict[str, Any]], x: dict[str, Any] | None) -> dict[str, Any]:
    """The slowest rank and why; stragglers and wait time when collectives can be matched."""
    if len(rows) == 1:
        r = rows[0]
        return {"slowest_rank": r["rank"], "why": "one rank", "stragglers": [], "matched_collectives": 0,
                "wait_us": {str(r["rank"]): 0.0}, "last_arrivals": {str(r["rank"]): 0},
                "skew_us": {"mean": 0.0, "max": 0.0}, "step_us": {"min": r["step_us"], "max": r["step_us"]}}
    by_rank = {r["rank"]: r for r in rows}
    if x and x["matched_collectives"]:
        # The rank the others wait for arrives last most often and waits least itself.
        slow = max(by_rank, key=lambda k: (x["last_arrivals"][k], -x["wait_us"][k]))
    else:
        slow = max(by_rank, key=lambda k: by_rank[k]["span_us"])
    others = [r for k, r in by_rank.items() if k != slow]
    why = _why(by_rank[slow], others)
    mean_wait = statistics.fmean(x["wait_us"].values()) if x else 0.0
    stragglers = sorted(k for k in by_rank if x and x["matched_collectives"]
                        and x["last_arrivals"][k] > x["matched_collectives"] / len(rows)
                        and x["wait_us"][k] < mean_wait) if x else []
    return {
        "slowest_rank": slow,
        "why": why,
        "stragglers": stragglers,
        "matched_collectives": x["matched_collectives"] if x else 0,
        "wait_us": {str(k): v for k, v in (x["wait_us"] if x else dict.fromkeys(by_rank, 0.0)).items()},
        "last_arrivals": {str(k): v for k, v in (x["last_arrivals"] if x else dict.fromkeys(by_rank, 0)).items()},
        "skew_us": x["skew_us"] if x else {"mean": 0.0, "max": 0.0},
        "step_us": {"min": min(r["step_us"] for r in rows), "max": max(r["step_us"] for r in rows)},
    }


def _why(slow: dict[str, Any], others: list[dict[str, Any]]) -> str:
    """The kernel class (or the idle time) by which the slowest rank exceeds the median of the others most."""
    gaps = {}
    for cls in CLASSES:
        mine = slow["classes"].get(cls, {}).get("total_us", 0.0)
        theirs = statistics.median(o["classes"].get(cls, {}).get("total_us", 0.0) for o in others)
        if cls != "nccl":  # its NCCL time is what the others spend waiting for it
            gaps[f"{cls} kernels"] = mine - theirs
    gaps["idle time (host-bound gaps)"] = slow["idle_us"] - statistics.median(o["idle_us"] for o in others)
    what, extra = max(gaps.items(), key=lambda kv: kv[1])
    if extra <= 0:
        return "no kernel class or idle time exceeds the other ranks' median: it arrives last by launch timing"
    return f"{extra:.1f} us more {what} than the other ranks' median"


def _notes(rows: list[dict[str, Any]], windows: dict[int, Window]) -> list[str]:
    notes = []
    for r in rows:
        w = r["window"]
        if not w["activities"]:
            notes.append(f"rank {r['rank']}: no GPU activity (kernel, memcpy, memset) in the window" + (
                f"; {w['outside_window']} fall outside it" if w["outside_window"] else
                ": a CPU-only profile has none (profile with ProfilerActivity.CUDA on a GPU)"))
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
