"""`fakegpu run --timeline`: the README's example (a small transformer's bf16 training steps, run by PyPI's CUDA
torch on FakeGPU's libraries) written as a Kineto trace of an H100's predicted timeline, and read by the peers
nobody here wrote.

- HolisticTraceAnalysis (tests/perf/hta_peer.py, in a process of its own) loads the trace and runs its temporal
  breakdown and communication/computation overlap; replay-trace agrees with it within 1 percentage point.
- Each GEMM lasts what the roofline prices for the shape and dtype libcublas recorded (the log is read on its own
  here, not through the trace's args); the shapes are the ones PyTorch's layers give cuBLAS.
- Launches and GPU work are linked by correlation ids; ProfilerStep annotations mark the steps.
- The README shows what the command prints: all of it but the host-timed figures (pid, step time, MFU), which
  vary run to run, is what it prints today.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fakegpu.cli.main import app
from fakegpu.perf import timeline_log as tl
from fakegpu.perf.ops import Gemm
from fakegpu.perf.roofline import Board, estimate_op
from fakegpu.perf.timeline import simulate
from fakegpu.perf.timeline_kineto import summary
from fakegpu.perf.timeline_price import Pricer
from fakegpu.perf.trace_replay import analyse
from fakegpu.profiles import load_catalog
from fakegpu.profiles.efficiency import load
from tests.native_cuda.conftest import run_fakegpu
from tests.readme_examples import examples

pytestmark = [pytest.mark.native, pytest.mark.torch]
REPO = Path(__file__).resolve().parents[2]
SECTION = "## What would a training step take on a GPU? `fakegpu run --timeline`"
D_MODEL, TOKENS = 256, 16 * 128  # examples/timeline/transformer_step.py
CUDA_R_16BF = 14
# What varies from run to run: the pid and the figures the host's timing sets.
HOST_TIMED = re.compile(r"pid \d+|predicted step [\d.]+ \w+|MFU [\d.]+%")


@pytest.fixture(scope="module")
def run(tmp_path_factory, cuda_build, cuda_torch) -> dict:
    ((command, shown),) = examples(SECTION, "run")
    argv = shlex.split(command)[2:]  # after `fakegpu run`
    root = tmp_path_factory.mktemp("timeline")
    trace, reports = root / "traces" / "step.json", root / "reports"
    argv = [str(trace) if a == "step.json" else sys.executable if a == "python" else
            str(REPO / a) if a.startswith("examples/") else a for a in argv]
    argv = ["--report-dir", str(reports), *argv]
    proc = run_fakegpu(argv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (log,) = tl.logs_in(reports / "timeline")
    printed = (proc.stdout + proc.stderr.replace(str(trace), "step.json")).strip()
    return {"trace": trace, "doc": json.loads(trace.read_text()), "log": log, "printed": printed, "shown": shown}


def test_the_readme_shows_what_it_prints(run) -> None:
    lines = [line for line in run["printed"].splitlines() if not line.startswith("fakegpu: warning")]
    shown, replay = run["shown"].split("\n$ ")  # the replay-trace example follows
    assert HOST_TIMED.sub("#", "\n".join(lines)) == HOST_TIMED.sub("#", shown)
    # replay-trace's kernel table and event counts are the GPU's side: priced, not timed
    command, replay_shown = replay.split("\n", 1)
    assert command == "fakegpu replay-trace step.json"
    printed = CliRunner().invoke(app, ["replay-trace", str(run["trace"])])
    assert printed.exit_code == 0, printed.output
    ours = "\n".join(line.rstrip() for line in printed.stdout.splitlines())
    assert _gpu_side(ours) == _gpu_side(replay_shown)
    # MFU: replay-trace reads the FLOPs the timeline writes on its GEMMs and gives the MFU `run --timeline` prints
    sim = simulate(run["log"], Pricer(load_catalog().get("h100")))
    printed_summary = summary(sim, load_catalog().get("h100"))
    report, _ = analyse([run["trace"]])
    flops = report["ranks"][0]["flops"]
    assert flops["sources"].keys() == {"kernel args"} and flops["not_counted"]["gemm_kernels"] == 0
    assert flops["per_step"] == pytest.approx(printed_summary["gemm_flops"], rel=1e-9)
    assert flops["mfu_pct"] == pytest.approx(100 * printed_summary["mfu"], rel=1e-3)
    shown_mfu = float(re.search(r"MFU ([\d.]+)%", shown).group(1))
    assert shown_mfu > 0


def _gpu_side(text: str) -> str:
    """replay-trace's output from its kernel table on, without the FLOPs table's host-timed rows (step, MFU)."""
    lines, out, table = text[text.index("KERNELS"):].strip().splitlines(), [], False
    for line in lines:
        table = line.startswith("RANK  FLOPS/STEP") or (table and re.match(r"-|\d+ ", line) is not None)
        if not table:
            out.append(line)
    return "\n".join(out)


def test_hta_loads_and_analyses_the_trace(run) -> None:
    done = subprocess.run([sys.executable, "-m", "tests.perf.hta_peer", str(run["trace"].parent)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    peer = json.loads(done.stdout.strip().splitlines()[-1])["0"]
    assert peer["compute_pct"] > 0 and peer["span_us"] > 0
    report, _ = analyse([run["trace"]], round_us=True)
    (ours,) = report["ranks"]
    for key in ("compute_pct", "non_compute_pct", "idle_pct"):
        assert abs(ours[key] - peer[key]) <= 1.0, (key, ours[key], peer[key])
    assert ours["window"]["steps"] == 3  # four ProfilerSteps, the last cut off as the profiler's stop cuts it
    assert {"gemm", "elementwise"} <= set(ours["classes"])


def test_gemms_last_what_the_roofline_prices(run) -> None:
    gemms = [r for r in run["log"].records if r.kind == tl.GEMM]
    shapes = {(r.a & 0xFFFFFFFF, r.a >> 32, r.b & 0xFFFFFFFF) for r in gemms}
    in_proj = (3 * D_MODEL, TOKENS, D_MODEL)  # attention's input projection as PyTorch hands it to cuBLAS
    assert in_proj in shapes, shapes
    first = next(r for r in gemms if (r.a & 0xFFFFFFFF, r.a >> 32, r.b & 0xFFFFFFFF) == in_proj)
    assert first.d & 0xFFFF == CUDA_R_16BF  # autocast's bf16
    board = Board.of(load_catalog().get("h100"))
    op = Gemm(name="in_proj", dtype="bf16", m=in_proj[0], n=in_proj[1], k=in_proj[2])
    price_us = estimate_op(op, board, load())["device_seconds"]["expected"] * 1e6
    kernels = [e for e in run["doc"]["traceEvents"] if e.get("cat") == "kernel" and e["name"] == first.name
               and (e["args"].get("m"), e["args"].get("n"), e["args"].get("k")) == in_proj]
    assert kernels
    for k in kernels:
        assert k["dur"] == pytest.approx(price_us, abs=1e-3)
        assert "estimated" not in k["args"] and k["args"]["dtype"] == "bf16"


def test_launches_link_to_work_and_unknown_kernels_are_flagged(run) -> None:
    events = run["doc"]["traceEvents"]
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"
                and "correlation" in e["args"]}
    work = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert work and all(e["args"]["correlation"] in launches for e in work)
    for e in work:  # the GPU never starts a piece before its launch
        assert e["ts"] >= launches[e["args"]["correlation"]]["ts"]
    by_stream: dict[int, list[dict]] = {}
    for e in work:
        by_stream.setdefault(e["tid"], []).append(e)
    for track in by_stream.values():  # a stream runs one piece at a time
        track.sort(key=lambda e: e["ts"])
        assert all(a["ts"] + a["dur"] <= b["ts"] + 2e-3 for a, b in itertools.pairwise(track))  # ns rounding
    elementwise = [e for e in work if "elementwise_kernel" in e["name"]]
    assert elementwise and all(e["args"]["estimated"] is True for e in elementwise)
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("ProfilerStep#"))
    assert len(steps) == 4
    kernels = [e for e in work if e["cat"] == "kernel"]
    per_step = [sum(1 for e in kernels if a <= e["ts"] < b) for a, b in steps]
    assert len(set(per_step)) == 1, per_step  # the same step four times: as many kernels in each


DDP = """
import torch, torch.distributed as dist
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(512, 512).cuda(), device_ids=[rank])
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 512, device="cuda")

