"""fakegpu bandwidth without ranks: sizes planned from the model, the worker's result line parsed, the report and
its table built from a worker result made here, the CLI's refusals, and the worker's source fit to travel inline."""

from __future__ import annotations

import ast
import json

import pytest
from typer.testing import CliRunner

from fakegpu.cli.main import app
from fakegpu.errors import UsageError
from fakegpu.perf import bandwidth as bw
from fakegpu.perf import bandwidth_launch as launch
from fakegpu.perf.bandwidth_worker import MARKER
from fakegpu.perf.collectives import busbw_factor
from fakegpu.reports import validate

runner = CliRunner()
TARGET = bw.Target(profile="h100")


def fake_result(plan: bw.Plan, seconds: float = 1e-3, wrong: dict[str, int] | None = None) -> dict:
    """What rank 0 prints: every planned size timed at `seconds`; `wrong` marks an op's size index as failed."""
    ops = {}
    for op, model in plan.models.items():
        ops[op] = [{"size": r["size"], "count": r["count"], "time_s": seconds, "rank_time_s": seconds,
                    "check": "wrong" if (wrong or {}).get(op) == i else "ok",
                    "wrong_ranks": 1 if (wrong or {}).get(op) == i else 0}
                   for i, r in enumerate(model["rows"])]
    return {"world_size": plan.fabric.gpu_count, "local_world_size": plan.fabric.gpu_count, "backend": "nccl",
            "dtype": "float", "iters": 20, "warmup": 5, "torch": "2.15.0", "torch_cuda": "13.2",
            "device": "NVIDIA H100 80GB HBM3", "hostname": "here", "seconds": 1.0, "ops": ops}


def test_sizes_are_the_models_rows_rounded_per_op():
    sweep = bw.Sweep(ops=("all-reduce", "all-gather"), sizes=(8, 100, 1 << 20))
    plan = bw.plan(sweep, bw.Shape(1, 4), TARGET)
    assert [r["size"] for r in plan.models["all-reduce"]["rows"]] == [8, 100, 1 << 20]
    # all-gather splits the buffer per rank: whole floats per rank, 4 ranks -> multiples of 16 B
    assert [r["size"] for r in plan.models["all-gather"]["rows"]] == [16, 96, 1 << 20]
    args = plan.worker_args(sweep)
    assert args[args.index("--sweep") + 1] == "all-reduce:8,100,1048576"
    assert "all-gather:16,96,1048576" in args and args[:2] == ["--iters", "20"]


def test_the_target_has_the_runs_shape_and_a_network_across_nodes():
    plan = bw.plan(bw.Sweep(sizes=(8,)), bw.Shape(2, 1), bw.Target(profile="a100"))
    assert plan.fabric.gpu_count == 2 and plan.fabric.nodes == 2
    assert plan.fabric.describe()["network"]["fabric"] == bw.DEFAULT_NETWORK
    assert any("assumed" in n for n in plan.notes)
    named = bw.plan(bw.Sweep(sizes=(8,)), bw.Shape(2, 1), bw.Target(profile="a100", network="roce-200"))
    assert named.fabric.describe()["network"]["fabric"] == "roce-200" and not named.notes


@pytest.mark.parametrize(("sweep", "shape", "message"), [
    (bw.Sweep(ops=("all-reduce",), sizes=(8,)), bw.Shape(1, 1), "at least 2 ranks"),
    (bw.Sweep(ops=("allreduce",), sizes=(8,)), bw.Shape(1, 2), "--op"),
    (bw.Sweep(ops=("all-reduce", "all-reduce"), sizes=(8,)), bw.Shape(1, 2), "twice"),
    (bw.Sweep(sizes=(8,), dtype="fp8"), bw.Shape(1, 2), "--dtype"),
    (bw.Sweep(sizes=(8,), iters=0), bw.Shape(1, 2), "--iters"),
])
def test_bad_sweeps_are_usage_errors(sweep, shape, message):
    with pytest.raises(UsageError, match=message):
        bw.plan(sweep, shape, TARGET)


def test_a_fabric_file_must_have_the_runs_ranks(tmp_path):
    path = tmp_path / "fabric.yaml"
    path.write_text("fabric: ib-ndr400\nnodes:\n  - {profile: h100, gpus: 8, count: 2}\n")
    with pytest.raises(UsageError, match="16 GPUs; the run has 2 ranks"):
        bw.plan(bw.Sweep(sizes=(8,)), bw.Shape(2, 1), bw.Target(fabric_file=path))
    assert bw.plan(bw.Sweep(sizes=(8,)), bw.Shape(2, 8), bw.Target(fabric_file=path)).fabric.gpu_count == 16


