"""Collectives on a fabric: each algorithm as the flows it puts on the links, priced in closed form per size.

An algorithm becomes a Plan: the load it puts on every link (bytes crossing that link per byte of the collective's
size, all channels and phases together) and the hops its first chunk must travel before the pipeline is full
(each with the protocol's cost for that kind of hop plus the path's own latency, summed hop by hop along the
path: NVSwitch, NIC, leaf, spine). A ring's chunk travels the ring: its NVLink hops cost NVLink latency and only
its few network hops cost network latency, not every step the slowest. For a size S

    time(S) = base + sum over hops (protocol hop cost + path latency) + S * max over links (load / bandwidth)

where a link's bandwidth is its line rate per direction times the share NCCL reaches on that kind of link, times
the protocol's share. Flows that share a link add their loads on it, so two flows on one link each get half. The
link that sets the max is the critical link. Plans do not depend on S, so a sweep prices every size at once.

busbw follows nccl-tests (doc/PERFORMANCE.md): algbw x 2(n-1)/n for all-reduce, x (n-1)/n for all-gather,
reduce-scatter and all-to-all, x 1 for broadcast, reduce and send/recv.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fakegpu.errors import UsageError
from fakegpu.perf.fabric_kinds import PROTOCOLS
from fakegpu.perf.topology import CLASSES, NETWORK, NVLINK, Fabric

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "broadcast", "reduce", "all-to-all", "send-recv")
ALGORITHMS = ("ring", "tree", "nvls", "hierarchical", "p2p")
# Which algorithms can run each collective (NCCL runs tree, NVLS and the two-level scheme for all-reduce only;
# all-to-all and send/recv are point-to-point).
CAN_RUN = {
    "all-reduce": ("ring", "tree", "nvls", "hierarchical"),
    "all-gather": ("ring",), "reduce-scatter": ("ring",), "broadcast": ("ring",), "reduce": ("ring",),
    "all-to-all": ("p2p",), "send-recv": ("p2p",),
}
_ALL_PAIRS_BLOCK = 1 << 18  # flows routed at once for all-to-all: bounds memory at 1,024+ GPUs
MAX_ALL_TO_ALL = 4096  # all-to-all routes every pair: 16 M flows here take seconds, 65,536 GPUs would take hours


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' busbw / algbw for `collective` on n ranks."""
    if n <= 1:
        return 0.0 if collective not in ("broadcast", "reduce", "send-recv") else 1.0
    if collective == "all-reduce":
        return 2 * (n - 1) / n
    if collective in ("all-gather", "reduce-scatter", "all-to-all"):
        return (n - 1) / n
    return 1.0


@dataclass
class Plan:
    algorithm: str
    load: np.ndarray  # bytes per link per byte of size, moved by the GPUs' copies (NCCL's Simple share)
    steps: list[tuple[float, float, int]]  # (hops, mean path latency s, hop class)
    nvls_load: np.ndarray | None = None  # bytes per link per byte moved by the NVSwitch (at the NVLS share)
    nvls: bool = False  # the whole collective is NVLS: one fixed cost in place of protocol steps, Simple only
    notes: list[str] = field(default_factory=list)

    def total_load(self) -> np.ndarray:
        """Bytes each link carries per byte of size, the GPUs' copies and the switch's together."""
        return self.load if self.nvls_load is None else self.load + self.nvls_load

    def seconds_per_byte(self, fabric: Fabric) -> tuple[float, np.ndarray]:
        """S-coefficient at the Simple protocol, and each link's share of it (1.0 for the critical link)."""
        shares = fabric.kinds.shares
        eff = np.array([shares["nvlink"], shares["pcie"], shares["network"]])
        bw = fabric.capacity * eff[fabric.link_class]
        total = self.load.copy()
        if self.nvls_load is not None:
            # the switch's traffic moves at the NVLS share: count it in the copies' units
            total += self.nvls_load * shares["nvlink"] / shares["nvls"]
        with np.errstate(divide="ignore", invalid="ignore"):
            per = np.where(total > 0, total / bw, 0.0)
        if np.isinf(per).any():  # a load on a link of no capacity: a route the fabric lacks
            raise UsageError(f"{self.algorithm}: a flow crosses a link of no bandwidth "
                             f"({fabric.link_name(int(np.argmax(np.isinf(per))))})")
        worst = float(per.max(initial=0.0))
        return worst, per / worst if worst else per

    def times(self, fabric: Fabric, sizes: np.ndarray, protocol: str) -> np.ndarray:
        kinds = fabric.kinds
        per_byte, _ = self.seconds_per_byte(fabric)
        if self.nvls:
            lat = kinds.nvls_base_s + sum(c * lat for c, lat, _ in self.steps)
            return lat + sizes * per_byte
        p = kinds.protocols[protocol]
        lat = p.base_s + sum(c * (p.step_s[CLASSES[cls]] + path) for c, path, cls in self.steps)
        if self.nvls_load is not None:
            lat += kinds.nvls_base_s
        return lat + sizes * per_byte / p.bandwidth


