"""The ranks of a job played together: a collective moves data only once every rank of its communicator has
reached it, so each rank's NCCL kernel starts at its own arrival and ends the transfer's time after the last
rank's, and the work queued behind it on that stream, and the host waiting for it, move later with it. This is
what a real trace of a job shows: the early ranks' NCCL kernels run long.

Collectives are matched across ranks as NCCL requires programs to issue them: every rank of a communicator issues
its collectives in the same order. Each rank's n-th collective on a communicator (the tag every rank records for
it, with the group size) is one operation; they must agree on the collective, element count and dtype. Point to
point sends and receives are not matched (they pair two ranks, not a group) and keep their own price. When the
logs do not match (a rank stops early, two ranks' n-th collectives differ, a communicator has fewer logs than
ranks) the job is priced rank by rank, as each rank alone would have run, and a note says which collective
disagreed: a guessed alignment would misplace every collective after it.
"""

from __future__ import annotations

from collections.abc import Generator

from fakegpu.perf import timeline_log as tl
from fakegpu.perf.timeline import RECV, SEND, Arrival, Simulated, play, simulate
from fakegpu.perf.timeline_price import COLLECTIVES, Pricer

Run = Generator[Arrival, float, Simulated]


class Mismatch(Exception):
    """The ranks' collectives cannot be matched; the message says where."""


def _members(logs: list[tl.TimelineLog]) -> dict[tuple[int, int], set[int]]:
    groups: dict[tuple[int, int], set[int]] = {}
    for i, log in enumerate(logs):
        for r in log.records:
            if r.kind == tl.COLL and r.sub not in (SEND, RECV):
                groups.setdefault((r.d >> 32, r.c & 0xFFFFFFFF), set()).add(i)
    return groups


def _what(a: Arrival) -> str:
    name = COLLECTIVES[a.kind][0] if 0 <= a.kind < len(COLLECTIVES) else f"collective {a.kind}"
    return f"{name} of {a.count} elements (type {a.dtype_op & 0xFFFF})"


def _play_together(logs: list[tl.TimelineLog], names: list[str], pricer: Pricer, host_clock: str) -> list[Simulated]:
    members = _members(logs)
    for (_tag, size), who in members.items():
        if len(who) != size:
            raise Mismatch(
                f"a communicator of {size} ranks has collectives in {len(who)} process log(s) ("
                f"{', '.join(names[i] for i in sorted(who))}): the other ranks' logs are not in this run"
            )
    origin = min(log.t0_monotonic_ns for log in logs)  # one clock for the job: a collective's arrivals compare
    runs: list[Run] = [play(log, pricer, host_clock, origin) for log in logs]
    done: list[Simulated | None] = [None] * len(logs)
    waiting: dict[tuple[tuple[int, int], int], dict[int, Arrival]] = {}

    def advance(i: int, value: float | None) -> None:
        try:
            a = next(runs[i]) if value is None else runs[i].send(value)
        except StopIteration as stop:
            done[i] = stop.value
            return
        waiting.setdefault((a.group, a.seq), {})[i] = a

    for i in range(len(runs)):
        advance(i, None)
    while waiting:
        ready = [k for k, got in waiting.items() if len(got) == k[0][1]]
        if not ready:
            raise Mismatch(_stuck(waiting, done, names))
        for key in ready:
            got = waiting.pop(key)
            first = next(iter(got.values()))
            for i, a in got.items():
                if (a.kind, a.count, a.dtype_op) != (first.kind, first.count, first.dtype_op):
                    j = next(iter(got))
                    raise Mismatch(
                        f"collective #{key[1] + 1} of a {key[0][1]}-rank communicator: {names[j]} "
                        f"issued {_what(first)}, {names[i]} {_what(a)}"
                    )
            start = max(a.at_ns for a in got.values())
            for i in got:
                advance(i, start)
    return [d for d in done if d is not None]


def _stuck(waiting: dict, done: list[Simulated | None], names: list[str]) -> str:
    (group, seq), got = min(waiting.items(), key=lambda kv: kv[0][1])
    absent = [names[i] for i, d in enumerate(done) if d is not None]
    elsewhere = {names[i]: (g, s) for (g, s), w in waiting.items() for i in w if (g, s) != (group, seq)}
    parts = [
        f"collective #{seq + 1} of a {group[1]}-rank communicator ({_what(next(iter(got.values())))}) "
        f"reached by {', '.join(names[i] for i in sorted(got))} only"
    ]
    if absent:
        parts.append(f"{', '.join(absent)} ended with no such collective")
    if elsewhere:
        parts.append(
            "; ".join(
                f"{n} waits in collective #{s + 1} of a {g[1]}-rank communicator"
                for n, (g, s) in sorted(elsewhere.items())
            )
        )
    return ": ".join(parts[:1]) + ("; " + "; ".join(parts[1:]) if parts[1:] else "")


def simulate_job(logs: list[tl.TimelineLog], pricer: Pricer, host_clock: str = "cpu") -> list[Simulated]:
    """Every process's simulation, the ranks' collectives aligned when there are several (module docstring); one
    process is simulated alone, as before."""
    if len(logs) < 2:
        return [simulate(log, pricer, host_clock) for log in logs]
    names = [f"rank {log.rank}" if log.rank is not None else f"pid {log.pid}" for log in logs]
    try:
        return _play_together(logs, names, pricer, host_clock)
    except Mismatch as exc:
        sims = [simulate(log, pricer, host_clock) for log in logs]
        for sim in sims:
            sim.notes.append(
                f"collectives do not match across the ranks ({exc}); each rank is priced alone, its "
                "collectives not held for the others"
            )
        return sims
