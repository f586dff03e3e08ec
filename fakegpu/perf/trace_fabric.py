"""What-if collectives re-priced by the topology model (simulate-topology's): a trace's NCCL transfers moved to
another fabric.

Each collective of the trace (its kind, bytes and process group, from the metadata PyTorch records) is priced by
the model twice, as simulate-topology prices it (every algorithm and protocol NCCL would consider, the fastest
kept): on the target fabric, with the trace's rank i on the fabric's GPU i (node by node), and on the source,
the fabric the trace ran on (`--from-fabric-file`, ranks mapped the same way; without it, one node of the
trace's board with as many GPUs as the group, the group on all of them). The recorded transfer is then scaled:

    new transfer = recorded transfer x model(target) / model(source)

Why a ratio and not the model's absolute time: the recording is a measurement of this very collective on the
real machine, with what the model leaves out (NCCL's version and channel count, the SMs the kernel got beside
the compute it overlapped, the GPU-to-NIC hop, congestion). Whatever part of that the two fabrics share cancels
in the ratio, so the trace calibrates the model: on the source fabric itself the what-if gives back the recorded
times exactly, and elsewhere it moves them by the model's relative change (for small messages its latency, for
large ones the bandwidth of the link that bounds them). What does not cancel is the model's error on one fabric
and not the other (NVLink against InfiniBand, say); the report therefore shows both absolute model times next to
the recorded one, so a reader sees how far the model's own figure on the source is from the measurement.

A process group's ranks come from the trace ("Process Group Ranks"); where PyTorch did not write them, a group
smaller than the world is taken as consecutive ranks (the block of its size holding the rank) and the report says
so. Each group is priced alone: other groups' collectives at the same moment do not share its links here.
Collectives the model cannot price (no byte count, a kind it does not model, a group of one) fall back to the
link-bandwidth ratio, counted in the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fakegpu.errors import UsageError
from fakegpu.perf import collectives
from fakegpu.perf.fabric_options import FabricOptions, fabric_text
from fakegpu.perf.topology import Fabric, generated
from fakegpu.perf.trace_collectives import DTYPE_BYTES, Collective
from fakegpu.perf.trace_links import bandwidth_ratio_pricer
from fakegpu.perf.trace_window import Window, ranges
from fakegpu.profiles import Profile
from fakegpu.user_files import loads_json

# PyTorch's collective names (record_param_comms, c10d) and NCCL's kernel names, lower-cased without underscores,
# by prefix -> the model's collective. Reduce-scatter before reduce; barrier is a one-element all-reduce in c10d.
_KINDS = (("allreduce", "all-reduce"), ("allgather", "all-gather"), ("reducescatter", "reduce-scatter"),
          ("alltoall", "all-to-all"), ("broadcast", "broadcast"), ("sendrecv", "send-recv"), ("send", "send-recv"),
          ("recv", "send-recv"), ("reduce", "reduce"), ("barrier", "all-reduce"))


def model_collective(name: str) -> str | None:
    """'allreduce', '_allgather_base', 'reduce_scatter_tensor_coalesced', 'AllReduce' -> the model's name."""
    key = name.lower().replace("_", "")
    return next((kind for prefix, kind in _KINDS if key.startswith(prefix)), None)


def model_bytes(c: Collective, kind: str, group: int) -> int | None:
    """The collective's size as nccl-tests counts it: the whole output of an all-gather (PyTorch records each
    rank's input), the input otherwise."""
    if kind != "all-gather":
        return c.nbytes
    out, elem = c.meta.get("out_nelems"), DTYPE_BYTES.get(str(c.meta.get("dtype")))
    if isinstance(out, int | float) and elem:
        return int(out) * elem
    if isinstance(c.meta.get("out_bytes"), int):
        return int(c.meta["out_bytes"])
    return None if c.nbytes is None else c.nbytes * group


def _recorded_ranks(raw: Any) -> list[int] | None:
    if isinstance(raw, str):
        try:
            raw = loads_json(raw)
        except ValueError:  # PyTorch may shorten a long list; then the ranks are unknown
            return None
    if isinstance(raw, list) and raw and all(isinstance(r, int) and r >= 0 for r in raw):
        return raw
    return None


def group_ranks(c: Collective, world: int) -> tuple[tuple[int, ...], bool]:
    """The global ranks of `c`'s process group, and whether they were assumed (not in the trace)."""
    ranks = _recorded_ranks(c.meta.get("pg_ranks"))
    k = c.group_size or world
    if ranks is not None and len(ranks) == k and c.rank in ranks:
        return tuple(sorted(ranks)), False
    if k >= world:
        return tuple(range(world)), False
    start = c.rank // k * k
    return tuple(range(start, start + k)), True


def world_size(windows: dict[int, Window]) -> int:
    """Ranks in the job: distributedInfo's world size, at least every rank read."""
    sizes = [w.trace.world_size or 0 for w in windows.values()]
    return max([*sizes, max(windows) + 1])


@dataclass(frozen=True)
class Priced:
    seconds: float
    algorithm: str
    protocol: str