def test_the_result_line_is_found_behind_a_node_prefix_and_bad_lines_are_named():
    doc = {"world_size": 2, "ops": {"all-reduce": []}}
    lines = ["[node-1] noise", f"[node-0] {MARKER}{json.dumps(doc)}", "[node-0] after"]
    assert bw.parse_worker_output(lines) == doc
    with pytest.raises(bw.BandwidthError, match="no result"):
        bw.parse_worker_output(["[node-0] Traceback"])
    with pytest.raises(bw.BandwidthError, match="not JSON"):
        bw.parse_worker_output([MARKER + '{"world_size": 2, "ops"[node-1] x'])


def test_report_uses_the_models_busbw_factors_and_validates():
    sweep = bw.Sweep(ops=("all-reduce", "all-gather", "broadcast"), sizes=(8, 1 << 20))
    plan = bw.plan(sweep, bw.Shape(1, 4), TARGET)
    run = {"kind": "local", "cluster": None, "mode": "native", "devices": "h100:4", "nodes": 1, "ranks_per_node": 4,
           "transport": "auto", "worker": "file"}
    doc = bw.report(plan, sweep, fake_result(plan, 2e-3), run, 0)
    validate(doc)
    assert doc["all_checks_passed"] and doc["ranks"] == 4
    for op in doc["ops"]:
        assert op["busbw_factor"] == busbw_factor(op["op"], 4)
        big = op["rows"][-1]
        assert big["measured"]["time_us"] == pytest.approx(2000.0)
        assert big["measured"]["algbw_gb_s"] == pytest.approx((1 << 20) / 2e-3 / 1e9)
        assert big["measured"]["busbw_gb_s"] == pytest.approx(big["measured"]["algbw_gb_s"] * op["busbw_factor"])
        assert big["time_ratio"] == pytest.approx(2000.0 / big["model"]["time_us"])
    assert any("not a GPU's speed" in n for n in doc["notes"])


def test_a_wrong_size_or_rank_local_calls_fail_the_report():
    sweep = bw.Sweep(sizes=(8, 64))
    plan = bw.plan(sweep, bw.Shape(1, 2), TARGET)
    run = {"kind": "local", "cluster": None, "mode": "native", "devices": "h100:2", "nodes": 1, "ranks_per_node": 2,
           "transport": "auto", "worker": "file"}
    wrong = bw.report(plan, sweep, fake_result(plan, wrong={"all-reduce": 1}), run, 0)
    assert not wrong["all_checks_passed"] and wrong["ops"][0]["rows"][1]["check"] == "wrong"
    local = bw.report(plan, sweep, fake_result(plan), run, 3)
    assert not local["all_checks_passed"] and any("rank-locally" in n for n in local["notes"])
    other = fake_result(plan)
    other["world_size"] = 4
    with pytest.raises(bw.BandwidthError, match="4 ranks; the model has 2"):
        bw.report(plan, sweep, other, run, 0)


def _fake_local(monkeypatch, wrong=None, rank_local=0):
    def run_local(plan, sweep, nproc, mode, devices, transport="auto", timeout=None, echo=None, extra_env=None):
        run = {"kind": "local", "cluster": None, "mode": mode, "devices": devices, "nodes": 1,
               "ranks_per_node": nproc, "transport": transport, "worker": "file"}
        return launch.Outcome(fake_result(plan, wrong=wrong), run, rank_local)

    monkeypatch.setattr(launch, "run_local", run_local)


