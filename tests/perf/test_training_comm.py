"""A training step's communication (simulate-topology --model-dir): which collectives DDP, ZeRO, FSDP, tensor and
pipeline parallelism issue per step, on which groups, and groups that meet on a link sharing it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fakegpu.errors import UsageError
from fakegpu.perf import collectives
from fakegpu.perf.training_comm import Parallelism, step_communication
from tests.perf.conftest import REPO
from tests.perf.topology_helpers import fabric, topology, topology_error, topology_json

LLAMA_7B = REPO / "tests" / "data" / "devset" / "configs" / "llama-2-7b.json"


def _ops(step):
    return {(o["parallelism"], o["collective"]): o for o in step["ops"]}


def test_ddp_all_reduces_fp32_gradients_in_25_mib_buckets():
    step = step_communication(fabric(1, 8, "h100"), LLAMA_7B, Parallelism())
    [op] = step["ops"]
    params = step["model"]["parameters"]
    assert op["collective"] == "all-reduce" and op["group_size"] == 8 and op["groups"] == 1
    assert op["count"] == math.ceil(params * 4 / (25 << 20))
    assert op["bytes"] * op["count"] == pytest.approx(params * 4)
    assert op["algorithm"] == "nvls"  # one whole HGX H100 node, as NCCL would run it
    assert step["seconds"] == pytest.approx(op["count"] * op["time_us"] * 1e-6)


def test_fsdp_gathers_each_layer_twice_and_reduces_it_once_per_micro_batch():
    step = step_communication(fabric(2, 8, "h100"), LLAMA_7B, Parallelism(fsdp="full", micro_batches=2))
    ops = _ops(step)
    ag, rs = ops[("data", "all-gather")], ops[("data", "reduce-scatter")]
    assert ag["count"] == 2 * 32 * 2 and rs["count"] == 32 * 2
    assert ag["bytes"] == rs["bytes"]  # a layer's parameters in bf16
    assert 150e6 < ag["bytes"] / 2 < 250e6  # a Llama-2-7B layer holds about 200 M parameters


def test_tensor_and_pipeline_groups_follow_megatron_order():
    step = step_communication(fabric(4, 8, "h100"), LLAMA_7B, Parallelism(tensor=8, pipeline=2, micro_batches=4))
    ops = _ops(step)
    tp, pp, dp = ops[("tensor", "all-reduce")], ops[("pipeline", "send-recv")], ops[("data", "all-reduce")]
    assert (tp["groups"], tp["group_size"]) == (4, 8)  # a node each
    assert tp["count"] == 4 * 16 * 4  # 4 per layer, 16 layers per stage, 4 micro-batches
    assert tp["bytes"] == 1 * 2048 * 4096 * 2
    assert (pp["groups"], pp["group_size"], pp["count"]) == (16, 2, 8)
    assert (dp["groups"], dp["group_size"]) == (16, 2)
    assert set(step["seconds_by_parallelism"]) == {"tensor", "pipeline", "data"}


def test_groups_that_meet_on_a_link_share_it():
    # the 8 data-parallel groups of GPU i across two nodes: on 8 rails each has its own NIC; behind one NIC per
    # node all eight share it
    rails = fabric(2, 8, "h100", "ib-ndr400")
    one_nic = fabric(2, 8, "h100", "ib-ndr400", nics_per_node=1)
    groups = [np.array([i, 8 + i]) for i in range(8)]
    alone = collectives.group_plans(rails, groups[:1], "all-reduce")[0].seconds_per_byte(rails)[0]
    together = collectives.group_plans(rails, groups, "all-reduce")[0].seconds_per_byte(rails)[0]
    shared = collectives.group_plans(one_nic, groups, "all-reduce")[0].seconds_per_byte(one_nic)[0]
    assert together == pytest.approx(alone)
    assert shared == pytest.approx(8 * alone)


def test_zero_and_hybrid_shapes():
    zero2 = _ops(step_communication(fabric(2, 8, "a100", "ib-hdr200"), LLAMA_7B, Parallelism(zero=2)))
    assert set(zero2) == {("data", "reduce-scatter"), ("data", "all-gather")}
    hybrid = step_communication(fabric(4, 8, "h100"), LLAMA_7B, Parallelism(fsdp="hybrid"))
    sizes = {(o["collective"], o["group_size"], o["groups"]) for o in hybrid["ops"]}
    assert sizes == {("all-gather", 8, 4), ("reduce-scatter", 8, 4), ("all-reduce", 4, 8)}


@pytest.mark.parametrize("nodes,par,message", [
    (1, Parallelism(tensor=3), "do not split"),
    (2, Parallelism(tensor=16), "must divide every node's GPUs"),
    (1, Parallelism(pipeline=8, tensor=1), None),
    (1, Parallelism(pipeline=3, tensor=1), "do not split"),
    (1, Parallelism(zero=2, fsdp="full"), "choose one"),
    (1, Parallelism(fsdp="ful"), "did you mean 'full'"),
    (2, Parallelism(tensor=8, fsdp="hybrid"), "two or more data-parallel ranks per node"),
])
def test_impossible_layouts_are_refused(nodes, par, message):
    f = fabric(nodes, 8, "h100")
    if message is None:
        step_communication(f, LLAMA_7B, par)  # 32 layers over 8 stages: fine
        return
    with pytest.raises(UsageError, match=message):
        step_communication(f, LLAMA_7B, par)


def test_the_cli_prints_and_reports_the_step():
    args = ("--nodes", "2", "--profile", "h100", "--fabric", "ib-ndr400", "--model-dir", str(LLAMA_7B),
            "--tensor-parallel", "8", "--micro-batches", "4")
    result = topology(*args)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("training step on 16 GPUs")
    assert "communication per step:" in result.stdout
    data = topology_json(*args)
    assert data["training_step"]["parallelism"]["data"] == 2
    assert topology_json("--profile", "h100")["training_step"] is None
    code, message = topology_error("--profile", "h100", "--model-dir", str(REPO / "no-such-model"))
    assert code == 2 and "no-such-model" in message


def test_an_empty_model_dir_is_refused_not_the_current_folder(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(LLAMA_7B.read_text())
    monkeypatch.chdir(tmp_path)
    code, message = topology_error("--profile", "h100", "--model-dir", "")
    assert code == 2 and "--model-dir '' names no path; give a model folder or its config.json" in message, message
