"""The topology model: units from the catalog, routes and their latencies, contention on shared links, the ring
order, which boards get NVLS, nccl-tests' busbw definitions, and the automatic choice per size."""

from __future__ import annotations

import numpy as np
import pytest

from fakegpu.errors import UsageError
from fakegpu.perf import collectives
from fakegpu.perf.collectives import Plan, busbw_factor, ring_order
from fakegpu.perf.fabric_kinds import UnknownFabric, load
from fakegpu.perf.simulate import Request, parse_sizes, simulate
from fakegpu.perf.topology import FabricError
from tests.perf.topology_helpers import busbw, fabric

US = 1e-6


def test_nvlink_is_taken_per_direction_in_bytes():
    f = fabric(1, 8, "h100")
    # the catalog's 900 GB/s is both directions together: one direction of an H100's NVLink port moves 450 GB/s
    assert f.capacity[f.b_nvl_tx] == pytest.approx(450e9)
    assert f.capacity[f.b_nvl_rx + 7] == pytest.approx(450e9)
    g = fabric(2, 8, "h100", "ib-ndr400")
    assert g.capacity[g.b_nic_tx] == pytest.approx(50e9)  # 400 Gbit/s
    assert fabric(1, 8, "a100").capacity[0] == pytest.approx(300e9)
    l4 = fabric(1, 2, "l4")  # PCIe gen 4 x16, no NVLink
    assert l4.capacity[l4.b_pcie_tx] == pytest.approx(16 * 1.969e9)
    assert l4.capacity[l4.b_nvl_tx] == 0


@pytest.mark.parametrize("collective,n,factor", [
    ("all-reduce", 8, 2 * 7 / 8), ("all-gather", 8, 7 / 8), ("reduce-scatter", 16, 15 / 16),
    ("broadcast", 8, 1.0), ("reduce", 8, 1.0), ("all-to-all", 8, 7 / 8), ("send-recv", 8, 1.0)])
def test_busbw_is_nccl_tests_definition(collective, n, factor):
    assert busbw_factor(collective, n) == pytest.approx(factor)
    report = simulate(fabric(1, n, "h100"), Request(collective=collective, sizes=parse_sizes("1MiB:64MiB")))
    for row in report["rows"]:
        assert row["busbw_gb_s"] == pytest.approx(row["algbw_gb_s"] * factor)
        assert row["algbw_gb_s"] == pytest.approx(row["size"] / (row["time_us"] * 1e-6) / 1e9)


def test_sizes_and_counts_as_nccl_tests_rounds_them():
    report = simulate(fabric(1, 8), Request(collective="all-gather", dtype="float", sizes=parse_sizes("100B")))
    [row] = report["rows"]
    assert row["size"] == 96 and row["count"] == 24  # whole floats per rank of 8
    assert parse_sizes("8B:8GiB") == [8 << k for k in range(31)]
    assert parse_sizes("1KiB:1MiB", 4) == [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20]


def test_ring_order_keeps_nodes_contiguous_and_rails_aligned():
    f = fabric(4, 8, "h100", "ib-ndr400")
    for ch in range(8):
        order = ring_order(f, ch)
        assert sorted(order) == list(range(32))
        nodes = f.node_of[order]
        assert (np.diff(nodes) >= 0).all()  # each node's GPUs in one run
        # every hop between nodes joins GPUs of the same local index, so of the same rail
        boundary = np.nonzero(np.diff(nodes))[0]
        assert (f.rail[order[boundary]] == f.rail[order[boundary + 1]]).all()
        assert order[0] == ch  # channel c enters node 0 at GPU c: the channels spread over all rails


