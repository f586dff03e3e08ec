"""Time on a timeline as sorted, disjoint [start, end) intervals: union, length, intersection."""

from __future__ import annotations

from collections.abc import Iterable

Intervals = list[tuple[float, float]]


def union(spans: Iterable[tuple[float, float]]) -> Intervals:
    """The spans merged: touching or overlapping spans become one."""
    out: Intervals = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def length(merged: Intervals) -> float:
    return sum(e - s for s, e in merged)


def intersection_length(a: Intervals, b: Intervals) -> float:
    """Time covered by both of two merged interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        s = max(a[i][0], b[j][0])
        e = min(a[i][1], b[j][1])
        if e > s:
            total += e - s
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total