def collective_plans(fabric: Fabric, ranks: tuple[int, ...], kind: str) -> list[collectives.Plan]:
    """The plans simulate-topology weighs for collective `kind` on the fabric's GPUs `ranks`: on the whole fabric
    every algorithm NCCL would consider (its own sweep's choice); on part of it, the communicator group's plans its
    training step uses."""
    if len(ranks) == fabric.gpu_count:
        return [collectives.plan(fabric, kind, a) for a in collectives.candidates(fabric, kind)]
    return collectives.group_plans(fabric, [np.array(ranks)], kind)


def collective_time(fabric: Fabric, ranks: tuple[int, ...], kind: str, nbytes: int,
                    plans: list[collectives.Plan] | None = None) -> Priced:
    """The model's time for collective `kind` of `nbytes` on the fabric's GPUs `ranks`, with the fastest algorithm
    and protocol among `plans` (default: collective_plans)."""
    plans = collective_plans(fabric, ranks, kind) if plans is None else plans
    times, picks = collectives.fastest(fabric, plans, np.array([float(max(1, nbytes))]))
    return Priced(float(times[0]), *picks[0])


def _board_of(fabric: Fabric, world: int, what: str) -> Profile:
    """The one board of the GPUs the trace's ranks land on."""
    if fabric.gpu_count < world:
        raise UsageError(f"the trace has {world} ranks but {what} has {fabric.gpu_count} GPU(s): rank i runs on "
                         f"the fabric's GPU i, node by node, so it needs at least {world} (e.g. more --nodes or "
                         f"--gpus-per-node)")
    boards = {fabric.spec.nodes[int(n)].profile.id: fabric.spec.nodes[int(n)].profile
              for n in np.unique(fabric.node_of[:world])}
    if len(boards) > 1:
        raise UsageError(f"the trace's ranks land on GPUs of {len(boards)} boards in {what} "
                         f"({', '.join(sorted(boards))}): the what-if re-times kernels for one board")
    return next(iter(boards.values()))


def fabric_pricer(windows: dict[int, Window], options: FabricOptions, from_fabric_file: Path | None,
                  source: Profile, target: Profile | None) -> tuple[Profile, FabricPricer]:
    """The target board and the pricer for a what-if onto the fabric of `options` (generated of `target`, else of
    the trace's own board `source`), from the fabric in `from_fabric_file` (else one node per group)."""
    if not options.given():
        raise UsageError("--from-fabric-file prices the recorded collectives on the fabric they ran on: give the "
                         "fabric to compare it with (--fabric-file, or --nodes/--gpus-per-node/--fabric)")
    world = world_size(windows)
    fabric = options.build(target or source)
    board = _board_of(fabric, world, "the target fabric")
    if target is not None and board.id != target.id:
        raise UsageError(f"--profile {target.id} re-times the kernels, but the fabric's GPUs for the trace's ranks "
                         f"are {board.id}: leave --profile out to take the fabric's board")
    from_fabric = None
    if from_fabric_file is not None:
        from fakegpu.perf.fabric_file import load as load_fabric_file

        from_fabric = Fabric(load_fabric_file(from_fabric_file))
        had = _board_of(from_fabric, world, "--from-fabric-file's fabric")
        if had.id != source.id:
            raise UsageError(f"the trace ran on {source.id}, but --from-fabric-file's GPUs for its ranks are "
                             f"{had.id}: name the board it ran on with --from-profile, or fix the file")
    return board, FabricPricer(fabric, world, source, from_fabric)


