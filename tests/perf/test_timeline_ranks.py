"""The ranks of a simulated timeline played together (fakegpu/perf/timeline_ranks.py), on logs built here record
by record in the C side's format (native/cuda/common/fgc_timeline.h): a 2-rank job where rank 1 does more matmuls
before each all-reduce. The fast rank's NCCL kernel starts when it arrives and ends with the slow rank's; the
transfer itself lasts what the topology model prices; replay-trace reports the wait as the fast rank's exposed
communication; MFU in replay-trace is what `run --timeline` prints; HTA loads the traces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.perf import timeline_log as tl
from fakegpu.perf.timeline import simulate
from fakegpu.perf.timeline_kineto import kineto, summary, write
from fakegpu.perf.timeline_price import Pricer
from fakegpu.perf.timeline_ranks import simulate_job
from fakegpu.perf.trace_replay import analyse
from fakegpu.profiles import load_catalog

REPO = Path(__file__).resolve().parents[2]
US = 1000
GEMM = "cublasGemmEx"
BF16 = 14  # cudaDataType CUDA_R_16BF
M = N = K = 4096
ELEMS = 64 << 20  # an all-reduce of 64 Mi fp32 elements (256 MiB): long enough to see on the timeline
FLOAT, SUM = 7, 0
TAG = 0x5EED


def _rec(kind: int, t_us: float, *, sub: int = 0, a: int = 0, b: int = 0, c: int = 0, d: int = 0,
         name: str | None = None) -> tl.Record:
    t = int(t_us * US)
    return tl.Record(kind, sub, 0, 1, t, t, US, US, 0, a, b, c, d, name)


def _log(rank: int, gemms: int, steps: int = 4, tag: int = TAG) -> tl.TimelineLog:
    """`steps` steps, each: `gemms` bf16 GEMMs, an all-reduce, a device synchronisation. The host issues every
    call 2 us after the last one: the GPU sets the pace."""
    recs, t = [_rec(tl.SYNC, 0.0, sub=tl.SYNC_DEVICE)], 2.0
    for _ in range(steps):
        for _ in range(gemms):
            recs.append(_rec(tl.GEMM, t, a=M | N << 32, b=K | 1 << 32, d=BF16, name=GEMM))
            recs.append(_rec(tl.KERNEL, t + 1, b=1 | 1 << 32, c=1 | 128 << 16 | 1 << 32 | 1 << 48, name=GEMM))
            t += 2
        recs.append(_rec(tl.COLL, t, sub=0, a=4 * ELEMS, b=ELEMS, c=2 | rank << 32, d=FLOAT | SUM << 16 | tag << 32))
        recs.append(_rec(tl.SYNC, t + 2, sub=tl.SYNC_DEVICE))
        t += 4
    return tl.TimelineLog(Path(f"{rank}.fgtl"), 1000 + rank, rank, 2, rank, 0, 1_700_000_000 * 10**9, recs)


def _colls(sim):
    return [w for w in sim.gpu if w.name.startswith("ncclDevKernel")]


@pytest.fixture(scope="module")
def pricer() -> Pricer:
    return Pricer(load_catalog().get("h100"))


def test_a_collective_waits_for_the_last_rank_and_ends_together(pricer: Pricer) -> None:
    fast, slow = simulate_job([_log(0, gemms=1), _log(1, gemms=5)], pricer)
    transfer = pricer.collective(0, 4 * ELEMS, 2).seconds * 1e9
    gemm = pricer.gemm(GEMM, M, N, K, 1, BF16).seconds * 1e9
    assert len(_colls(fast)) == len(_colls(slow)) == 4
    for f, s in zip(_colls(fast), _colls(slow), strict=True):
        assert f.end_ns == pytest.approx(s.end_ns)  # both finish the collective together
        assert s.end_ns - s.start_ns == pytest.approx(transfer)  # the last to arrive does not wait
        # the fast rank arrived 4 GEMMs earlier: its kernel spins that long before the transfer
        assert (f.end_ns - f.start_ns) - transfer == pytest.approx(4 * gemm, rel=1e-3)
    # the host of the fast rank waits at each step's synchronisation for the slow rank: both steps are as long
    assert [e - s for s, e in fast.steps] == pytest.approx([e - s for s, e in slow.steps], rel=1e-6)
    # alone, the fast rank would have run its step in a GEMM and a transfer
    alone = simulate(_log(0, gemms=1), pricer)
    assert alone.steps[0][1] - alone.steps[0][0] < fast.steps[0][1] - fast.steps[0][0] - 3 * gemm


def test_one_rank_is_priced_as_before(pricer: Pricer) -> None:
    (joint,) = simulate_job([_log(0, gemms=2)], pricer)
    alone = simulate(_log(0, gemms=2), pricer)
    assert [(w.name, w.start_ns, w.end_ns) for w in joint.gpu] == [(w.name, w.start_ns, w.end_ns) for w in alone.gpu]


@pytest.mark.parametrize("change", ["fewer", "other-count"])
def test_collectives_that_do_not_match_are_reported_not_guessed(pricer: Pricer, change: str) -> None:
    other = _log(1, gemms=3, steps=3) if change == "fewer" else _log(1, gemms=3)
    if change == "other-count":
        recs = [r if r.kind != tl.COLL else tl.Record(*(getattr(r, f) for f in (
            "kind", "sub", "device", "tid", "t0", "cpu0", "dur", "cpu_dur", "stream", "a")), r.b + 1, r.c, r.d)
            for r in other.records]
        other.records[:] = recs
    sims = simulate_job([_log(0, gemms=1), other], pricer)
    for sim in sims:
        (note,) = [n for n in sim.notes if "do not match" in n]
        assert ("rank 1 ended with no such collective" in note if change == "fewer"
                else f"rank 0 issued all-reduce of {ELEMS} elements" in note and f"{ELEMS + 1} elements" in note)
    # priced rank by rank: the fast rank's collectives are not held for the slow one
    assert [w.start_ns for w in sims[0].gpu] == [w.start_ns for w in simulate(_log(0, gemms=1), pricer).gpu]


def _traces(tmp_path: Path, pricer: Pricer) -> tuple[Path, list]:
    folder = tmp_path / "traces"
    sims = simulate_job([_log(0, gemms=1), _log(1, gemms=5)], pricer)
    for sim in sims:
        write(folder / f"job.rank{sim.rank}.json", kineto(sim, pricer.profile))
    return folder, sims


def test_replay_trace_reports_the_wait_as_exposed_communication_and_the_same_mfu(tmp_path: Path,
                                                                                  pricer: Pricer) -> None:
    folder, sims = _traces(tmp_path, pricer)
    report, _ = analyse([folder])
    fast, slow = report["ranks"]
    transfer_us = pricer.collective(0, 4 * ELEMS, 2).seconds * 1e6
    gemm_us = pricer.gemm(GEMM, M, N, K, 1, BF16).seconds * 1e6
    steps = fast["window"]["steps"]
    assert steps == 3  # four steps between five synchronisations, the last left out as a profiler's would be
    assert slow["exposed_communication_us"] == pytest.approx(steps * transfer_us, rel=1e-3)
    assert fast["exposed_communication_us"] == pytest.approx(steps * (transfer_us + 4 * gemm_us), rel=1e-3)
    assert fast["step_us"] == pytest.approx(slow["step_us"], rel=1e-3)
    # the FLOPs the timeline writes on its GEMMs give replay-trace the MFU `run --timeline` prints
    for row, sim in zip(report["ranks"], sims, strict=True):
        printed = summary(sim, pricer.profile)
        f = row["flops"]
        assert f["sources"] == {"kernel args": {"ops": steps * (1 if sim.rank == 0 else 5),
                                                "flops": steps * printed["gemm_flops"]}}
        assert f["per_step"] == pytest.approx(printed["gemm_flops"])
        assert f["dominant_dtype"] == printed["mfu_dtype"] == "bf16" and f["profile"] == pricer.profile.id
        assert f["step_basis"] == "ProfilerStep period"
        assert f["mfu_pct"] == pytest.approx(100 * printed["mfu"], rel=1e-4)
    assert report["mfu"]["mfu_pct"] == pytest.approx(
        (fast["flops"]["mfu_pct"] + slow["flops"]["mfu_pct"]) / 2, rel=1e-3)


@pytest.mark.slow
def test_hta_loads_the_jointly_priced_traces(tmp_path: Path, pricer: Pricer) -> None:
    folder, _ = _traces(tmp_path, pricer)
    done = subprocess.run([sys.executable, "-m", "tests.perf.hta_peer", str(folder)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    peer = {int(k): v for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}
    report, _ = analyse([folder], round_us=True)
    assert sorted(peer) == [0, 1]
    for r in report["ranks"]:
        for key in ("compute_pct", "non_compute_pct", "idle_pct"):
            assert abs(r[key] - peer[r["rank"]][key]) <= 1.0, (r["rank"], key, r[key], peer[r["rank"]][key])


def test_ranks_share_one_clock_from_each_process_start(pricer: Pricer) -> None:
    """Rank 1's process started 500 us after rank 0's (its log's header instant on the monotonic clock, which the
    processes of a host share): rank 0 waits that long in the first all-reduce, and not after."""
    late = _log(1, gemms=1)
    delay = 500 * US
    late.t0_monotonic_ns += delay
    late.t0_realtime_ns += delay
    late.records[:] = [tl.Record(r.kind, r.sub, r.device, r.tid, r.t0 + delay, r.cpu0 + delay, r.dur, r.cpu_dur,
                                 r.stream, r.a, r.b, r.c, r.d, r.name) for r in late.records]
    early, later = simulate_job([_log(0, gemms=1), late], pricer)
    transfer = pricer.collective(0, 4 * ELEMS, 2).seconds * 1e9
    first_early, first_late = _colls(early)[0], _colls(later)[0]
    assert first_early.end_ns == pytest.approx(first_late.end_ns)
    assert (first_early.end_ns - first_early.start_ns) - transfer == pytest.approx(delay, rel=1e-6)
    assert first_late.end_ns - first_late.start_ns == pytest.approx(transfer)
    for a, b in zip(_colls(early)[1:], _colls(later)[1:], strict=True):
        assert a.end_ns - a.start_ns == pytest.approx(transfer, rel=1e-6)
        assert b.end_ns - b.start_ns == pytest.approx(transfer, rel=1e-6)
    assert early.base_realtime_ns == later.base_realtime_ns  # the traces' ts are on the job's one time base
