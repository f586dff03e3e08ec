"""`fakegpu run --timeline PATH`: every process's timeline log of a native-mode run turned into a Kineto trace.

One process that used the GPU: its trace is PATH. Several (a torchrun job, DataLoader workers that touched CUDA):
one trace per process beside PATH, `<stem>.rank<R><suffix>` (R its $RANK, else its order), each with its own
distributedInfo, so `replay-trace` and HTA read the folder as one job. The processes are played together
(timeline_ranks): each collective, priced by the topology model for its group, moves data once the last rank of
its communicator has reached it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakegpu.errors import TraceError
from fakegpu.perf.timeline_kineto import dump, kineto, summary, write
from fakegpu.perf.timeline_log import logs_in
from fakegpu.perf.timeline_price import Pricer
from fakegpu.perf.timeline_ranks import simulate_job
from fakegpu.profiles import Profile


@dataclass
class Written:
    path: Path
    pid: int
    rank: int | None
    summary: dict[str, Any]
    notes: list[str]


def fresh_folder(folder: str | Path) -> Path:
    """The run's log folder, without the logs of an earlier run that used the same report folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.fgtl"):
        old.unlink()
    return folder


def _named(out: Path, index: int | str) -> Path:
    name = out.name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            return out.with_name(f"{name[: -len(suffix)]}.rank{index}{suffix}")
    return out.with_name(f"{name}.rank{index}")


def write_timelines(folder: str | Path, out: str | Path, profile: Profile, host_clock: str = "cpu") -> list[Written]:
    """Simulate every log in `folder` on `profile` (the host spaced by `host_clock`: timeline.HOST_CLOCKS) and
    write the traces; TraceError when no process left a log with GPU work (the program never used CUDA through
    FakeGPU's libraries)."""
    out = Path(out)
    logs = [log for log in logs_in(folder) if log.records]
    if not logs:
        raise TraceError(str(out), "no timeline to write: no process of the run handed work to a GPU through "
                         "FakeGPU's CUDA libraries (native mode)")
    pricer = Pricer(profile)
    written: list[Written] = []
    for i, (log, sim) in enumerate(zip(logs, simulate_job(logs, pricer, host_clock), strict=True)):
        index: int | str = log.rank if log.rank is not None else i
        if any(w.rank == index for w in written):  # two processes of one rank (one forked): both kept
            index = f"{index}-pid{log.pid}"
        path = out if len(logs) == 1 else _named(out, index)
        if len(logs) > 1 and sim.rank is None:
            sim.rank, sim.world = i, len(logs)
        doc = kineto(sim, profile)
        if path.name.endswith(".gz"):
            _write_gz(path, doc)
        else:
            write(path, doc)
        written.append(Written(path, log.pid, sim.rank, summary(sim, profile), sim.notes))
    return written


def _write_gz(path: Path, doc: dict[str, Any]) -> None:
    import gzip

    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with gzip.open(tmp, "wt", encoding="utf-8") as f:
            dump(doc, f)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