class FabricPricer:
    """A CollectivePricer (trace_whatif) that re-prices each transfer by model(target) / model(source), and keeps
    what it priced for the report."""

    def __init__(self, target: Fabric, world: int, source_board: Profile, source: Fabric | None = None) -> None:
        self.target = target
        self.source = source
        self.world = world
        self.source_board = source_board
        self._one_node: dict[int, Fabric] = {}
        self._plans: dict[tuple[int, tuple[int, ...], str], list[collectives.Plan]] = {}
        self._prices: dict[tuple[int, tuple[int, ...], str, int], Priced] = {}
        self.rows: dict[tuple[str, str, int, tuple[int, ...]], dict[str, Any]] = {}
        self.assumed: dict[str, int] = {}  # process group -> its size, where its ranks were assumed
        self.partial = False  # a group smaller than the world was priced
        self.fallback: dict[str, int] = {}

    def check(self, source: Profile, target: Profile) -> None:
        """Start afresh for a what-if from `source` to `target`, the boards this pricer was built for."""
        if source.id != self.source_board.id:
            raise UsageError(f"the fabric pricer was built for a trace of {self.source_board.id}, not {source.id}")
        board = _board_of(self.target, self.world, "the target fabric")
        if board.id != target.id:
            raise UsageError(f"the target fabric's GPUs are {board.id}, not {target.id}")
        self.rows.clear()
        self.assumed.clear()
        self.fallback.clear()
        self.partial = False

    def _source_fabric(self, ranks: tuple[int, ...]) -> tuple[Fabric, tuple[int, ...]]:
        if self.source is not None:
            return self.source, ranks
        k = len(ranks)
        if k not in self._one_node:
            self._one_node[k] = Fabric(generated(1, k, self.source_board, None))
        return self._one_node[k], tuple(range(k))

    def _price(self, fabric: Fabric, ranks: tuple[int, ...], kind: str, nbytes: int) -> Priced:
        # a trace repeats a few kinds and groups at many sizes: plans once per group, a price once per size
        found = self._prices.get((id(fabric), ranks, kind, nbytes))
        if found is None:
            plans = self._plans.get((id(fabric), ranks, kind))
            if plans is None:
                plans = self._plans[(id(fabric), ranks, kind)] = collective_plans(fabric, ranks, kind)
            found = self._prices[(id(fabric), ranks, kind, nbytes)] = collective_time(fabric, ranks, kind, nbytes,
                                                                                     plans)
        return found

    def __call__(self, c: Collective, source: Profile, target: Profile, transfer_us: float) -> float:
        kind = model_collective(c.collective)
        ranks, assumed = group_ranks(c, self.world)
        nbytes = model_bytes(c, kind, len(ranks)) if kind else None
        why = (f"{c.collective} is not a collective the model prices" if kind is None
               else "no byte count in the trace's metadata" if nbytes is None
               else "a group of one rank" if len(ranks) < 2 else None)
        if why is not None:
            self.fallback[why] = self.fallback.get(why, 0) + 1
            return bandwidth_ratio_pricer(c, source, target, transfer_us)
        if ranks[-1] >= self.world:  # both fabrics hold the world (fabric_pricer checked): so the group fits
            raise UsageError(f"process group {c.group} of rank {c.rank} holds rank {ranks[-1]}, past the job's "
                             f"{self.world} ranks: the trace's metadata does not fit its distributedInfo")
        if assumed:
            self.assumed[c.group] = len(ranks)
        self.partial |= len(ranks) < self.world
        on_target = self._price(self.target, ranks, kind, nbytes)
        on_source = self._price(*self._source_fabric(ranks), kind, nbytes)
        ratio = on_target.seconds / on_source.seconds
        new = transfer_us * ratio
        row = self.rows.get((c.collective, kind, nbytes, ranks))
        if row is None:
            row = self.rows[(c.collective, kind, nbytes, ranks)] = {
                "collective": c.collective, "model_collective": kind, "bytes": nbytes, "group": c.group,
                "group_ranks": ranges(list(ranks)), "group_ranks_assumed": assumed, "count": 0,
                "recorded_us": 0.0, "predicted_us": 0.0, "ratio": ratio,
                "source_model": _priced(on_source), "target_model": _priced(on_target)}
        row["count"] += 1
        row["recorded_us"] += transfer_us
        row["predicted_us"] += new
        return new

    def _source_text(self) -> str:
        if self.source is not None:
            return fabric_text(self.source.describe())
        return f"one node of {self.source_board.id} with each group's GPUs (assumed: no --from-fabric-file)"

    def basis(self) -> dict[str, str]:
        return {"source": f"topology model: {self._source_text()}",
                "target": f"topology model: {fabric_text(self.target.describe())}"}

    def section(self) -> dict[str, Any]:
        return {
            "target": self.target.describe(),
            "source": None if self.source is None else self.source.describe(),
            "source_assumed": None if self.source is not None else self._source_text(),
            "world_size": self.world,
            "collectives": sorted(self.rows.values(), key=lambda r: (-r["recorded_us"], r["collective"])),
            "fallback": dict(sorted(self.fallback.items())),
        }

    def notes(self) -> list[str]:
        out = ["collectives re-priced by the topology model: each recorded transfer x model time on the target / "
               "model time on the source, so the trace calibrates the model (both model times are in the "
               "report)",
               "rank i runs on the fabric's GPU i, node by node"
               + (f" (the trace's {self.world} ranks use the first {self.world} of its {self.target.gpu_count})"
                  if self.target.gpu_count > self.world else "")]
        if self.source is None:
            out.append(f"the source is taken as {self._source_text()}; name the fabric the trace ran on with "
                       "--from-fabric-file")
        for group, k in sorted(self.assumed.items()):
            out.append(f"process group {group}: its ranks are not in the trace's metadata; taken as consecutive "
                       f"ranks, blocks of {k} (0-{k - 1}, {k}-{2 * k - 1}, ...)")
        if any(r["model_collective"] == "send-recv" for r in self.rows.values()):
            out.append("send/recv: the trace does not record the peer; priced as every rank of the group sending to "
                       "the next at once (nccl-tests' sendrecv)")
        if self.partial:
            out.append("each process group is priced alone: other groups' collectives at the same moment do not "
                       "share its links here")
        for why, n in sorted(self.fallback.items()):
            out.append(f"{n} collective(s) priced by the link-bandwidth ratio instead of the model: {why}")
        return out


def _priced(p: Priced) -> dict[str, Any]:
    return {"time_us": p.seconds * 1e6, "algorithm": p.algorithm, "protocol": p.protocol}