def test_topology_aware_ring_beats_a_rank_order_that_interleaves_nodes():
    f = fabric(2, 8, "h100", "ib-ndr400")
    aware = collectives.plan(f, "all-reduce", "ring")
    interleaved = np.array([k // 2 + 8 * (k % 2) for k in range(16)])  # node0 gpu0, node1 gpu0, node0 gpu1, ...
    src, dst = interleaved, np.roll(interleaved, -1)
    load, lat, cls = f.loads(src, dst, 2 * 15 / 16)
    naive = Plan("ring", load, [(30, lat, cls)])
    assert naive.seconds_per_byte(f)[0] > 4 * aware.seconds_per_byte(f)[0]


def test_two_flows_on_one_link_halve_it():
    # two GPUs behind one NIC each side: one flow gets the whole NIC, two share it
    f = fabric(2, 2, "h100", "ib-ndr400", nics_per_node=1)
    one, _, _ = f.loads(np.array([0]), np.array([2]), 1.0)
    two, _, _ = f.loads(np.array([0, 1]), np.array([2, 3]), 1.0)
    nic = f.b_nic_tx  # node0's only NIC, sending
    assert one[nic] == 1.0 and two[nic] == 2.0
    t_one = Plan("x", one, []).seconds_per_byte(f)[0]
    t_two = Plan("x", two, []).seconds_per_byte(f)[0]
    assert t_two == pytest.approx(2 * t_one)
    assert t_one == pytest.approx(1 / (50e9 * load().shares["network"]))
    # and flows in opposite directions do not contend: each direction is its own link
    both, _, _ = f.loads(np.array([0, 2]), np.array([2, 0]), 1.0)
    assert Plan("x", both, []).seconds_per_byte(f)[0] == pytest.approx(t_one)


def test_latency_is_summed_along_each_path_hop_by_hop():
    hops = load().hops
    # ib-hdr200 leaves give 20 ports to nodes: nodes 0 and 19 share a leaf, node 20 is on the next
    f = fabric(21, 1, "a100", "ib-hdr200")
    _, lat, cls = f.route(np.array([0, 0]), np.array([19, 20]))
    assert lat[0] == pytest.approx(2 * hops["nic"] + hops["leaf"])
    assert lat[1] == pytest.approx(2 * hops["nic"] + 2 * hops["leaf"] + hops["spine"])
    assert list(cls) == [2, 2]
    g = fabric(1, 8, "h100")
    _, lat_in, cls_in = g.route(np.array([0]), np.array([5]))
    assert lat_in[0] == pytest.approx(hops["nvswitch"]) and cls_in[0] == 0


def test_a_ring_pays_each_hop_at_its_own_latency_not_every_step_at_the_worst():
    kinds = load()
    proto, hops = kinds.protocols["ll"], kinds.hops
    f = fabric(2, 8, "h100", "ib-ndr400")
    report = simulate(f, Request(algorithm="ring", protocol="ll", sizes=parse_sizes("8B")))
    # the chunk travels the ring 2(n-1)/n times: 14 NVLink hops and 2 network hops (leaf, two NICs) each time;
    # the wrap from node1 back to node0 changes rail, so it first crosses NVLink to the right NIC (PXN)
    rounds = 2 * 15 / 16
    nvlink = 14 * (proto.step_s["nvlink"] + hops["nvswitch"])
    net_paths = [2 * hops["nic"] + hops["leaf"], 2 * hops["nic"] + hops["leaf"] + hops["nvswitch"]]
    network = sum(proto.step_s["network"] + p for p in net_paths)
    expected = proto.base_s + rounds * (nvlink + network)
    assert report["rows"][0]["time_us"] * US == pytest.approx(expected, rel=1e-3)
    naive = proto.base_s + 2 * 15 * (proto.step_s["network"] + max(net_paths))  # every step at the worst hop
    assert expected < naive / 3


def test_nvls_only_where_the_switches_reduce():
    assert "nvls" in collectives.candidates(fabric(1, 8, "h100"), "all-reduce")
    assert "nvls" in collectives.candidates(fabric(1, 8, "b200"), "all-reduce")
    assert "nvls" not in collectives.candidates(fabric(1, 8, "a100"), "all-reduce")  # NVSwitch gen 2: no SHARP
    assert "nvls" not in collectives.candidates(fabric(1, 2, "h100-pcie"), "all-reduce")  # bridged pairs
    assert "nvls" not in collectives.candidates(fabric(2, 8, "h100", "ib-ndr400"), "all-reduce")
    assert "hierarchical" in collectives.candidates(fabric(2, 8, "h100", "ib-ndr400"), "all-reduce")
    assert "hierarchical" not in collectives.candidates(fabric(2, 8, "a100", "ib-hdr200"), "all-reduce")
    assert collectives.candidates(fabric(1, 8, "h100"), "all-gather") == ["ring"]
    with pytest.raises(UsageError, match="nvls needs"):
        collectives.plan(fabric(1, 8, "a100"), "all-reduce", "nvls")
    with pytest.raises(UsageError, match="does not run all-gather"):
        collectives.plan(fabric(1, 8, "h100"), "all-gather", "tree")


def test_the_automatic_choice_follows_size():
    report = simulate(fabric(1, 8, "h100"), Request(sizes=parse_sizes("8B:8GiB")))
    rows = report["rows"]
    assert (rows[0]["algorithm"], rows[0]["protocol"]) == ("ring", "ll")
    assert rows[-1]["algorithm"] == "nvls"
    times = [r["time_us"] for r in rows]
    assert times == sorted(times)
    assert 10 < rows[0]["time_us"] < 40  # small all-reduces on one node cost tens of us, as nccl-tests shows
    assert report["critical_links"][0]["class"] == "nvlink" and report["critical_links"][0]["tied_links"] == 16


def test_across_nodes_the_nics_bound_a_ring_and_nvls_nodes_go_hierarchical():
    f = fabric(4, 8, "a100", "ib-hdr200")
    report = simulate(f, Request(algorithm="ring", sizes=parse_sizes("8GiB")))
    assert report["critical_links"][0]["class"] == "network"
    h = fabric(2, 8, "h100", "ib-ndr400")
    assert busbw(h) > busbw(h, algorithm="ring")  # NVLS-tree beats the ring on two nodes, as NCCL's does


def test_all_to_all_across_nodes_is_bound_by_the_nics():
    f = fabric(4, 8, "h100", "ib-ndr400")
    got = busbw(f, "all-to-all")
    # each node sends 24/32 of its 8 GPUs' buffers over 8 NICs at the network share
    nic = 50 * load().shares["network"]
    assert got == pytest.approx(8 * nic / 6 * 31 / 32, rel=0.01)


def test_oversubscribed_leaves_slow_traffic_that_crosses_them():
    flat = fabric(96, 1, "h100", "ib-ndr400")
    thin = fabric(96, 1, "h100", "ib-ndr400", oversubscription=3.0)
    assert busbw(thin, "all-to-all", size="64MiB") < busbw(flat, "all-to-all", size="64MiB")


def test_a_fabric_that_does_not_connect_names_the_gpus_cut_off():
    with pytest.raises(FabricError, match=r"node1 \(GPUs 8-15\) cannot reach node0: no scale-out fabric"):
        _no_network()
    with pytest.raises(FabricError, match=r"node0 \(GPUs 0-7\), node1 \(GPUs 8-15\) cannot reach each other: "
                                          r"their node has no NIC"):
        fabric(2, 8, "h100", "ib-ndr400", nics_per_node=0)


def _no_network():
    from fakegpu.perf.topology import Fabric, generated
    from fakegpu.profiles import load_catalog

    return Fabric(generated(2, 8, load_catalog().get("h100"), None))


def test_unknown_fabric_names_the_closest():
    with pytest.raises(UnknownFabric, match="Did you mean: ib-ndr400"):
        fabric(2, 8, "h100", "ib-ndr40")


@pytest.mark.parametrize("text,message", [
    ("8GiB:8B", "runs backwards"), ("0B:1KiB", "at least 1 byte"), ("8G:16G", "8GiB or 8GB"),
    ("banana", "not a size"), ("1:2:3", "MIN:MAX")])
def test_bad_sizes_are_refused(text, message):
    with pytest.raises(UsageError, match=message):
        parse_sizes(text)


def test_a_step_factor_must_grow():
    with pytest.raises(UsageError, match="above 1"):
        parse_sizes("8B:1KiB", 1.0)


def test_a_thousand_gpus_price_quickly():
    import time

    f = fabric(128, 8, "h100", "ib-ndr400")
    start = time.perf_counter()
    report = simulate(f, Request(sizes=parse_sizes("8B:8GiB")))
    assert time.perf_counter() - start < 10  # the bench holds it to 2 s; this only catches a blow-up
    assert len(report["rows"]) == 31
    assert 300 < report["rows"][-1]["busbw_gb_s"] < 400  # bound by 8 rails of ~47 GB/s


def test_sizes_past_what_the_model_routes_are_refused():
    with pytest.raises(FabricError, match="at most 65536"):
        fabric(10000, 8, "h100", "ib-ndr400")
    big = fabric(640, 8, "h100", "ib-ndr400")
    with pytest.raises(UsageError, match="at most 4096 GPUs"):
        collectives.plan(big, "all-to-all", "p2p")