# ---------------------------------------------------------------------- orders


def ring_order(fabric: Fabric, channel: int = 0) -> np.ndarray:
    """One ring through every GPU, topology-aware: a node's GPUs contiguous, and rails aligned: channel c enters
    node k at local GPU (c - k) mod g and leaves it from the GPU just before, which is the GPU node k+1 is entered
    at, so each network hop joins two NICs of the same rail."""
    parts = []
    for node in range(fabric.nodes):
        gpus = fabric.gpus_in(node)
        start = (channel - node) % len(gpus)
        parts.append(np.roll(gpus, -start))
    return np.concatenate(parts)


def channels(fabric: Fabric) -> int:
    """Rings NCCL spreads a collective over: one per rail across nodes (each rail's NIC then carries one ring's
    exit per node); within one node every ring loads the links the same, so one stands for all."""
    if fabric.nodes == 1:
        return 1
    return max(1, min(n.nics for n in fabric.spec.nodes))


def _edges(order: np.ndarray, wrap: bool = True) -> tuple[np.ndarray, np.ndarray]:
    nxt = np.roll(order, -1)
    return (order, nxt) if wrap else (order[:-1], order[1:])


# ---------------------------------------------------------------------- plans


def plan(fabric: Fabric, collective: str, algorithm: str, root: int = 0) -> Plan:
    """How `algorithm` runs `collective` on the whole fabric; UsageError when it cannot."""
    n = fabric.gpu_count
    if algorithm not in CAN_RUN[collective]:
        raise UsageError(f"{algorithm} does not run {collective} (it runs with: {', '.join(CAN_RUN[collective])})")
    if algorithm == "ring":
        return _ring(fabric, collective, root)
    if algorithm == "tree":
        return _tree(fabric)
    if algorithm == "nvls":
        if fabric.nodes != 1 or not fabric.nvls_node(0):
            raise UsageError("nvls needs every GPU in one NVSwitch node whose switches reduce (NVLink SHARP: "
                             "H100/H200/B200-class HGX boards); use hierarchical across nodes")
        return _nvls(fabric)
    if algorithm == "hierarchical":
        return _hierarchical(fabric)
    if n < 2:
        raise UsageError(f"{collective} needs at least 2 GPUs")
    return _p2p(fabric, collective)


def _ring(fabric: Fabric, collective: str, root: int) -> Plan:
    n = fabric.gpu_count
    c = channels(fabric)
    if collective == "all-reduce":
        per = 2 * (n - 1) / n
    elif collective in ("all-gather", "reduce-scatter"):
        per = (n - 1) / n
    else:  # broadcast, reduce: a pipelined chain from (or to) the root
        per = 1.0
    src_l, dst_l = [], []
    for ch in range(c):
        order = ring_order(fabric, ch)
        if collective in ("broadcast", "reduce"):
            order = np.roll(order, -int(np.nonzero(order == root % n)[0][0]))
            s, d = _edges(order, wrap=False)
            if collective == "reduce":
                s, d = d[::-1], s[::-1]
        else:
            s, d = _edges(order)
        src_l.append(s)
        dst_l.append(d)
    load, _, _ = fabric.loads(np.concatenate(src_l), np.concatenate(dst_l), per / c)
    # a ring's chunk goes round once per (n-1)/n of the per-edge traffic; a chain's once
    return Plan("ring", load, _hop_steps(fabric, src_l[0], dst_l[0], per if len(src_l[0]) == n else 1.0))


def _hop_steps(fabric: Fabric, src: np.ndarray, dst: np.ndarray, rounds: float) -> list[tuple[float, float, int]]:
    """The hops of one traversal of these edges, `rounds` times, grouped by kind with their mean path latency."""
    _, lat, cls = fabric.route(src, dst)
    return [(rounds * int((cls == c).sum()), float(lat[cls == c].mean()), int(c)) for c in np.unique(cls)]