def test_cli_prints_the_table_with_both_sides_and_says_what_was_measured(monkeypatch):
    _fake_local(monkeypatch)
    result = runner.invoke(app, ["bandwidth", "--nproc", "2", "--sizes", "8B:1KiB", "--step-factor", "4",
                                 "--op", "all-reduce,all-gather"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "NOT a GPU's speed" in out and "prediction for the target" in out
    assert out.count("SIZE(B)  COUNT") == 2 and "HOST BUSBW" in out and "MODEL BUSBW" in out and "RATIO" in out
    assert "1 x 2 h100-sxm5-80gb" in out and "all-gather on 2 ranks (busbw = algbw x 0.5)" in out


def test_cli_flags_a_wrong_size_and_exits_1(monkeypatch):
    _fake_local(monkeypatch, wrong={"all-reduce": 0})
    result = runner.invoke(app, ["bandwidth", "--nproc", "2", "--sizes", "8B:64B"])
    assert result.exit_code == 1
    assert "WRONG(1)" in result.stdout and "1 size(s) gave wrong results" in result.stderr
    _fake_local(monkeypatch, rank_local=4)
    result = runner.invoke(app, ["bandwidth", "--nproc", "2", "--sizes", "8B", "--json"])
    doc = json.loads(result.stdout)
    assert result.exit_code == 1 and doc["errors"][0]["code"] == "check-failed"
    validate(doc)
    validate(doc["data"])
    assert doc["data"]["rank_local_calls"] == 4


@pytest.mark.parametrize(("args", "message"), [
    ([], "--cluster NAME or --nproc N"),
    (["--nproc", "2", "--cluster", "x"], "--cluster NAME or --nproc N"),
    (["--cluster", "x", "--devices", "a100:2"], "--devices: for runs on this host"),
    (["--nproc", "2", "--sizes", "1KiB:8B"], "backwards"),
    (["--nproc", "2", "--op", "all-reduce,scatter"], "--op"),
    (["--nproc", "2", "--devices", ""], "invalid device spec '': part '': the spec is empty"),
    (["--nproc", "2", "--profile", ""], "unknown GPU profile ''"),
    (["--nproc", "2", "--timeout", "0"], "--timeout '0' is not a duration"),
])
def test_cli_usage_errors_exit_2(args, message):
    result = runner.invoke(app, ["bandwidth", *args, "--json"])
    assert result.exit_code == 2, result.output
    assert message in json.loads(result.stdout)["errors"][0]["message"]


def test_local_runs_refuse_too_few_devices_and_a_transport_in_fakecuda():
    plan = bw.plan(bw.Sweep(sizes=(8,)), bw.Shape(1, 4), TARGET)
    with pytest.raises(UsageError, match="has 2 GPU"):
        launch.run_local(plan, bw.Sweep(sizes=(8,)), 4, "native", "h100:2")
    with pytest.raises(UsageError, match="gloo"):
        launch.run_local(plan, bw.Sweep(sizes=(8,)), 4, "fakecuda", "h100:4", transport="socket")


def test_the_worker_travels_inline_safely():
    """The cluster controller substitutes $VAR in job arguments and the node image may carry another fakegpu: the
    inline source has no dollar sign and imports nothing of fakegpu."""
    source = launch.WORKER_PATH.read_text(encoding="utf-8")
    assert "$" not in source
    imported = {a.name.split(".")[0] for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Import)
                for a in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= {"__future__", "argparse", "json", "os", "sys", "time", "torch"}
    plan = bw.plan(bw.Sweep(sizes=(8,)), bw.Shape(2, 1), TARGET)
    inline = launch.cluster_command(plan, bw.Sweep(sizes=(8,)))
    assert inline[:5] == ["torchrun", "--no-python", "python3", "-c", source]
    assert inline[5:] == plan.worker_args(bw.Sweep(sizes=(8,)))
    assert launch.cluster_command(plan, bw.Sweep(sizes=(8,)), "module")[:3] == ["torchrun", "-m", launch.WORKER_MODULE]
    with_env = launch.cluster_command(plan, bw.Sweep(sizes=(8,)), "module", {"NCCL_SOCKET_IFNAME": "eth0"})
    assert with_env[:4] == ["env", "NCCL_SOCKET_IFNAME=eth0", "torchrun", "-m"]


def test_env_items_are_checked():
    assert launch.parse_env(["A_B=1", "C=x=y", "D="]) == {"A_B": "1", "C": "x=y", "D": ""}
    for bad in ("NOVALUE", "=1", "1A=2", "A-B=1", "A B=1"):
        with pytest.raises(UsageError, match="--env"):
            launch.parse_env([bad])


def test_rank_local_calls_are_summed_from_native_reports(tmp_path):
    (tmp_path / "node-0").mkdir()
    (tmp_path / "node-0" / "a.json").write_text(json.dumps({"collectives": {"rank_local_calls": 2}}))
    (tmp_path / "b.json").write_text(json.dumps({"collectives": {"rank_local_calls": 1}}))
    (tmp_path / "c.json").write_text("not json")
    assert launch.rank_local_calls(tmp_path) == 3
    assert launch.rank_local_calls(tmp_path / "node-0" / "none") is None


def test_a_local_run_is_torchrun_under_fakegpu_run_and_reads_its_result_from_a_file(tmp_path):
    sweep = bw.Sweep(sizes=(8,))
    plan = bw.plan(sweep, bw.Shape(1, 2), TARGET)
    native = launch.local_command(plan, sweep, 2, "native", "h100:2", tmp_path, "90s")
    cut = native.index("--")
    assert native[1:cut] == ["-m", "fakegpu", "run", "--mode", "native", "--devices", "h100:2", "--report-dir",
                             str(tmp_path), "--timeout", "90s"]
    assert native[cut + 3:cut + 8] == ["torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                                       str(launch.WORKER_PATH)]
    assert native[-2:] == ["--out", str(tmp_path / launch.RESULT_FILE)]
    fakecuda = launch.local_command(plan, sweep, 2, "fakecuda", "h100:2", tmp_path, None)
    assert "--report-dir" not in fakecuda  # fakegpu run takes it in native mode only
