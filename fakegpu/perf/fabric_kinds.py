"""The topology model's data (fabrics.yaml): scale-out networks, NVSwitch boards, link shares, protocols and hop
latencies, each figure with where it comes from. This module only reads the file and looks things up in it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from fakegpu.errors import CatalogError, UsageError
from fakegpu.profiles.matching import closest

DATA = Path(__file__).with_name("fabrics.yaml")
LINK_CLASSES = ("nvlink", "pcie", "network")
PROTOCOLS = ("ll", "ll128", "simple")


class UnknownFabric(UsageError):
    """A scale-out fabric name fabrics.yaml does not list; names the closest ones."""

    code = "unknown-fabric"

    def __init__(self, name: str, known: list[str]) -> None:
        near = closest(name, known)
        hint = f" Did you mean: {', '.join(near)}?" if near else ""
        super().__init__(f"unknown fabric {name!r}.{hint} (known: {', '.join(known)})")
        self.name = name


@dataclass(frozen=True)
class Network:
    """One kind of scale-out port: its line rate per direction and its switches' radix."""

    name: str
    bytes_s: float
    radix: int
    kind: str
    source: str


@dataclass(frozen=True)
class Protocol:
    name: str
    bandwidth: float  # share of the Simple protocol's bandwidth it keeps
    base_s: float
    step_s: dict[str, float]  # per link class


@dataclass(frozen=True)
class NodeSystem:
    """How a board's GPUs are joined inside a node."""

    domain: str  # nvswitch | nvlink-pairs | pcie
    nvls: bool
    system: str
    source: str


class FabricKinds:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.networks = {name: Network(name, float(n["gbit_s"]) * 1e9 / 8, int(n["radix"]), n["kind"], n["source"])
                         for name, n in doc["networks"].items()}
        self.shares = {k: float(v["value"]) for k, v in doc["shares"].items()}
        self.protocols = {p: Protocol(p, float(doc["protocols"][p]["bandwidth"]),
                                      float(doc["protocols"][p]["base_us"]) * 1e-6,
                                      {c: float(v) * 1e-6 for c, v in doc["protocols"][p]["step_us"].items()})
                          for p in PROTOCOLS}
        self.hops = {k: float(v["us"]) * 1e-6 for k, v in doc["hops"].items()}
        self.nvls_base_s = float(doc["nvls"]["base_us"]) * 1e-6
        self._boards: dict[str, NodeSystem] = {}
        for entry in doc["nvswitch_boards"]:
            for pid in entry["profiles"]:
                self._boards[pid] = NodeSystem("nvswitch", bool(entry["nvls"]), entry["system"], entry["source"])

    def network(self, name: str) -> Network:
        if name not in self.networks:
            raise UnknownFabric(name, sorted(self.networks))
        return self.networks[name]

    def node_system(self, profile_id: str, nvlink_links: int) -> NodeSystem:
        """The baseboard a board sits in: listed NVSwitch boards, else NVLink bridges in pairs, else PCIe."""
        if profile_id in self._boards:
            return self._boards[profile_id]
        if nvlink_links:
            return NodeSystem("nvlink-pairs", False, "NVLink bridge pairs",
                              "assumed: a board with NVLink that is not on an NVSwitch baseboard is bridged in pairs")
        return NodeSystem("pcie", False, "PCIe", "the catalog lists no NVLink for this board")

    def parameters(self) -> list[dict[str, Any]]:
        """Every calibrated figure with its provenance, for the report."""
        out = []
        for key, entry in self.doc["shares"].items():
            how = next(k for k in ("source", "fitted", "assumed") if k in entry)
            out.append({"key": f"shares.{key}", "value": entry["value"], "basis": how, "note": " ".join(
                entry[how].split())})
        out.append({"key": "protocols", "value": None, "basis": "source",
                    "note": " ".join(self.doc["protocols"]["source"].split())})
        out.append({"key": "nvls.base_us", "value": self.doc["nvls"]["base_us"], "basis": "assumed",
                    "note": " ".join(self.doc["nvls"]["assumed"].split())})
        for key, entry in self.doc["hops"].items():
            out.append({"key": f"hops.{key}", "value": entry["us"], "basis": "assumed", "note": entry["assumed"]})
        return out


@cache
def load() -> FabricKinds:
    import yaml

    try:
        doc = yaml.safe_load(DATA.read_text(encoding="utf-8"))
        return FabricKinds(doc)
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise CatalogError(f"{DATA} cannot be read: {exc}") from exc
