"""The fabric a command was asked about: a fabric file, or one generated from `--nodes --gpus-per-node --profile
--fabric --rail-optimized --nics-per-node --oversubscription`. simulate-topology and replay-trace's what-if read
their options into FabricOptions and build through it, so both take the same options with the same defaults and
the same errors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakegpu.errors import UsageError
from fakegpu.perf.topology import Fabric, FabricSpec, generated
from fakegpu.profiles import Profile


@dataclass(frozen=True)
class FabricOptions:
    """The options as given (None: not given)."""

    fabric_file: Path | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    profile: str | None = None
    fabric: str | None = None
    rail_optimized: bool | None = None
    nics_per_node: int | None = None
    oversubscription: float | None = None

    def generator_options(self) -> list[str]:
        """The generator's options that were given, by their flags."""
        return [flag for flag, value in (("--profile", self.profile), ("--fabric", self.fabric),
                                         ("--nics-per-node", self.nics_per_node), ("--nodes", self.nodes),
                                         ("--gpus-per-node", self.gpus_per_node),
                                         ("--rail-optimized", self.rail_optimized),
                                         ("--oversubscription", self.oversubscription)) if value is not None]

    def given(self) -> bool:
        """Whether any fabric option was given at all."""
        return self.fabric_file is not None or bool(self.generator_options())

    def spec(self, board: Profile | None = None) -> FabricSpec:
        """The fabric described: the file's, or a generated one of `--profile` (else `board`) with
        simulate-topology's defaults (1 node, 8 GPUs, rail-optimized, one NIC per GPU, non-blocking)."""
        from fakegpu.perf.fabric_file import load as load_fabric_file
        from fakegpu.profiles import load_catalog

        if self.fabric_file is not None:
            given = self.generator_options()
            if given:
                raise UsageError(f"{', '.join(given)}: the fabric file describes the fabric; give one or the other")
            return load_fabric_file(self.fabric_file)
        if self.profile is not None:
            board = load_catalog().get(self.profile)
        if board is None:
            raise UsageError("name the board with --profile (or give --fabric-file)")
        return generated(1 if self.nodes is None else self.nodes,
                         8 if self.gpus_per_node is None else self.gpus_per_node, board, self.fabric,
                         rail_optimized=True if self.rail_optimized is None else self.rail_optimized,
                         nics_per_node=self.nics_per_node,
                         oversubscription=1.0 if self.oversubscription is None else self.oversubscription)

    def build(self, board: Profile | None = None) -> Fabric:
        return Fabric(self.spec(board))


def fabric_text(desc: dict[str, Any]) -> str:
    """One line for a fabric's describe(): its node groups and, across nodes, its network."""
    parts = [f"{g['count']} x {g['gpus']} {g['profile']} ({g['system']}" + (", NVLS" if g["nvls"] else "")
             + f", {g['nics']} NICs)" for g in desc["node_groups"]]
    net = desc["network"]
    where = "" if net is None else (f"; {net['fabric']} {net['gb_s_per_port']:g} GB/s per port, "
                                    f"{'rail-optimized' if net['rail_optimized'] else 'one leaf per node group'}, "
                                    f"{net['leaves']} leaves, oversubscription {net['oversubscription']:g}:1")
    return " + ".join(parts) + where