def step():
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()

step()
torch.cuda.synchronize()
for _ in range(3):
    step()
    torch.cuda.synchronize()
dist.destroy_process_group()
"""


def test_ranks_of_a_ddp_job_get_a_trace_each_with_collectives_priced_by_the_topology_model(
        tmp_path: Path, cuda_build, cuda_torch) -> None:
    from fakegpu.perf.timeline_price import _collective_time

    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    out = tmp_path / "traces" / "ddp.json"
    proc = run_fakegpu(["--devices", "h100:2", "--timeline", str(out), "--", sys.executable, "-m",
                        "torch.distributed.run", "--nproc_per_node", "2", str(script)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    docs = {int(p.name.split(".rank")[1].split(".")[0]): json.loads(p.read_text()) for p in out.parent.iterdir()}
    assert sorted(docs) == [0, 1]
    for rank, doc in docs.items():
        assert doc["distributedInfo"] == {"backend": "nccl", "rank": rank, "world_size": 2}
        reduces = [e for e in doc["traceEvents"] if e["name"].startswith("ncclDevKernel_AllReduce_Sum_f32")]
        assert len(reduces) >= 3  # one bucket per step: the Linear's 512 x 512 weight and its bias
        for e in reduces:
            assert e["args"]["In msg nelems"] == 512 * 512 + 512 and e["args"]["Group size"] == 2
    # the ranks are played together: each all-reduce ends on both ranks at once, the last to arrive spends the
    # topology model's time in it, the first that plus its wait
    seconds, _, _ = _collective_time(load_catalog().get("h100"), "all-reduce", 2, 4.0 * (512 * 512 + 512))
    pairs = list(zip(*([e for e in doc["traceEvents"] if e["name"].startswith("ncclDevKernel_AllReduce")]
                       for doc in (docs[0], docs[1])), strict=True))
    assert len(pairs) >= 3
    for a, b in pairs:
        assert a["ts"] + a["dur"] == pytest.approx(b["ts"] + b["dur"], abs=2e-3)
        assert min(a["dur"], b["dur"]) == pytest.approx(seconds * 1e6, abs=2e-3)
    done = subprocess.run([sys.executable, "-m", "tests.perf.hta_peer", str(out.parent)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    peer = {int(k): v for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}
    report, _ = analyse([out.parent], round_us=True)
    assert sorted(peer) == [r["rank"] for r in report["ranks"]] == [0, 1]
    for r in report["ranks"]:
        for key in ("compute_pct", "non_compute_pct", "idle_pct", "overlap_pct"):
            assert abs(r[key] - peer[r["rank"]][key]) <= 1.0, (r["rank"], key, r[key], peer[r["rank"]][key])



SKEWED = DDP.replace("""def step():
    model(x).pow(2).mean().backward()""", """w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)

