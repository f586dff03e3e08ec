"""No Docker: spec validation, command substitution, the merge of process reports, schema and HTML."""

from __future__ import annotations

import json

import jsonschema
import pytest

from fakegpu.cluster import html
from fakegpu.cluster import report as merge
from fakegpu.cluster.controller import Controller
from fakegpu.cluster.models import ClusterSpec, ClusterUsageError
from fakegpu.fakecuda.report import ACTIVITY_SCHEMA, PROCESS_SCHEMA
from fakegpu.reports import validate

GiB = 1 << 30


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "Bad Name"}, "invalid cluster name"),
    ({"name": "ok", "nodes": 0}, "--nodes"),
    ({"name": "ok", "mode": "cuda"}, "--mode"),
    ({"name": "ok", "workdir": "/no/such/folder"}, "--workdir"),
])
def test_bad_specs_are_refused_before_anything_exists(kwargs, message):
    with pytest.raises(ClusterUsageError, match=message):
        ClusterSpec(**kwargs)


def test_node_variables_are_substituted_per_node_and_a_script_goes_to_sh():
    env = ["NODE_RANK=1", "MASTER_ADDR=node-0"]
    assert Controller._command(["torchrun", "--node-rank", "$NODE_RANK", "--x=${MASTER_ADDR}", "$HOME"], env) == [
        "torchrun", "--node-rank", "1", "--x=node-0", "$HOME"]
    assert Controller._command(["echo $NODE_RANK && true"], env) == ["sh", "-c", "echo $NODE_RANK && true"]


def _process(pid: int, rank: int | None, used: int, oom: bool = False) -> tuple[dict, dict]:
    dev = {"index": 0 if rank is None else rank % 2, "name": "NVIDIA A100-SXM4-80GB", "uuid": f"GPU-{pid}",
           "capacity_bytes": 80 * GiB, "context_bytes": 500 << 20, "peak_allocated_bytes": used,
           "peak_reserved_bytes": used, "peak_used_bytes": used + (500 << 20) if used else 0}
    rep = {"schema": PROCESS_SCHEMA, "mode": "fakecuda", "pid": pid, "name": "python3",
           "devices_spec": "a100:2", "torch_version": "2.15.0", "uncaught_exception": None, "devices": [dev],
           "oom": {"occurred": oom, "count": int(oom), "device": dev["index"] if oom else None,
                   "requested_bytes": None, "message": None}}
    act = {"schema": ACTIVITY_SCHEMA, "pid": pid, "rank": rank, "local_rank": rank,
           "world_size": 4, "node_rank": 0, "collectives": {"all_reduce": {"calls": 3, "bytes": 1000}},
           "timeline": [{"index": dev["index"], "samples": [[0.5, used // 2, used], [1.0, used, used]]}]}
    return rep, act


def _state(tmp_path, failed_node: bool = False):
    (tmp_path / "cluster.json").write_text(json.dumps({
        "name": "c", "run_id": "r1", "nodes": 2, "devices": "a100:2", "mode": "fakecuda",
        "image": "fakegpu/pytorch:latest", "nproc_per_node": 2, "created": 0}))
    for node in range(2):
        folder = tmp_path / "reports" / f"node-{node}"
        folder.mkdir(parents=True)
        if failed_node and node == 1:
            continue
        for local in range(2):
            rank = node * 2 + local
            rep, act = _process(100 + rank, rank, (rank + 1) * GiB)
            (folder / f"{100 + rank}.json").write_text(json.dumps(rep))
            (folder / f"{100 + rank}.activity.json").write_text(json.dumps(act))
    outcome = [{"node": "node-0", "rank": 0, "exit_code": 0, "status": "ok", "reason": ""},
               {"node": "node-1", "rank": 1, "exit_code": 137 if failed_node else 0,
                "status": "failed" if failed_node else "ok", "reason": "killed" if failed_node else ""}]
    (tmp_path / "run.json").write_text(json.dumps({"command": ["torchrun", "x.py"], "started": 1.0, "ended": 2.0,
                                                   "exit_code": 137 if failed_node else 0, "nodes": outcome}))
    return tmp_path


def test_merge_gives_every_rank_its_device_peaks_and_collectives(tmp_path):
    doc = merge.merge(_state(tmp_path))
    validate(doc)
    assert doc["rank_count"] == 4 and doc["verdict"] == "fits"
    ranks = [p["rank"] for n in doc["nodes"] for p in n["processes"]]
    assert ranks == [0, 1, 2, 3]
    assert doc["nodes"][1]["devices"][1]["peak_allocated_bytes"] == 4 * GiB
    assert doc["collectives"] == {"all_reduce": {"calls": 12, "bytes": 4000}}
    assert doc["nodes"][0]["processes"][0]["devices"][0]["timeline"][-1] == [1.0, GiB, GiB]


def test_a_failed_node_is_marked_and_the_verdict_says_so(tmp_path):
    doc = merge.merge(_state(tmp_path, failed_node=True))
    validate(doc)
    assert doc["verdict"] == "failed" and doc["nodes_without_reports"] == ["node-1"]
    assert doc["nodes"][1]["status"] == "failed" and doc["nodes"][1]["exit_code"] == 137


def test_schema_rejects_a_report_without_nodes(tmp_path):
    doc = merge.merge(_state(tmp_path))
    del doc["nodes"]
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)


def test_html_is_self_contained_with_inline_svg(tmp_path):
    page = html.render(merge.merge(_state(tmp_path)))
    assert page.count("<svg") == 2 and "<polyline" in page and "<rect" in page
    for external in ("http://", "https://", "<script", "<link", "src="):
        assert external not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
