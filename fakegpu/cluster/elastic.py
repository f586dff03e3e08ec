"""What an elastic torchrun job's agents and ranks said, read from a node's output stream as `cluster run` gets it.

torchelastic's agent logs its decisions in glog's layout (`I1204 18:31:58.705000 13 torch/distributed/elastic/
agent/server/api.py:941] [default] Worker group FAILED. 1/1 attempts left; will restart worker group`). Each line
of the stream is fed to a per-node `AgentLog`, which turns the lines it recognises into events:

- from torchelastic's log (source "torchelastic"): `rendezvous` (a completed rendezvous, with its restart_count,
  group_rank and group_world_size), `worker-failed` (a local worker's exit code and pid), `restart` (a failed or
  unhealthy group restarted, with the attempts left), `membership-change` (a group restarted because nodes are
  waiting to join; torchelastic does not count these against --max-restarts), `succeeded` (the local group
  finished) and `agent-signal` (the agent was told to stop);
- from the job's own output (source "job"): `exception` (the line that ends a traceback a process printed: what
  a rank saw, with its rank when torch.distributed prefixed it `[rankN]:`, or the agent's own final error) and
  `first-output` (the first line of the program's own output from the workers of a group after its rendezvous, a
  sign of progress: not a traceback, not a library's log line, and only while the group has not failed).

Nothing is inferred: a kind of event the log does not show is absent. Restarts and rendezvous are logged at INFO,
which torchelastic hides unless LOGLEVEL=INFO (`cluster run` sets it for torchrun commands); failures and
signals are logged at every level.

Times: the agent stamps its lines with the node's wall clock, to the millisecond, but no year or time zone. The
node shares the host's kernel clock, so the stamp differs from the host's arrival time by the zone's offset (a
multiple of 15 minutes) plus the transport's delay; rounding that difference to 15 minutes recovers the exact
epoch time of the stamp (torch prints microseconds, but fills them from logging's msecs). Lines without
a stamp take their arrival time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

KINDS = ("rendezvous", "worker-failed", "restart", "membership-change", "succeeded", "agent-signal",
         "exception", "first-output")
RESTARTS = ("restart", "membership-change")  # each one is a restart of the node's worker group
SOURCE = {"torchelastic": "torchelastic's agent log lines in the job's output",
          "job": "the workers' own output (tracebacks and progress lines)"}
_ZONE_STEP = 900.0   # time zone offsets are whole quarter hours
_MAX_SKEW = 120.0    # a stamp farther than this from its arrival (modulo zones) is not trusted
_DETAIL_MAX = 300

_GLOG = re.compile(r"^(?P<level>[IWEF])(?P<month>\d\d)(?P<day>\d\d) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)\.(?P<us>\d{6})"
                   r" +\d+ (?P<src>\S+):\d+\](?: (?P<msg>.*))?$")
# A glog line glued to the end of another process's unfinished line: an unbuffered worker's print() writes its text
# and its newline in two writes, and the agent's line can land between them (or after the text alone, when the
# worker is killed between the two, which is when the agent's worker-failed line comes).
_GLOG_INSIDE = re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ torch/distributed/\S+:\d+\]")
_ELASTIC_SRC = ("torch/distributed/elastic/", "torch/distributed/run.py", "torch/distributed/launcher/")
_RDZV_DONE = re.compile(r"^\[[^\]]+\] Rendezvous complete for workers\. Result:$")
_RDZV_FIELD = re.compile(r"^\s+(?P<key>\w+)=(?P<value>.*)$")
_WORKER_FAILED = re.compile(r"failed \(exitcode: (?P<exit_code>-?\d+)\) local_rank: (?P<local_rank>\d+) "
                            r"\(pid: (?P<pid>\d+)\)")
_RESTART = re.compile(r"^\[[^\]]+\] Worker group (?P<state>\w+)\. (?P<attempts_left>\d+)/(?P<max_restarts>\d+) "
                      r"attempts left; will restart worker group")
_MEMBERSHIP = re.compile(r"^\[[^\]]+\] Detected (?P<nodes_waiting>\d+) new nodes from group_rank="
                         r"(?P<group_rank>\d+); will restart worker group")
_SUCCEEDED = re.compile(r"^\[[^\]]+\] worker group successfully finished")
_SIGNAL = re.compile(r"^Received (?P<signal>\w+) death signal, shutting down workers")
_RANK_PREFIX = re.compile(r"^\[rank(?P<rank>\d+)\]: ?(?P<body>.*)$")
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Failure)\b.*")
_RDZV_INTS = ("restart_count", "group_rank", "group_world_size")
# Lines of libraries' own logs (gloo's "[/path/pair.cc:152] ...", c10's "[E1204 18:38:02.969856555 File.cpp:69]
# ...") are not the program's progress.
_LIBRARY_LOG = re.compile(r"^\[(?:/|[IWEF]\d{4} )")


@dataclass(frozen=True)
class ElasticEvent:
    time: float                 # epoch seconds
    node: str
    kind: str                   # one of KINDS
    source: str                 # torchelastic | job
    detail: str                 # the message as logged (without glog's prefix), shortened
    facts: dict[str, int] = field(default_factory=dict)  # numbers the message carries (exit_code, rank, ...)

    def as_dict(self) -> dict[str, Any]:
        return {"time": self.time, "node": self.node, "kind": self.kind, "source": self.source,
                "detail": self.detail, **self.facts}


def stamp_time(arrival: float, month: int, day: int, h: int, m: int, s: int, us: int) -> float:
    """The epoch time of a glog stamp written by a clock in an unknown zone, given when the line arrived."""
    year = datetime.fromtimestamp(arrival, timezone.utc).year
    try:
        naive = datetime(year, month, day, h, m, s, us, tzinfo=timezone.utc).timestamp()
    except ValueError:  # 29 February stamped in the year before a non-leap one
        return arrival
    # a year boundary between stamp and arrival is a whole number of quarter hours too
    offset = round((arrival - naive) / _ZONE_STEP) * _ZONE_STEP
    stamped = naive + offset
    return stamped if abs(arrival - stamped) < _MAX_SKEW else arrival


def _short(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _DETAIL_MAX else text[:_DETAIL_MAX - 3] + "..."


def _ints(match: re.Match) -> dict[str, int]:
    return {k: int(v) for k, v in match.groupdict().items() if v is not None and re.fullmatch(r"-?\d+", v)}


class AgentLog:
    """One node's stream, line by line. Not thread-safe: one reader per node, as `cluster run` has."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.events: list[ElasticEvent] = []
        self._rendezvous: tuple[float, dict[str, int]] | None = None  # a result block being read
        self._awaiting_output = False  # a group started; its first line of output not seen yet
        self._in_traceback: dict[int | None, bool] = {}

    def feed(self, line: str, arrival: float) -> list[ElasticEvent]:
        """Read one line; returns the events it completed (also kept in .events)."""
        start = len(self.events)
        glog = _GLOG.match(line)
        inside = _GLOG_INSIDE.search(line, 1) if glog is None else None
        if inside is not None:
            self._job_line(line[:inside.start()], arrival)
            self.feed(line[inside.start():], arrival)
            return self.events[start:]
        if glog is None or not glog["src"].startswith(_ELASTIC_SRC):
            self._finish_rendezvous()
            if glog is None:
                self._job_line(line, arrival)
        else:
            when = stamp_time(arrival, *(int(glog[k]) for k in ("month", "day", "h", "m", "s", "us")))
            self._agent_line(glog["msg"] or "", when)
        return self.events[start:]

    def close(self) -> list[ElasticEvent]:
        start = len(self.events)
        self._finish_rendezvous()
        return self.events[start:]

    # ---- torchelastic's lines ------------------------------------------------------------------------------

    def _agent_line(self, msg: str, when: float) -> None:
        if self._rendezvous is not None:
            found = _RDZV_FIELD.match(msg)
            if found and found["key"] in _RDZV_INTS:
                self._rendezvous[1][found["key"]] = int(found["value"])
            if found:
                return
            self._finish_rendezvous()  # the block ends with an empty continuation line, or another message
            if not msg.strip():
                return
        if _RDZV_DONE.match(msg):
            self._rendezvous = (when, {})
            return
        for kind, pattern in (("worker-failed", _WORKER_FAILED), ("restart", _RESTART),
                              ("membership-change", _MEMBERSHIP), ("succeeded", _SUCCEEDED),
                              ("agent-signal", _SIGNAL)):
            found = pattern.search(msg)
            if found:
                self._add(when, kind, "torchelastic", msg, _ints(found))
                if kind in ("worker-failed", "agent-signal"):
                    self._awaiting_output = False  # that group printed no progress; none is coming
                return

    def _finish_rendezvous(self) -> None:
        if self._rendezvous is None:
            return
        when, facts = self._rendezvous
        self._rendezvous = None
        world = facts.get("group_world_size")
        detail = (f"rendezvous complete: restart_count={facts.get('restart_count')}, "
                  f"group_rank={facts.get('group_rank')}" + (f" of {world} nodes" if world is not None else ""))
        self._add(when, "rendezvous", "torchelastic", detail, facts)
        self._awaiting_output = True

    # ---- the workers' own lines ----------------------------------------------------------------------------

    def _job_line(self, line: str, arrival: float) -> None:
        prefixed = _RANK_PREFIX.match(line)
        rank, body = (int(prefixed["rank"]), prefixed["body"]) if prefixed else (None, line)
        if body.startswith("Traceback (most recent call last):"):
            self._in_traceback[rank] = True
            return
        if self._in_traceback.get(rank):
            if body and not body[0].isspace() and _EXCEPTION.match(body):
                self._in_traceback[rank] = False
                self._add(arrival, "exception", "job", body, {} if rank is None else {"rank": rank})
            return  # frames, and "During handling of the above exception" between chained tracebacks
        if self._awaiting_output and line.strip() and not _LIBRARY_LOG.match(line):
            self._awaiting_output = False
            self._add(arrival, "first-output", "job", line, {})

    def _add(self, when: float, kind: str, source: str, detail: str, facts: dict[str, int]) -> None:
        self.events.append(ElasticEvent(when, self.node, kind, source, _short(detail), facts))