def step():
    if rank == 1:  # the slow rank: 100 bf16 4096^3 matmuls (about 20 ms on an H100) before its all-reduce
        for _ in range(100):
            torch.mm(w, w)
    model(x).pow(2).mean().backward()""")


def test_a_fast_rank_waits_in_the_all_reduce_for_the_slow_one(tmp_path: Path, cuda_build, cuda_torch) -> None:
    """A real 2-rank job whose rank 1 does 100 matmuls more per step: rank 0's NCCL kernels start when it arrives
    and end with rank 1's, the last to arrive spending the topology model's time in it; rank 0's run longer by
    about those matmuls' priced time (the hosts' own timing, this machine's, moves it by milliseconds: half of it is
    asked); replay-trace reports the wait as rank 0's exposed communication."""
    from fakegpu.perf.timeline_price import _collective_time

    script = tmp_path / "skewed.py"
    script.write_text(SKEWED)
    out = tmp_path / "traces" / "ddp.json"
    proc = run_fakegpu(["--devices", "h100:2", "--timeline", str(out), "--", sys.executable, "-m",
                        "torch.distributed.run", "--nproc_per_node", "2", str(script)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "do not match" not in proc.stderr
    docs = {int(p.name.split(".rank")[1].split(".")[0]): json.loads(p.read_text()) for p in out.parent.iterdir()}

    def reduces(doc):
        return [e for e in doc["traceEvents"] if e["name"].startswith("ncclDevKernel_AllReduce")]

    big = [e for e in docs[1]["traceEvents"] if e.get("args", {}).get("m") == 4096]
    steps = len(reduces(docs[1]))
    assert len(big) == 100 * steps
    extra_us = sum(e["dur"] for e in big) / steps
    seconds, _, _ = _collective_time(load_catalog().get("h100"), "all-reduce", 2, 4.0 * (512 * 512 + 512))
    slow_ends = [(e["ts"] + e["dur"], e) for e in reduces(docs[1])]
    waits = []
    for i, fast in enumerate(reduces(docs[0])):
        # both end the collective together: matched by the nearest end, not by rounding, since two sums of floats
        # equal to the nanosecond can round apart (a CI run failed with KeyError: 1259720.7)
        end = fast["ts"] + fast["dur"]
        slow_end, slow = min(slow_ends, key=lambda pair: abs(pair[0] - end))
        assert abs(slow_end - end) <= 0.01, (end, slow_end)
        # Whichever rank arrived last spends the priced transfer in it. The first timed step still holds DDP's
        # first-iteration host work (bucket rebuilding), timed on this machine's clock, which can make rank 0
        # later than rank 1's matmuls (seen with a parallel test run beside it); the steps after it are steady,
        # and in them rank 1 is the last to arrive.
        assert min(fast["dur"], slow["dur"]) == pytest.approx(seconds * 1e6, abs=2e-3)
        if i:
            assert slow["dur"] == pytest.approx(seconds * 1e6, abs=2e-3)
            waits.append(fast["dur"] - slow["dur"])
    assert waits and all(w >= extra_us / 2 for w in waits), (waits, extra_us)
    # Every collective's wait, not only the all-reduces': DDP's constructor broadcasts the parameters from rank 0,
    # and under load rank 1 reaches that broadcast first and waits in it (8.7 ms seen with two busy processes
    # beside the test). Both ranks run the same collectives in the same order.
    def collectives(doc):
        return [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel_")]

    pairs = list(zip(collectives(docs[0]), collectives(docs[1]), strict=True))
    assert all(a["name"] == b["name"] for a, b in pairs)
    comm_diffs = [a["dur"] - b["dur"] for a, b in pairs]
    report, _ = analyse([out.parent])
    r0, r1 = report["ranks"]
    assert r0["communication_us"] - r1["communication_us"] == pytest.approx(sum(comm_diffs), abs=0.01)
    exposed_diff = r0["exposed_communication_us"] - r1["exposed_communication_us"]
    assert exposed_diff >= sum(comm_diffs) - 0.01 * sum(map(abs, comm_diffs)), (exposed_diff, comm_diffs)
    assert report["across_ranks"]["slowest_rank"] == 1