def _binary_parents(count: int, mirrored: bool) -> np.ndarray:
    """Parent of each of `count` nodes in a balanced binary tree (heap order), -1 for the root; the mirrored tree
    numbers nodes from the other end, so most leaves of one are inner nodes of the other (NCCL's double tree)."""
    k = np.arange(count)
    idx = count - 1 - k if mirrored else k
    parent_idx = (idx - 1) // 2
    parent = np.where(idx > 0, count - 1 - parent_idx if mirrored else parent_idx, -1)
    return parent


def _tree(fabric: Fabric) -> Plan:
    """NCCL's all-reduce tree: a chain through each node's GPUs, and two binary trees across nodes, each taking
    half the data, reduced up and broadcast down."""
    c = channels(fabric)
    src_l, dst_l = [], []
    for ch in range(c):
        heads = []
        for node in range(fabric.nodes):
            gpus = fabric.gpus_in(node)
            chain = np.roll(gpus, -(ch % len(gpus)))
            heads.append(chain[0])
            # up the chain toward the head, and back down, once per tree
            for _ in range(2):
                src_l += [chain[1:], chain[:-1]]
                dst_l += [chain[:-1], chain[1:]]
        s, d = _tree_flows(np.array(heads))
        src_l += s
        dst_l += d
    src, dst = np.concatenate(src_l), np.concatenate(dst_l)
    load, lat_all, _ = fabric.loads(src, dst, 1 / (2 * c))
    intra = fabric.node_of[src] == fabric.node_of[dst]
    _, lat_in, cls_in = fabric.loads(src[intra], dst[intra], 0.0) if intra.any() else (None, 0.0, NVLINK)
    g = max(n.gpus for n in fabric.spec.nodes)
    depth = int(np.ceil(np.log2(fabric.nodes + 1))) if fabric.nodes > 1 else 0
    steps = [(2 * (g - 1), lat_in, cls_in)]
    if depth:
        steps.append((2 * depth, lat_all, NETWORK))
    return Plan("tree", load, steps)


def _nvls_load(fabric: Fabric, gpus: np.ndarray, weight: float, load: np.ndarray) -> None:
    # Each GPU's port carries (1 + 1/n) S each way: the switch reads every GPU's data and returns each reduced
    # slice to its owner (S out, S/n in), then the owner multicasts it to all (S/n out, S in).
    load[fabric.b_nvl_tx + gpus] += weight
    load[fabric.b_nvl_rx + gpus] += weight


def _nvls(fabric: Fabric) -> Plan:
    n = fabric.gpu_count
    load = np.zeros(fabric.link_count)
    _nvls_load(fabric, np.arange(n), 1 + 1 / n, load)
    # reduce and multicast each cross the switch: two hops
    return Plan("nvls", np.zeros(fabric.link_count), [(2, fabric.kinds.hops["nvswitch"], NVLINK)], load, nvls=True)