def restarts(events: list[dict[str, Any]], node: str) -> int:
    """How many times the node's agent restarted its worker group, as its log says."""
    return sum(1 for e in events if e["node"] == node and e["kind"] in RESTARTS)


def _recovery_of(node_events: list[dict[str, Any]], fault_time: float) -> tuple[float | None, float | None, bool]:
    """One node after a fault: when its agent next completed a rendezvous, when that group first printed, and
    whether that group failed (a worker-failed before the node's next rendezvous)."""
    after = [e for e in node_events if e["time"] >= fault_time]
    rdzv = next((e for e in after if e["kind"] == "rendezvous"), None)
    if rdzv is None:
        return None, None, False
    group = []
    for e in after[after.index(rdzv) + 1:]:
        if e["kind"] == "rendezvous":
            break
        group.append(e)
    first = next((e["time"] for e in group if e["kind"] == "first-output"), None)
    failed = any(e["kind"] == "worker-failed" for e in group)
    return rdzv["time"], first, failed


def recoveries(faults: list[dict[str, Any]], events: list[dict[str, Any]], nodes: list[str],
               job: dict[str, Any] | None) -> list[dict[str, Any]]:
    """For each fault done while the job ran: how long until every node's agent completed a rendezvous again, and
    until the new workers of every node printed progress. The job recovered if every node's new group ran without
    a worker failure; then time_lost_s is the later of the two the log shows, else null. Work redone because the
    program starts over after a restart is not counted: FakeGPU cannot see its checkpoints."""
    if job is None:
        return []
    out = []
    for index, fault in enumerate(faults):
        if fault["outcome"] != "ok" or not job["started"] <= fault["time"] <= job["ended"]:
            continue
        rendezvous, output, restarted, recovered = [], [], {}, True
        for node in nodes:
            mine = [e for e in events if e["node"] == node]
            rdzv, first, failed = _recovery_of(mine, fault["time"])
            recovered = recovered and rdzv is not None and not failed
            rendezvous.append(None if rdzv is None else rdzv - fault["time"])
            output.append(None if first is None else first - fault["time"])
            restarted[node] = sum(1 for e in mine if e["kind"] in RESTARTS and e["time"] >= fault["time"]
                                  and (rdzv is None or e["time"] <= rdzv))
        all_rdzv = None if None in rendezvous else max(rendezvous)
        all_output = None if None in output else max(output)
        lost = (all_output if all_output is not None else all_rdzv) if recovered else None
        out.append({"fault": index, "action": fault["action"], "node": fault["node"], "recovered": recovered,
                    "rendezvous_s": all_rdzv, "first_output_s": all_output, "time_lost_s": lost,
                    "restarts": restarted})
    return out
