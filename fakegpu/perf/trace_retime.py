"""A trace's GPU timeline played again with new durations (trace_whatif gives them).

Each activity starts after what it waited for in the recording, with the same delay after it:
  - its stream's previous activity (a stream runs in order);
  - its host launch: the host's time stays as recorded, except that after a call that waited for the GPU (a
    synchronize call during which GPU work ended, or a copy call that returned after its own copy finished, as a
    copy to pageable memory does), the host resumes when that GPU work ends on the new timeline, so a faster GPU
    also frees a host that synchronizes every step;
  - another stream's activity that ended just before it began (a cross-stream event wait).
A collective starts on every rank when the last rank arrives and lasts the transfer `price` gives it. Played with
the recorded durations the timeline comes out as recorded, which the what-if reports as its check.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from fakegpu.perf.trace_collectives import Collective
from fakegpu.perf.trace_window import Window

Duration = Callable[[Window, int], float]
Price = Callable[[Collective, float], float]


class _Rank:
    """One rank's replay state: per stream, the original and new end of each placed activity, in order."""

    def __init__(self, w: Window, origin: float) -> None:
        self.w = w
        self.t = w.trace
        self.order = sorted(w.kept, key=self.t.start.__getitem__)
        self.origin = origin  # shared by all ranks, so that arrivals at a collective compare across them
        self.ptr = 0
        self.old_ends: dict[int, array] = {}
        self.new_ends: dict[int, array] = {}
        syncs = sorted(self.t.syncs, key=lambda s: s[1])
        self.sync_calls = [s[0] for s in syncs]
        self.sync_ends = [s[1] for s in syncs]
        self.sync_copies = [s[2] for s in syncs]
        self.copies: dict[int, tuple[float, float]] = dict.fromkeys((c for c in self.sync_copies if c >= 0), None)
        self._shift: list[float] = []
        self.first: float | None = None
        self.last = 0.0
        self.launch_bound = 0  # activities that waited for their launch, not for the GPU

    def host(self, at: float, below: int | None = None) -> float:
        """Where the host's original time `at` lands on the new timeline (counting only blocking calls before
        call `below`, for a call's own start)."""
        k = bisect_right(self.sync_ends, at) - 1
        if below is not None:
            k = min(k, below - 1)
        return at - self.origin + (self.shift(k) if k >= 0 else 0.0)

    def shift(self, k: int) -> float:
        """How far the host moved after blocking call k; earlier calls first (a call's start moved with them)."""
        for j in range(len(self._shift), k + 1):
            self._shift.append(self._after_sync(j))
        return self._shift[k]

    def _after_sync(self, k: int) -> float:
        call, ret, copy = self.sync_calls[k], self.sync_ends[k], self.sync_copies[k]
        call_new = self.host(call, below=k)
        # A synchronize call waited for the GPU work that ended last during it; a copy call for its own copy.
        waited = self.ended_before(ret) if copy < 0 else self.copies.get(copy)
        if waited is not None and call < waited[0] <= ret:
            back = max(call_new, waited[1] + (ret - waited[0]))
        else:
            back = call_new + (ret - call)
        return back - (ret - self.origin)

    def ended_before(self, at: float, skip: int | None = None) -> tuple[float, float] | None:
        """(original end, new end) of the activity, on any stream but `skip`, that ended last at or before `at`."""
        best = None
        for s, olds in self.old_ends.items():
            if s == skip or not olds:
                continue
            j = bisect_right(olds, at) - 1
            if j >= 0 and (best is None or olds[j] > best[0]):
                best = (olds[j], self.new_ends[s][j])
        return best

    def arrival(self, i: int) -> float:
        """When activity i starts on the new timeline: the latest, on the new timeline, of what it had to wait for
        (its stream's previous activity, its launch, and the other stream's activity it waited for if that was
        what it started after in the recording), plus the delay it had after its cause in the recording."""
        t = self.t
        s = t.stream[i]
        start = t.start[i]
        causes: list[tuple[float, float, bool]] = []  # (old time, new time, is the launch)
        olds = self.old_ends.get(s)
        if olds:
            causes.append((olds[-1], self.new_ends[s][-1], False))
        c = t.corr[i]
        launch = t.launches.get(c) if c >= 0 else None
        if launch is not None:
            causes.append((launch, self.host(launch), True))
        dep = self.ended_before(start, skip=s)
        if dep is not None and (not causes or dep[0] > max(causes)[0]):
            causes.append((dep[0], dep[1], False))  # an event wait: only when nothing else explains the start
        if not causes:
            return start - self.origin
        delay = start - max(causes)[0]
        _, new_t, by_launch = max(causes, key=lambda x: x[1])
        if by_launch:
            self.launch_bound += 1
        return new_t + delay

    def place(self, i: int, begin: float, end: float) -> None:
        s = self.t.stream[i]
        olds = self.old_ends.get(s)
        if olds is None:
            olds = self.old_ends[s] = array("d")
            self.new_ends[s] = array("d")
        old_end = self.t.start[i] + self.t.dur[i]
        olds.append(max(old_end, olds[-1]) if olds else old_end)  # kept sorted for bisect
        self.new_ends[s].append(end)
        if self.t.corr[i] in self.copies:
            self.copies[self.t.corr[i]] = (old_end, end)
        self.first = begin if self.first is None else min(self.first, begin)
        self.last = max(self.last, end)


@dataclass(frozen=True)
class Played:
    """One rank's window played again: its span (microseconds) and the share of its activities that started when
    the host launched them rather than when the GPU was free (a high share: the host sets the pace)."""

    span_us: float
    launch_bound_pct: float


def replay(windows: dict[int, Window], colls: dict[int, dict[int, Collective]], duration: Duration,
           price: Price) -> dict[int, Played]:
    """Every rank's window played with `duration` per activity and `price` per collective transfer."""
    origin = min((min(w.trace.start[i] for i in w.kept) for w in windows.values() if w.kept), default=0.0)
    ranks = {r: _Rank(w, origin) for r, w in windows.items()}
    members: dict[tuple[str, int], list[Collective]] = {}
    for cs in colls.values():
        for c in cs.values():
            members.setdefault((c.group, c.seq), []).append(c)
    arrivals: dict[tuple[str, int], dict[int, float]] = {}
    resolved: dict[tuple[str, int], float] = {}

    def step(r: int, force: bool) -> bool:
        """Place rank r's next activity; False while it waits for a collective's peers."""
        st = ranks[r]
        i = st.order[st.ptr]
        c = colls[r].get(i)
        begin = st.arrival(i)
        if c is None:
            st.place(i, begin, begin + duration(st.w, i))
            return True
        key = (c.group, c.seq)
        got = arrivals.setdefault(key, {})
        got.setdefault(r, begin)
        if key not in resolved:
            group = members[key]
            if len(got) < len(group) and not force:
                return False
            resolved[key] = max(got.values()) + price(c, min(m.dur for m in group))
        st.place(i, got[r], resolved[key])
        return True

    def busy() -> list[int]:
        return [r for r, st in ranks.items() if st.ptr < len(st.order)]

    while pending := busy():
        progressed = False
        for r in pending:
            st = ranks[r]
            while st.ptr < len(st.order) and step(r, False):
                st.ptr += 1
                progressed = True
        if not progressed:  # the ranks disagree on the order of collectives: let the furthest-behind go alone
            r = min(pending, key=lambda r: ranks[r].ptr)
            step(r, True)
            ranks[r].ptr += 1
    return {r: Played((st.last - st.first) if st.first is not None else 0.0,
                      100.0 * st.launch_bound / len(st.order) if st.order else 0.0) for r, st in ranks.items()}
