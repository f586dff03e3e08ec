"""Collectives across ranks: the NCCL activities of each window with PyTorch's metadata, matched rank to rank
by process group and order, who arrives last and who waits; the slowest rank and why."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from fakegpu.perf.trace_kernels import CLASSES, collective_from_kernel
from fakegpu.perf.trace_window import Window

# Bytes per element of the dtype names PyTorch writes in a collective's metadata (c10's ScalarType names).
DTYPE_BYTES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Int": 4, "Long": 8, "Short": 2, "Char": 1,
               "Byte": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "ComplexFloat": 8, "ComplexDouble": 16,
               "UInt32": 4, "UInt64": 8}


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


def summary(cs: list[Collective]) -> dict[str, Any]:
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


def across_summary(rows: list[dict[str, Any]], x: dict[str, Any] | None) -> dict[str, Any]:
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
