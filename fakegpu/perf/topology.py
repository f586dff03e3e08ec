"""A cluster's fabric as links with capacities and latencies, and routes over them.

A fabric is nodes of GPUs (their NVLink/NVSwitch or PCIe domain and bandwidth from the catalog), each node's NICs
(one rail per NIC) on a scale-out network of leaf switches joined by a spine. Every link is directed and has one
capacity per direction, so two flows sharing a link in the same direction split it.

    links, in index order:  GPU NVLink tx | NVLink rx | PCIe tx | PCIe rx | NIC tx | NIC rx | leaf up | leaf down

Routes are computed for arrays of flows at once (numpy), so a 1,024-GPU ring or an all-to-all's node pairs cost
one pass, not a Python loop per flow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fakegpu.errors import UsageError
from fakegpu.perf.fabric_kinds import FabricKinds, Network, NodeSystem, load
from fakegpu.profiles import Profile

# PCIe per-lane rate per direction (GB/s), after line encoding: gen3 8 GT/s 128b/130b, doubling per generation.
_PCIE_LANE_GB_S = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
CLASSES = ("nvlink", "pcie", "network")
NVLINK, PCIE, NETWORK = 0, 1, 2
MAX_HOPS = 8
MAX_GPUS = 65536


class FabricError(UsageError):
    """A fabric that cannot be built: it does not connect, or a node is described wrongly."""

    code = "invalid-fabric"


@dataclass(frozen=True)
class NodeSpec:
    """One node: `gpus` boards of `profile`, `nics` NICs (rails) for the scale-out network."""

    profile: Profile
    gpus: int
    nics: int
    name: str
    domain: str | None = None  # nvswitch | nvlink-pairs | pcie; None: from the board (fabrics.yaml)


@dataclass(frozen=True)
class FabricSpec:
    nodes: Sequence[NodeSpec]
    network: str | None  # a fabrics.yaml network; None only for one node
    rail_optimized: bool = True
    oversubscription: float = 1.0
    source: dict[str, Any] = field(default_factory=dict)


def generated(nodes: int, gpus_per_node: int, profile: Profile, network: str | None, *, rail_optimized: bool = True,
              nics_per_node: int | None = None, oversubscription: float = 1.0) -> FabricSpec:
    """`--nodes 4 --gpus-per-node 8 --profile h100 --fabric ib-ndr400`: identical nodes, one NIC per GPU."""
    if nodes < 1 or gpus_per_node < 1:
        raise FabricError("--nodes and --gpus-per-node must be at least 1")
    if nodes * gpus_per_node > MAX_GPUS:
        raise FabricError(f"{nodes * gpus_per_node} GPUs: the model takes at most {MAX_GPUS}")
    nics = gpus_per_node if nics_per_node is None else nics_per_node
    specs = [NodeSpec(profile, gpus_per_node, nics, f"node{i}") for i in range(nodes)]
    return FabricSpec(specs, network, rail_optimized, oversubscription,
                      {"kind": "generated", "nodes": nodes, "gpus_per_node": gpus_per_node, "profile": profile.id})


class Fabric:
    """The built fabric: per-GPU and per-link arrays, and the router."""

    def __init__(self, spec: FabricSpec, kinds: FabricKinds | None = None) -> None:
        self.spec = spec
        self.kinds = kinds or load()
        if not spec.nodes:
            raise FabricError("the fabric has no nodes")
        if not 1 <= spec.oversubscription < math.inf:  # NaN fails every comparison
            raise FabricError(f"oversubscription {spec.oversubscription} is not a finite number of 1 or more "
                              "(1 = non-blocking, 2 = 2:1)")
        self.network: Network | None = self.kinds.network(spec.network) if spec.network is not None else None
        self.systems: list[NodeSystem] = []
        for node in spec.nodes:
            if node.gpus < 1:
                raise FabricError(f"{node.name}: a node needs at least one GPU")
            if node.nics < 0:
                raise FabricError(f"{node.name}: nics cannot be negative")
            system = self.kinds.node_system(node.profile.id, int(node.profile.data["nvlink"].get("links", 0)))
            if node.domain is not None and node.domain != system.domain:
                if node.domain in ("nvswitch", "nvlink-pairs") and not node.profile.data["nvlink"].get("links"):
                    raise FabricError(f"{node.name}: {node.profile.id} has no NVLink, so no {node.domain} domain")
                # a domain the catalog does not give this board: no claim that its switches reduce
                system = NodeSystem(node.domain, False, node.domain, "given in the fabric file")
            self.systems.append(system)
        self.gpu_count = sum(n.gpus for n in spec.nodes)
        if self.gpu_count > MAX_GPUS:
            raise FabricError(f"{self.gpu_count} GPUs: the model takes at most {MAX_GPUS}")
        self._check_connected()
        self._build()

    # ------------------------------------------------------------------ shape

    def _check_connected(self) -> None:
        nodes = self.spec.nodes
        if len(nodes) == 1:
            return
        if self.network is None:
            cut = list(range(1, len(nodes)))
            why = "no scale-out fabric joins the nodes (give --fabric, or `fabric:` in the file)"
        else:
            cut = [i for i, n in enumerate(nodes) if n.nics == 0]
            why = "their node has no NIC"
        if not cut:
            return
        first = np.concatenate([[0], np.cumsum([n.gpus for n in nodes])])
        named = [f"{nodes[i].name} (GPUs {first[i]}-{first[i + 1] - 1})" for i in cut]
        shown = ", ".join(named[:8]) + (f" and {len(named) - 8} more nodes" if len(named) > 8 else "")
        rest = sorted(set(range(len(nodes))) - set(cut))
        target = f"{nodes[rest[0]].name}" if rest else "each other"
        raise FabricError(f"the fabric does not connect: {shown} cannot reach {target}: {why}")

    def _build(self) -> None:
        nodes = self.spec.nodes
        g = self.gpu_count
        self.node_of = np.repeat(np.arange(len(nodes)), [n.gpus for n in nodes])
        self.first_gpu = np.concatenate([[0], np.cumsum([n.gpus for n in nodes])[:-1]]).astype(np.int64)
        self.local = np.arange(g) - self.first_gpu[self.node_of]
        gpus_of = np.array([n.gpus for n in nodes])
        nics_of = np.array([n.nics for n in nodes])
        # GPU i of a node uses NIC i * nics // gpus: one NIC per GPU, or GPUs sharing NICs evenly
        self.rail = np.where(nics_of[self.node_of] > 0,
                             self.local * np.maximum(nics_of[self.node_of], 1) // gpus_of[self.node_of], -1)
        self.nic_base = np.concatenate([[0], np.cumsum(nics_of)[:-1]]).astype(np.int64)
        self.nic_count = int(nics_of.sum())
        self.domain = np.array([("nvswitch", "nvlink-pairs", "pcie").index(s.domain) for s in self.systems])
        # Leaves: a leaf gives radix * r / (r + 1) ports to nodes at oversubscription r; rail-optimized leaves
        # each serve one rail of many nodes, otherwise a node's NICs share one leaf.
        self.leaf_of_nic = np.zeros(self.nic_count, dtype=np.int64)
        self.leaf_ports = np.zeros(0)
        n_leaves = 0
        if self.network is not None and self.nic_count:
            r = self.spec.oversubscription
            down = max(1, int(self.network.radix * r / (r + 1)))
            nic_node = np.repeat(np.arange(len(nodes)), nics_of)
            nic_rail = np.arange(self.nic_count) - self.nic_base[nic_node]
            if self.spec.rail_optimized:
                groups = -(-len(nodes) // down)
                self.leaf_of_nic = nic_rail * groups + nic_node // down
            else:
                per_leaf = max(1, down // max(1, int(nics_of.max())))
                self.leaf_of_nic = nic_node // per_leaf
            n_leaves = int(self.leaf_of_nic.max()) + 1
            self.leaf_ports = np.bincount(self.leaf_of_nic, minlength=n_leaves).astype(float)
        self.n_leaves = n_leaves
        # link index bases
        self.b_nvl_tx, self.b_nvl_rx, self.b_pcie_tx, self.b_pcie_rx = 0, g, 2 * g, 3 * g
        self.b_nic_tx = 4 * g
        self.b_nic_rx = self.b_nic_tx + self.nic_count
        self.b_up = self.b_nic_rx + self.nic_count
        self.b_down = self.b_up + n_leaves
        self.link_count = self.b_down + n_leaves
        cap = np.zeros(self.link_count)
        cls = np.zeros(self.link_count, dtype=np.int64)
        nvl = np.array([float(n.profile.data["nvlink"].get("bandwidth_gb_s", 0)) / 2 * 1e9 for n in nodes])
        pcie = np.array([_pcie_bytes_s(n.profile) for n in nodes])
        cap[0:g] = cap[g:2 * g] = nvl[self.node_of]
        cap[2 * g:3 * g] = cap[3 * g:4 * g] = pcie[self.node_of]
        cls[2 * g:4 * g] = PCIE
        if self.network is not None:
            rate = self.network.bytes_s
            cap[self.b_nic_tx:self.b_up] = rate
            cap[self.b_up:self.b_down] = cap[self.b_down:] = self.leaf_ports * rate / self.spec.oversubscription
            cls[self.b_nic_tx:] = NETWORK
        self.capacity = cap
        self.link_class = cls

    # ------------------------------------------------------------------ facts

    @property
    def nodes(self) -> int:
        return len(self.spec.nodes)

    def gpus_in(self, node: int) -> np.ndarray:
        return np.arange(self.first_gpu[node], self.first_gpu[node] + self.spec.nodes[node].gpus)

    def nvls_node(self, node: int) -> bool:
        return self.systems[node].nvls and self.systems[node].domain == "nvswitch"

    def link_name(self, i: int) -> str:
        def gpu(k: int) -> str:
            return f"{self.spec.nodes[self.node_of[k]].name}/gpu{self.local[k]}"

        def nic(k: int) -> str:
            node = int(np.searchsorted(self.nic_base, k, side="right") - 1)
            return f"{self.spec.nodes[node].name}/nic{k - self.nic_base[node]}"

        g = self.gpu_count
        for base, label, make in ((self.b_nvl_tx, "NVLink out", gpu), (self.b_nvl_rx, "NVLink in", gpu),
                                  (self.b_pcie_tx, "PCIe out", gpu), (self.b_pcie_rx, "PCIe in", gpu)):
            if base <= i < base + g:
                return f"{make(i - base)} {label}"
        if i < self.b_nic_rx:
            return f"{nic(i - self.b_nic_tx)} send (rail {self.rail_of_nic(i - self.b_nic_tx)})"
        if i < self.b_up:
            return f"{nic(i - self.b_nic_rx)} receive (rail {self.rail_of_nic(i - self.b_nic_rx)})"
        if i < self.b_down:
            return f"leaf{i - self.b_up} uplink to spine"
        return f"leaf{i - self.b_down} downlink from spine"

    def rail_of_nic(self, k: int) -> int:
        node = int(np.searchsorted(self.nic_base, k, side="right") - 1)
        return int(k - self.nic_base[node])

    def describe(self) -> dict[str, Any]:
        nodes = self.spec.nodes
        groups: list[dict[str, Any]] = []
        for node, system in zip(nodes, self.systems, strict=True):
            key = {"profile": node.profile.id, "gpus": node.gpus, "nics": node.nics, "domain": system.domain,
                   "nvls": system.nvls and system.domain == "nvswitch", "system": system.system,
                   "nvlink_gb_s_per_direction": float(node.profile.data["nvlink"].get("bandwidth_gb_s", 0)) / 2,
                   "pcie_gb_s_per_direction": round(_pcie_bytes_s(node.profile) / 1e9, 2)}
            if groups and all(groups[-1][k] == v for k, v in key.items()):
                groups[-1]["count"] += 1
            else:
                groups.append({**key, "count": 1})
        return {
            "source": self.spec.source,
            "nodes": self.nodes,
            "gpus": self.gpu_count,
            "node_groups": groups,
            "network": None if self.network is None else {
                "fabric": self.network.name, "kind": self.network.kind,
                "gb_s_per_port": self.network.bytes_s / 1e9, "radix": self.network.radix,
                "rail_optimized": self.spec.rail_optimized, "oversubscription": self.spec.oversubscription,
                "leaves": self.n_leaves, "source": self.network.source},
            "links": self.link_count,
        }

    # ------------------------------------------------------------------ routes

    def route(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Paths of flows src[i] -> dst[i] (GPU indices): the links each crosses (F x MAX_HOPS, -1 padded), each
        path's latency (s) and its slowest kind of hop (0 NVLink, 1 PCIe, 2 network)."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        f = len(src)
        links = np.full((f, MAX_HOPS), -1, dtype=np.int64)
        lat = np.zeros(f)
        cls = np.zeros(f, dtype=np.int64)
        hop = self.kinds.hops
        ns, nd = self.node_of[src], self.node_of[dst]
        same = ns == nd
        dom = self.domain[ns]
        pair = (dom == 1) & (self.local[src] // 2 == self.local[dst] // 2)
        over_nvl = same & ((dom == 0) | pair)
        over_pcie = same & ~over_nvl
        links[over_nvl, 0] = self.b_nvl_tx + src[over_nvl]
        links[over_nvl, 1] = self.b_nvl_rx + dst[over_nvl]
        lat[over_nvl & (dom == 0)] += hop["nvswitch"]
        links[over_pcie, 0] = self.b_pcie_tx + src[over_pcie]
        links[over_pcie, 1] = self.b_pcie_rx + dst[over_pcie]
        lat[over_pcie] += hop["pcie_switch"]
        cls[over_pcie] = PCIE
        inter = ~same
        if inter.any():
            s, d = src[inter], dst[inter]
            rs, rd = self.rail[s], self.rail[d]
            out_rail = rs.copy()
            hops_l = np.full((len(s), MAX_HOPS), -1, dtype=np.int64)
            hl = np.zeros(len(s))
            # PXN: on a rail-optimized fabric NCCL first moves data over NVLink to the GPU on the destination's
            # rail, so every network path stays on one rail and off the spine where it can.
            relay = (self.spec.rail_optimized & (rs != rd) & (self.domain[self.node_of[s]] == 0)
                     & (rd < self._nics(self.node_of[s])))
            if relay.any():
                hops_l[relay, 0] = self.b_nvl_tx + s[relay]
                via = self._gpu_on_rail(self.node_of[s[relay]], rd[relay])
                hops_l[relay, 1] = self.b_nvl_rx + via
                hl[relay] += hop["nvswitch"]
                out_rail[relay] = rd[relay]
            nic_s = self.nic_base[self.node_of[s]] + out_rail
            nic_d = self.nic_base[self.node_of[d]] + rd
            hops_l[:, 2] = self.b_nic_tx + nic_s
            hops_l[:, 3] = self.b_nic_rx + nic_d
            hl += 2 * hop["nic"] + hop["leaf"]
            leaf_s, leaf_d = self.leaf_of_nic[nic_s], self.leaf_of_nic[nic_d]
            cross = leaf_s != leaf_d
            hops_l[cross, 4] = self.b_up + leaf_s[cross]
            hops_l[cross, 5] = self.b_down + leaf_d[cross]
            hl[cross] += hop["spine"] + hop["leaf"]
            links[inter] = hops_l
            lat[inter] = hl
            cls[inter] = NETWORK
        return links, lat, cls

    def _nics(self, node: np.ndarray) -> np.ndarray:
        return np.array([n.nics for n in self.spec.nodes])[node]

    def _gpu_on_rail(self, node: np.ndarray, rail: np.ndarray) -> np.ndarray:
        """The first GPU of each node whose NIC is `rail`."""
        gpus = np.array([n.gpus for n in self.spec.nodes])[node]
        nics = np.maximum(self._nics(node), 1)
        local = -(-rail * gpus // nics)  # smallest local index i with i * nics // gpus == rail
        return self.first_gpu[node] + local

    def loads(self, src: np.ndarray, dst: np.ndarray, weight: np.ndarray | float) -> tuple[np.ndarray, float, int]:
        """Per-link load (bytes per byte of the collective's size) of flows carrying `weight` each, the longest
        path's latency, and the slowest kind of hop any flow crosses."""
        links, lat, cls = self.route(src, dst)
        w = np.broadcast_to(np.asarray(weight, dtype=float), (len(links),))
        load = np.zeros(self.link_count)
        valid = links >= 0
        np.add.at(load, links[valid], np.broadcast_to(w[:, None], links.shape)[valid])
        return load, float(lat.max(initial=0.0)), int(cls.max(initial=0))


def _pcie_bytes_s(profile: Profile) -> float:
    pci = profile.data.get("pci", {})
    return _PCIE_LANE_GB_S.get(int(pci.get("generation", 4)), 1.969) * int(pci.get("link_width", 16)) * 1e9
