"""Which files make a job's trace and which GPU activities of each rank are analysed (the window)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fakegpu.errors import TraceError
from fakegpu.perf.trace_collect import RankTrace, collect

TRACE_SUFFIXES = (".json", ".json.gz")


@dataclass
class Window:
    """One rank's analysed activities and how the window was chosen."""

    trace: RankTrace
    kept: list[int]
    steps: int
    step_names: list[str]
    outside: int
    mode: str


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


def read_ranks(paths: list[str | Path], round_us: bool = False,
               allow_missing_ranks: bool = False) -> tuple[dict[int, RankTrace], list[int]]:
    """Every file read and keyed by its rank (distributedInfo), and the ranks of the job that no file holds. A set
    of files must hold every rank once, unless `allow_missing_ranks` (a sample of a large job's ranks)."""
    files = trace_files(paths)
    traces = [collect(str(f), round_us=round_us) for f in files]
    if len(traces) == 1:
        t = traces[0]
        return {t.rank if t.rank is not None else 0: t}, []
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
    if missing and not allow_missing_ranks:
        raise TraceError(str(files[0].parent), f"rank(s) {ranges(missing)} missing: the files hold rank(s) "
                         f"{ranges(sorted(by_rank))} of world size {world} (--allow-missing-ranks reads a sample)")
    return dict(sorted(by_rank.items())), missing


def ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8': a 1,024-rank job's missing ranks in a line."""
    out: list[str] = []
    for r in ranks:
        if out and r == int(out[-1].rsplit("-", 1)[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{r}"
        else:
            out.append(str(r))
    return ", ".join(out)


def window(t: RankTrace, include_last_step: bool = False) -> Window:
    """The activities analysed. With two or more ProfilerStep#N names, those whose launch (the host event with
    their correlation id) began before the latest start of any ProfilerStep event, host or GPU annotation (with
    `include_last_step`: at or before the latest end); an activity without a correlation id by its own start;
    one whose launch is not in the trace is left out. HTA draws the line at the same place."""
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
