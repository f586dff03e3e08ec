"""replay-trace's what-if onto a fabric: the committed two-rank trace's collectives re-priced by the topology model
(recorded x model(target) / model(source)), each ratio worked out here from simulate-topology's own API; the same
fabric gives back the recorded times; process groups map onto their ranks; bad fabrics are refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fakegpu.errors import UsageError
from fakegpu.perf import collectives
from fakegpu.perf.fabric_options import FabricOptions
from fakegpu.perf.simulate import Request, simulate
from fakegpu.perf.topology import Fabric, generated
from fakegpu.perf.trace_collectives import collectives as trace_collectives
from fakegpu.perf.trace_fabric import fabric_pricer, group_ranks, model_bytes, model_collective
from fakegpu.perf.trace_replay import analyse
from fakegpu.perf.trace_whatif import NCCL, source_profile, what_if
from fakegpu.profiles import load_catalog
from fakegpu.reports import validate
from tests.perf.conftest import REPO, runner
from tests.perf.kineto import GEMM, Trace

DDP = REPO / "tests" / "data" / "traces" / "ddp-2rank"
TWO_IB_NODES = "fabric: ib-ndr400\nnodes:\n  - {profile: h100, gpus: 1, count: 2}\n"


@pytest.fixture(scope="module")
def ddp():
    _, windows = analyse([DDP])
    return windows


def _simulated_us(fabric: Fabric, collective: str, nbytes: int) -> float:
    """simulate-topology's time for one size on the whole fabric (its own pick of algorithm and protocol)."""
    rows = simulate(fabric, Request(collective=collective, sizes=[nbytes], dtype="int8"))["rows"]
    return rows[0]["time_us"]


def _group_us(fabric: Fabric, ranks: list[int], collective: str, nbytes: int) -> float:
    """The fastest of the communicator group's plans and protocols, as simulate-topology's training step prices
    a group that is part of the fabric."""
    plans = collectives.group_plans(fabric, [np.array(ranks)], collective)
    return min(float(p.times(fabric, np.array([float(nbytes)]), proto)[0]) * 1e6
               for p in plans for proto in collectives.protocols_for(p, None))


def _what_if(windows, options: FabricOptions, profile: str | None = "h100", from_file=None):
    source = source_profile(windows, None)
    target = load_catalog().get(profile) if profile else None
    board, pricer = fabric_pricer(windows, options, from_file, source, target)
    return what_if(windows, board, pricer=pricer), pricer


def _first_all_reduce(windows):
    """The first all-reduce and the transfer the replay hands the pricer (the shortest duration any rank saw)."""
    first = [trace_collectives(r, w)[0] for r, w in windows.items()]
    return first[0], min(c.dur for c in first)


def test_the_committed_trace_records_what_the_model_needs(ddp):
    c, _ = _first_all_reduce(ddp)
    assert model_collective(c.collective) == "all-reduce"
    assert group_ranks(c, 2) == ((0, 1), False)
    assert model_bytes(c, "all-reduce", 2) == 25_000_000 * 4


@pytest.mark.parametrize("options,target_us", [
    # 8 x H100 in one NVLink node: the two ranks on GPUs 0 and 1, a group that is part of the fabric
    (FabricOptions(gpus_per_node=8),
     lambda nbytes: _group_us(Fabric(generated(1, 8, load_catalog().get("h100"), None)), [0, 1], "all-reduce",
                              nbytes)),
    # two nodes of one H100 each over NDR InfiniBand: the group is the whole fabric
    (FabricOptions(nodes=2, gpus_per_node=1, fabric="ib-ndr400"),
     lambda nbytes: _simulated_us(Fabric(generated(2, 1, load_catalog().get("h100"), "ib-ndr400")), "all-reduce",
                                  nbytes)),
], ids=["8xh100-nvlink-node", "2-nodes-ib"])
def test_each_collective_is_scaled_by_the_models_ratio(ddp, options, target_us):
    c, transfer = _first_all_reduce(ddp)
    nbytes = model_bytes(c, "all-reduce", 2)
    # source: the trace's own board, one node with as many GPUs as the group
    source_us = _simulated_us(Fabric(generated(1, 2, load_catalog().get("h100"), None)), "all-reduce", nbytes)
    ratio = target_us(nbytes) / source_us
    w, pricer = _what_if(ddp, options)
    (row,) = w["fabric"]["collectives"]
    assert row["count"] == 3 and row["ratio"] == pytest.approx(ratio, rel=1e-9)
    assert row["source_model"]["time_us"] == pytest.approx(source_us, rel=1e-9)
    assert row["target_model"]["time_us"] == pytest.approx(target_us(nbytes), rel=1e-9)
    assert w["classes"][NCCL]["predicted_us"] == pytest.approx(w["classes"][NCCL]["recorded_us"] * ratio, rel=1e-9)
    assert w["basis"][NCCL]["target"].startswith("topology model: ")
    assert not w["fabric"]["fallback"]
    h100 = load_catalog().get("h100")  # and the one collective, priced again alone
    assert pricer(c, h100, h100, transfer) == pytest.approx(transfer * ratio, rel=1e-9)