def _tree_flows(heads: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Flows of NCCL's double binary tree over `heads` (one GPU per node): up and down every edge of both
    trees."""
    src, dst = [], []
    for mirrored in (False, True):
        parent = _binary_parents(len(heads), mirrored)
        child = np.nonzero(parent >= 0)[0]
        src += [heads[child], heads[parent[child]]]
        dst += [heads[parent[child]], heads[child]]
    return src, dst


def _hierarchical(fabric: Fabric) -> Plan:
    """Reduce-scatter inside each node, all-reduce each GPU's 1/g share across nodes over its own rail (a double
    binary tree of the nodes' GPUs of that rail), all-gather inside each node. The phases stream through different
    links and are pipelined, as NCCL's NVLS-tree is: on NVLS nodes the intra-node phases are the switch's."""
    sizes = {n.gpus for n in fabric.spec.nodes}
    if fabric.nodes < 2 or len(sizes) != 1:
        raise UsageError("hierarchical needs two or more nodes with the same number of GPUs")
    g, nodes = sizes.pop(), fabric.nodes
    load = np.zeros(fabric.link_count)
    nvls_load = None
    steps: list[tuple[float, float, int]] = []
    notes = []
    if all(fabric.nvls_node(k) for k in range(nodes)):
        nvls_load = np.zeros(fabric.link_count)
        _nvls_load(fabric, np.arange(fabric.gpu_count), 1 + 1 / g, nvls_load)
        steps.append((2, fabric.kinds.hops["nvswitch"], NVLINK))
        notes.append("inside each node by NVLS (NVLink SHARP), across nodes by trees on each rail")
    elif g > 1:
        src = np.concatenate([fabric.gpus_in(k) for k in range(nodes)])
        dst = np.concatenate([np.roll(fabric.gpus_in(k), -1) for k in range(nodes)])
        intra, _, _ = fabric.loads(src, dst, 2 * (g - 1) / g)  # reduce-scatter plus all-gather
        load += intra
        steps += _hop_steps(fabric, fabric.gpus_in(0), np.roll(fabric.gpus_in(0), -1), 2 * (g - 1) / g)
        notes.append("inside each node by rings, across nodes by trees on each rail; NCCL itself runs this "
                     "two-level scheme only on NVLS nodes (NVLS-tree), so auto leaves it out elsewhere")
    rails = np.stack([fabric.gpus_in(k) for k in range(nodes)], axis=1)  # g x nodes: one row per rail
    src_l: list[np.ndarray] = []
    dst_l: list[np.ndarray] = []
    for row in rails:
        s, d = _tree_flows(row)
        src_l += s
        dst_l += d
    inter, lat, _ = fabric.loads(np.concatenate(src_l), np.concatenate(dst_l), 1 / (2 * g))
    load += inter
    depth = int(np.ceil(np.log2(nodes + 1)))
    steps.append((2 * depth, lat, NETWORK))
    return Plan("hierarchical", load, steps, nvls_load, notes=notes)


def _p2p(fabric: Fabric, collective: str) -> Plan:
    n = fabric.gpu_count
    if collective == "send-recv":  # as nccl-tests' sendrecv: each rank sends to the next, receives from the last
        src = np.arange(n)
        load, lat, cls = fabric.loads(src, (src + 1) % n, 1.0)
        return Plan("p2p", load, [(1, lat, cls)])
    if n > MAX_ALL_TO_ALL:
        raise UsageError(f"all-to-all routes every pair of ranks; the model takes at most {MAX_ALL_TO_ALL} GPUs "
                         f"(this fabric has {n})")
    load = np.zeros(fabric.link_count)
    lat, cls = 0.0, NVLINK
    pairs = n * (n - 1)
    for start in range(0, pairs, _ALL_PAIRS_BLOCK):
        k = np.arange(start, min(pairs, start + _ALL_PAIRS_BLOCK))
        src = k // (n - 1)
        off = k % (n - 1) + 1
        part, part_lat, part_cls = fabric.loads(src, (src + off) % n, 1 / n)
        load += part
        lat, cls = max(lat, part_lat), max(cls, part_cls)
    # NCCL posts every peer's send and receive at once; the step waits for the longest path
    return Plan("p2p", load, [(1, lat, cls)])


def candidates(fabric: Fabric, collective: str) -> list[str]:
    """The algorithms that can run `collective` on this fabric, as NCCL would consider them."""
    out = []
    for algo in CAN_RUN[collective]:
        # NCCL crosses nodes with trees; inside one node its tuner takes ring (or NVLS) for every size, and a
        # chain there would claim both directions of each link, which NCCL's rings leave to other channels
        if algo == "tree" and fabric.nodes == 1:
            continue
        if algo == "nvls" and not (fabric.nodes == 1 and fabric.nvls_node(0) and fabric.gpu_count > 1):
            continue
        if algo == "hierarchical" and (fabric.nodes < 2 or len({n.gpus for n in fabric.spec.nodes}) != 1
                                       or not all(fabric.nvls_node(k) for k in range(fabric.nodes))):
            continue
        out.append(algo)
    return out


def fastest(fabric: Fabric, plans: Sequence[Plan], sizes: np.ndarray,
            protocol: str | None = None) -> tuple[np.ndarray, list[tuple[str, str]]]:
    """Per size, the time of the fastest plan and protocol, and which (algorithm, protocol) that is: NCCL's tuner
    choosing from its cost model, with this model's costs. The first listed wins a tie."""
    options: list[tuple[str, str]] = []
    table = []
    for p in plans:
        for proto in protocols_for(p, protocol):
            options.append((p.algorithm, proto))
            table.append(p.times(fabric, sizes, proto))
    times = np.vstack(table)
    best = times.argmin(axis=0)
    return times[best, np.arange(len(sizes))], [options[b] for b in best]


def protocols_for(plan_: Plan, protocol: str | None) -> tuple[str, ...]:
    if plan_.nvls:
        return ("simple",)
    return PROTOCOLS if protocol is None else (protocol,)


# ---------------------------------------------------------------------- communicator groups


def group_plans(fabric: Fabric, groups: Sequence[np.ndarray], collective: str) -> list[Plan]:
    """`collective` run at once by every group of `groups` (each an array of GPU indices, e.g. every tensor-
    parallel group of a job), as rings in GPU order (a node's GPUs together): the groups' flows share links, so
    groups that meet on a NIC or an NVLink port slow each other. Broadcast and reduce run a chain along the ring
    from (to) the group's first GPU; all-to-all and send-recv go peer to peer; for send-recv each group is a chain
    of stages, each sending to the next. One group that is a whole NVLS node
    also gets NVLS for all-reduce; the caller prices each plan per size and keeps the fastest."""
    k = len(groups[0])
    if any(len(g) != k for g in groups) or k < 2:
        raise UsageError("communicator groups must all have the same size, at least 2")
    arr = np.stack([np.sort(np.asarray(g)) for g in groups])
    if len(arr) == 1 and k == fabric.gpu_count and collective != "send-recv":
        # the whole fabric: every algorithm NCCL would consider for it
        return [plan(fabric, collective, a) for a in candidates(fabric, collective)]
    if collective in ("all-reduce", "all-gather", "reduce-scatter", "broadcast", "reduce"):
        chain = collective in ("broadcast", "reduce")  # a pipelined chain from (or to) the group's first GPU
        per = 1.0 if chain else 2 * (k - 1) / k if collective == "all-reduce" else (k - 1) / k
        src_l, dst_l, c = [], [], 1
        for g in arr:
            orders = _group_rings(fabric, g)
            c = len(orders)
            for order in orders:
                s, d = (order[:-1], order[1:]) if chain else (order, np.roll(order, -1))
                if collective == "reduce":
                    s, d = d[::-1], s[::-1]
                src_l.append(s)
                dst_l.append(d)
        steps = _hop_steps(fabric, src_l[0], dst_l[0], 1.0 if chain else per)
        src, dst = np.concatenate(src_l), np.concatenate(dst_l)
        per /= c
    elif collective == "all-to-all":
        if k > MAX_ALL_TO_ALL:
            raise UsageError(f"all-to-all routes every pair of ranks; the model takes at most {MAX_ALL_TO_ALL} "
                             f"GPUs in a group (this one has {k})")
        per = 1 / k
        a, b = np.nonzero(~np.eye(k, dtype=bool))
        src, dst = arr[:, a].ravel(), arr[:, b].ravel()
        _, lat, cls = fabric.loads(src, dst, 0.0)
        steps = [(1, lat, cls)]  # every peer at once: the step waits for the longest path
    elif collective == "send-recv":
        arr = np.stack([np.asarray(g) for g in groups])  # stage order as given
        per = 1.0
        src, dst = arr[:, :-1].ravel(), arr[:, 1:].ravel()
        _, lat, cls = fabric.loads(src, dst, 0.0)
        steps = [(1, lat, cls)]
    else:
        raise UsageError(f"{collective} is not priced for communicator groups")
    load, _, _ = fabric.loads(src, dst, per)
    plan_ = Plan("p2p" if collective in ("send-recv", "all-to-all") else "ring", load, steps)
    plans = [plan_]
    node = int(fabric.node_of[arr[0, 0]])
    if (collective == "all-reduce" and fabric.nvls_node(node)
            and all(len(set(fabric.node_of[g])) == 1 and len(g) == len(fabric.gpus_in(int(fabric.node_of[g[0]])))
                    for g in arr)):
        load_nvls = np.zeros(fabric.link_count)
        _nvls_load(fabric, arr.ravel(), 1 + 1 / k, load_nvls)
        plans.append(Plan("nvls", np.zeros(fabric.link_count), [(2, fabric.kinds.hops["nvswitch"], NVLINK)],
                          load_nvls, nvls=True))
    return plans


def _group_rings(fabric: Fabric, group: np.ndarray) -> list[np.ndarray]:
    """Rings through one sorted group: a group made of whole nodes gets one ring per rail, each rotated as
    ring_order rotates them (rails aligned); any other group one ring in GPU order."""
    nodes = np.unique(fabric.node_of[group])
    whole = len(nodes) > 1 and all(
        np.array_equal(group[fabric.node_of[group] == k], fabric.gpus_in(int(k))) for k in nodes)
    if not whole:
        return [group]
    c = max(1, min(fabric.spec.nodes[int(k)].nics for k in nodes))
    return [np.concatenate([np.roll(fabric.gpus_in(int(k)), -((ch - i) % len(fabric.gpus_in(int(k)))))
                            for i, k in enumerate(nodes)]) for ch in range(c)]