def test_infiniband_is_slower_than_nvlink_and_the_step_says_so(ddp):
    nvlink, _ = _what_if(ddp, FabricOptions(gpus_per_node=8))
    ib, _ = _what_if(ddp, FabricOptions(nodes=2, gpus_per_node=1, fabric="ib-ndr400"))
    assert ib["fabric"]["collectives"][0]["ratio"] > 3 * nvlink["fabric"]["collectives"][0]["ratio"]
    assert ib["predicted_step_us"] > nvlink["predicted_step_us"]


def test_the_same_fabric_gives_back_the_recorded_times(ddp, tmp_path):
    path = tmp_path / "ib.yaml"
    path.write_text(TWO_IB_NODES)
    for options, source in ((FabricOptions(fabric_file=path), path), (FabricOptions(gpus_per_node=2), None)):
        w, _ = _what_if(ddp, options, profile=None, from_file=source)
        assert w["classes"][NCCL]["predicted_us"] == pytest.approx(w["classes"][NCCL]["recorded_us"], rel=1e-12)
        assert w["predicted_step_us"] == pytest.approx(w["source_step_us"], rel=1e-12)
        assert w["fabric"]["collectives"][0]["ratio"] == pytest.approx(1.0, rel=1e-12)


def test_the_cli_json_validates_and_shows_both_model_times(tmp_path):
    from fakegpu.cli.main import app

    result = runner.invoke(app, ["replay-trace", str(DDP), "--nodes", "2", "--gpus-per-node", "1", "--fabric",
                                 "ib-ndr400", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    validate(doc)
    validate(doc["data"])
    w = doc["data"]["what_if"]
    assert w["target_profile"] == "h100-sxm5-80gb" and w["fabric"]["target"]["nodes"] == 2
    assert w["fabric"]["source"] is None and "one node of h100-sxm5-80gb" in w["fabric"]["source_assumed"]
    text = runner.invoke(app, ["replay-trace", str(DDP), "--nodes", "2", "--gpus-per-node", "1", "--fabric",
                               "ib-ndr400"])
    assert text.exit_code == 0
    row = w["fabric"]["collectives"][0]
    assert f"{row['ratio']:.3g}" in text.stdout and "MODEL (SOURCE)" in text.stdout
    # --profile alone keeps the link-bandwidth ratio, named as the fallback
    plain = json.loads(runner.invoke(app, ["replay-trace", str(DDP), "--profile", "a100", "--json"]).stdout)
    assert plain["data"]["what_if"]["fabric"] is None
    assert "fallback link ratio: no fabric given" in plain["data"]["what_if"]["basis"][NCCL]["target"]


def _cli_error(*args: str) -> tuple[int, str]:
    from fakegpu.cli.main import app

    result = runner.invoke(app, ["replay-trace", str(DDP), *args, "--json"])
    doc = json.loads(result.stdout)
    validate(doc)
    return result.exit_code, doc["errors"][0]["message"]


def test_bad_fabrics_are_refused_by_name(tmp_path):
    misspelt = tmp_path / "misspelt.yaml"
    misspelt.write_text("fabric: ib-ndr400\nnodes:\n  - {profile: h100, gpus: 1, count: 2, nicks: 1}\n")
    code, message = _cli_error("--fabric-file", str(misspelt))
    assert code != 0 and "misspelt.yaml:3" in message and "nicks" in message
    unjoined = tmp_path / "unjoined.yaml"
    unjoined.write_text("nodes:\n  - {profile: h100, gpus: 1, count: 2}\n")
    code, message = _cli_error("--fabric-file", str(unjoined))
    assert code != 0 and "does not connect" in message
    code, message = _cli_error("--gpus-per-node", "1")
    assert code != 0 and "the trace has 2 ranks but the target fabric has 1 GPU(s)" in message
    code, message = _cli_error("--nodes", "2", "--gpus-per-node", "1", "--fabric", "ib-ndr40")
    assert code != 0 and "ib-ndr400" in message  # the closest name
    ib = tmp_path / "ib.yaml"
    ib.write_text(TWO_IB_NODES)
    code, message = _cli_error("--fabric-file", str(ib), "--profile", "a100")
    assert code != 0 and "leave --profile out" in message
    code, message = _cli_error("--from-fabric-file", str(ib), "--profile", "a100")
    assert code != 0 and "give the fabric to compare it with" in message
    code, message = _cli_error("--gpus-per-node", "8", "--from-fabric-file", str(unjoined))
    assert code != 0 and "does not connect" in message


def _collective(t: Trace, ts: float, dur: float, pg: str, ranks: list[int] | None) -> None:
    """An all-reduce of 8 MiB in a group of two, its ranks recorded or (None) left out as older PyTorch does."""
    t.nccl("allreduce", ts, dur, nelems=1 << 21, pg=pg)
    for event in t.events[-5:]:  # the host's record_param_comms, the launch, the kernel and their flow
        args = event.get("args", {})
        if "Process Group Ranks" in args:
            if ranks is None:
                del args["Process Group Ranks"]
            else:
                args["Process Group Ranks"] = str(ranks)


def test_process_groups_map_onto_their_ranks(tmp_path):
    """Four ranks on two nodes of two GPUs: tensor-parallel pairs (0,1) and (2,3) inside a node, their ranks not
    recorded; data-parallel pairs (0,2) and (1,3) across the nodes, recorded."""
    for r in range(4):
        t = Trace(rank=r, world=4)
        t.kernel(GEMM, 0, 100)
        _collective(t, 100, 50, pg=str(1 + r // 2), ranks=None)
        _collective(t, 200, 50, pg=str(3 + r % 2), ranks=[r % 2, r % 2 + 2])
        t.write(tmp_path / f"rank{r}.json")
    report, windows = analyse([tmp_path])
    w, _ = _what_if(windows, FabricOptions(nodes=2, gpus_per_node=2, fabric="ib-ndr400"))
    rows = {r["group_ranks"]: r for r in w["fabric"]["collectives"]}
    assert set(rows) == {"0-1", "2-3", "0, 2", "1, 3"}
    assert rows["0-1"]["group_ranks_assumed"] and not rows["0, 2"]["group_ranks_assumed"]
    h100 = load_catalog().get("h100")
    fabric = Fabric(generated(2, 2, h100, "ib-ndr400"))
    source_us = _simulated_us(Fabric(generated(1, 2, h100, None)), "all-reduce", 8 << 20)
    for ranks, key in (([0, 1], "0-1"), ([0, 2], "0, 2")):
        assert rows[key]["ratio"] == pytest.approx(_group_us(fabric, ranks, "all-reduce", 8 << 20) / source_us)
    assert rows["0, 2"]["ratio"] > 2 * rows["0-1"]["ratio"]  # across InfiniBand, not NVLink
    assert any("taken as consecutive ranks, blocks of 2" in n for n in w["notes"])
    assert any("priced alone" in n for n in w["notes"])
    report["what_if"] = w
    validate(report)


def test_group_ranks_and_sizes():
    from fakegpu.perf.trace_collectives import Collective

    def c(rank, **meta):
        return Collective(rank, 0, "k", meta.pop("kind", "allreduce"), "g", 0, 0.0, 1.0, 64,
                          meta.pop("size", None), meta)

    assert group_ranks(c(3, pg_ranks="[1, 3, 5, 7]", size=4), 8) == ((1, 3, 5, 7), False)
    assert group_ranks(c(5, size=2), 8) == ((4, 5), True)
    assert group_ranks(c(5, pg_ranks="[0, 1, ...]", size=2), 8) == ((4, 5), True)
    assert group_ranks(c(5), 8) == (tuple(range(8)), False)
    assert [model_collective(n) for n in ("_allgather_base", "reduce_scatter_tensor_coalesced", "ReduceScatter",
                                          "alltoall_base", "recv", "Reduce", "gather")] == [
        "all-gather", "reduce-scatter", "reduce-scatter", "all-to-all", "send-recv", "reduce", None]
    assert model_bytes(c(0, out_nelems=64, dtype="BFloat16"), "all-gather", 4) == 128
    assert model_bytes(c(0), "all-gather", 4) == 256


def test_a_group_past_the_world_is_refused(ddp):
    _, pricer = _what_if(ddp, FabricOptions(gpus_per_node=8))
    c, transfer = _first_all_reduce(ddp)
    c.meta["pg_ranks"] = "[0, 5]"
    h100 = load_catalog().get("h100")
    with pytest.raises(UsageError, match="holds rank 5, past the job's 2 ranks"):
        pricer(c, h100, h100, transfer)


def test_collectives_the_model_cannot_price_fall_back_and_are_counted(ddp):
    _, pricer = _what_if(ddp, FabricOptions(gpus_per_node=8))
    c, transfer = _first_all_reduce(ddp)
    h100, a100 = load_catalog().get("h100"), load_catalog().get("a100")
    c.collective = "gather"
    from fakegpu.perf.trace_links import bandwidth_ratio_pricer

    assert pricer(c, h100, a100, transfer) == bandwidth_ratio_pricer(c, h100, a100, transfer)
    assert pricer.fallback == {"gather is not a collective the model prices": 1}
    assert any("link-bandwidth ratio instead of the model" in n for n in pricer.notes())


def test_group_plans_price_broadcast_and_all_to_all_on_part_of_a_fabric():
    fabric = Fabric(generated(2, 4, load_catalog().get("h100"), "ib-ndr400"))
    size = np.array([float(1 << 26)])
    for kind in ("broadcast", "reduce", "all-to-all"):
        inside = collectives.group_plans(fabric, [np.array([0, 1])], kind)[0].times(fabric, size, "simple")[0]
        across = collectives.group_plans(fabric, [np.array([0, 4])], kind)[0].times(fabric, size, "simple")[0]
        assert 0 < inside < across, kind
    with pytest.raises(UsageError, match="at least 2"):
        collectives.group_plans(fabric, [np.array([0])], "broadcast")
