"""The simulated timeline's rules on hand-made logs (no native build needed): CUDA's stream ordering (the legacy
default stream against blocking and non-blocking streams, cudaStreamWaitEvent), the host waiting at a
synchronisation and everything after it moving by that wait, the log format's reader, `fakegpu run
--timeline`'s refusals, and the price sheet native mode's CUPTI prices torch.profiler's kernels with."""

from __future__ import annotations

import itertools
import re
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fakegpu.cli.main import app
from fakegpu.errors import TraceError
from fakegpu.perf import timeline_log as tl
from fakegpu.perf.timeline import simulate
from fakegpu.perf.timeline_price import COLLECTIVES, Price, Pricer, collective_samples, gemm_dtype, price_sheet
from fakegpu.perf.trace_kernels import kernel_class

US = 1000  # ns
KERNEL_US = 10.0


class Fixed:
    """Every kernel lasts KERNEL_US, every GEMM twice that: the rules, not the prices, are under test."""

    def kernel(self, name: str, threads: int) -> Price:
        return Price(KERNEL_US * 1e-6, {}, estimated=True)

    def gemm(self, routine, m, n, k, batch, types) -> Price:
        return Price(2 * KERNEL_US * 1e-6, {"m": m}, flops=2.0 * m * n * k, dtype="fp32")

    def memcpy(self, direction: str, nbytes: int) -> Price:
        return Price(KERNEL_US * 1e-6, {})


def rec(kind: int, t_us: float, stream: int = 0, sub: int = 0, a: int = 0, b: int = 0, c: int = 0, d: int = 0,
        name: str | None = None, tid: int = 1) -> tl.Record:
    grid_block = (1, 1 << 16) if kind == tl.KERNEL else (b, c)
    t = int(t_us * US)  # the same spacing on both clocks: each call takes 1 us
    return tl.Record(kind, sub, 0, tid, t, t, US, US, stream, a, grid_block[0] or b, grid_block[1] or c, d, name)


def log(*records: tl.Record) -> tl.TimelineLog:
    return tl.TimelineLog(Path("x.fgtl"), 42, None, None, None, 0, 1_700_000_000 * 10**9, list(records))


def by_name(sim):
    return {w.name: w for w in sim.gpu}


def test_streams_order_as_cuda_orders_them() -> None:
    sim = simulate(log(
        rec(tl.STREAM_CREATE, 0, stream=0x100, a=1),  # non-blocking
        rec(tl.STREAM_CREATE, 0, stream=0x200, a=0),  # blocking
        rec(tl.KERNEL, 10, stream=0, name="legacy"),
        rec(tl.KERNEL, 12, stream=0x100, name="nonblocking"),
        rec(tl.KERNEL, 14, stream=0x200, name="blocking"),
        rec(tl.EVENT_RECORD, 16, stream=0x100, a=0xE),
        rec(tl.STREAM_WAIT, 18, stream=0x200, a=0xE),
        rec(tl.KERNEL, 19, stream=0x200, name="after-event"),
    ), Fixed())
    w = by_name(sim)
    assert w["legacy"].start_ns == 11 * US  # at its launch's return
    assert w["nonblocking"].start_ns == 13 * US  # overlaps the legacy stream's kernel
    assert w["blocking"].start_ns == w["legacy"].end_ns  # the legacy stream's implicit synchronisation
    event_done = w["nonblocking"].end_ns
    assert w["after-event"].start_ns == max(w["blocking"].end_ns, event_done)
    assert all(g.estimated for g in sim.gpu)


def test_the_host_waits_at_a_synchronisation_and_later_work_moves_with_it() -> None:
    sim = simulate(log(
        rec(tl.GEMM, 10, a=128 | 256 << 32, b=64 | 1 << 32, name="cublasSgemm_v2"),
        rec(tl.KERNEL, 10, name="cublasSgemm_v2"),
        rec(tl.SYNC, 12, sub=tl.SYNC_DEVICE),
        rec(tl.KERNEL, 20, name="next"),
        rec(tl.SYNC, 22, sub=tl.SYNC_DEVICE),
        rec(tl.MEMCPY, 30, sub=tl.DTOH, a=4, b=0),  # a synchronous copy: the host waits for it too
        rec(tl.KERNEL, 40, name="last"),
    ), Fixed())
    gemm = by_name(sim)["cublasSgemm_v2"]
    assert gemm.end_ns - gemm.start_ns == 2 * KERNEL_US * US and gemm.flops == 2.0 * 128 * 256 * 64
    first_wait = gemm.end_ns - 13 * US  # the sync returned at 13 us recorded; the GEMM ended later
    sync = sim.host[1]
    assert sync.name == "cudaDeviceSynchronize" and sync.end_ns == gemm.end_ns
    nxt = by_name(sim)["next"]
    assert nxt.start_ns == 21 * US + first_wait  # the host is late by the wait, and so is its next launch
    copy = next(g for g in sim.gpu if g.cat == "gpu_memcpy")
    last = by_name(sim)["last"]
    assert last.start_ns == 41 * US + sim.host_wait_ns and copy.end_ns <= last.start_ns
    assert len(sim.steps) == 1 and sim.steps[0][1] > sim.steps[0][0]


def test_the_host_is_spaced_by_cpu_time_unless_wall_time_is_asked_for() -> None:
    # the process was off the CPU for 1 ms between the two launches (another program ran): wall time shows the gap
    first = tl.Record(tl.KERNEL, 0, 0, 1, 10 * US, 5 * US, US, US, 0, 0, 1, 1 | 1 << 16, 0, "a")
    second = tl.Record(tl.KERNEL, 0, 0, 1, 1011 * US, 7 * US, US, US, 0, 0, 1, 1 | 1 << 16, 0, "b")
    cpu = simulate(log(first, second), Fixed()).host
    wall = simulate(log(first, second), Fixed(), host_clock="wall").host
    assert cpu[1].start_ns - cpu[0].start_ns == 2 * US
    assert wall[1].start_ns - wall[0].start_ns == 1001 * US


def test_gemm_math_follows_the_recorded_types() -> None:
    fp32, tf32_compute, bf16, unknown = 0, 77, 14, 0xFFFF
    assert gemm_dtype("cublasGemmEx", fp32 | 68 << 16) == "fp32"
    assert gemm_dtype("cublasGemmEx", fp32 | 68 << 16 | 1 << 48) == "tf32"  # the handle's TF32 math mode
    assert gemm_dtype("cublasLtMatmul", fp32 | tf32_compute << 16) == "tf32"
    assert gemm_dtype("cublasLtMatmul", bf16 | 68 << 16) == "bf16"
    assert gemm_dtype("cublasDgemm_v2", unknown | unknown << 16) == "fp64"


def test_the_reader_keeps_whole_records_and_says_when_cut(tmp_path: Path) -> None:
    header = tl.HEADER.pack(tl.MAGIC, 7, 1, 2, 1, 5, 6)
    name = b"my_kernel"
    body = tl.RECORD.pack(tl.NAME, 0, 0, 0, 0, 0, 0, 0, 0, 1, len(name), 0, 0) + name + b"\0" * (-len(name) % 8)
    body += tl.RECORD.pack(tl.KERNEL, 0, 0, 3, 100, 50, 100, 90, 0, 1, 1 | 1 << 32, 1 | 128 << 16, 0)
    path = tmp_path / "7.fgtl"
    path.write_bytes(header + body + b"\1\2\3")
    got = tl.read_log(path)
    assert (got.pid, got.rank, got.world, got.local_rank) == (7, 1, 2, 1)
    assert [(r.kind, r.name, r.t0, r.t1, r.cpu0, r.cpu_dur) for r in got.records] == [
        (tl.KERNEL, "my_kernel", 100, 200, 50, 90)]
    assert got.cut_short
    (tmp_path / "8.fgtl").write_bytes(struct.pack("<8s", b"nope") + b"\0" * 64)
    with pytest.raises(TraceError, match="not a FakeGPU timeline log"):
        tl.read_log(tmp_path / "8.fgtl")


@pytest.mark.parametrize(("args", "message"), [
    (["--mode", "fakecuda", "--timeline", "TRACE"], "needs native mode"),
    (["--timeline", "TRACE", "--profile", "h10O-nope"], "unknown GPU profile 'h10O-nope'"),
    (["--profile", "h100"], "give --timeline"),
])
def test_run_refuses_a_timeline_it_cannot_write(args: list[str], message: str, tmp_path: Path) -> None:
    args = [str(tmp_path / "t.json") if a == "TRACE" else a for a in args]
    result = CliRunner().invoke(app, ["run", *args, "--", "true"])
    assert result.exit_code != 0
    assert message in result.output
    assert not (tmp_path / "t.json").exists()


def _sheet(profile_id: str) -> dict[str, list[str]]:
    from fakegpu.profiles import load_catalog

    items: dict[str, list[str]] = {}
    for item in price_sheet(load_catalog().get(profile_id)).split(";"):
        key, _, value = item.partition("=")
        items.setdefault(key, []).append(value)
    return items


@pytest.mark.parametrize("profile_id", ["h100-sxm5-80gb", "a100-sxm4-80gb"])
def test_the_price_sheet_gives_cupti_the_pricers_gemm_prices(profile_id: str) -> None:
    """native/cuda/cupti/activity.c prices a GEMM as fixed + max(FLOPs / compute, bytes / memory) from the sheet's
    rates: restated here, that is Pricer.gemm's price for every dtype, plain and batched."""
    from fakegpu.profiles import load_catalog

    pricer, sheet = Pricer(load_catalog().get(profile_id)), _sheet(profile_id)
    types = {"fp32": 0, "fp64": 1, "fp16": 2, "bf16": 14}
    for dtype, code in types.items():
        c, m, fixed, e, out = map(float, sheet[f"gemm.{dtype}"][0].split(","))
        bc, bm = map(float, sheet[f"bmm.{dtype}"][0].split(","))
        for mm, n, k, batch in ((512, 512, 512, 1), (8, 32, 128, 1), (4096, 1024, 64, 12)):
            flops = 2.0 * batch * mm * n * k
            nbytes = batch * (mm * k * e + mm * n * out) + batch * k * n * e
            rc, rm = (bc, bm) if batch > 1 else (c, m)
            ours = fixed + max(flops / rc, nbytes / rm)
            assert ours == pricer.gemm("cublasGemmEx", mm, n, k, batch, code | 0xFFFF << 16).seconds


@pytest.mark.parametrize("profile_id", ["h100-sxm5-80gb", "a100-sxm4-80gb"])
def test_the_price_sheet_carries_the_topology_models_collectives(profile_id: str) -> None:
    """activity.c prices a collective by linear interpolation between the sheet's (bytes, seconds) samples, and
    past the last one at the last segment's rate: restated here, the samples are Pricer.collective's prices (the
    timeline's) to the bit, and any size between or beyond them lands on the model's price (to well within 1%).
    The sheet travels in an environment variable: it stays small."""
    from fakegpu.profiles import load_catalog

    pricer = Pricer(load_catalog().get(profile_id))
    text = price_sheet(pricer.profile)
    assert len(text.encode()) < 32 * 1024
    sheet = _sheet(profile_id)
    assert {k for k in sheet if k.startswith("coll.")} == {
        f"coll.{kind}.{ranks}" for kind in range(len(COLLECTIVES)) for ranks in range(2, 9)
    }
    for kind in range(len(COLLECTIVES)):
        for ranks in (2, 3, 5, 8):
            row = [tuple(map(float, pair.split(":"))) for pair in sheet[f"coll.{kind}.{ranks}"][0].split(",")]
            assert row == collective_samples(pricer, kind, ranks)
            assert row[0][0] == 1.0 and row[-1][0] == 4.0 * 2**30
            for size, seconds in row:
                assert seconds == pricer.collective(kind, size, ranks).seconds
            for size in (3, 700, 5000, 1_050_624, 3_000_000, 77_777_777, 6 << 30):
                (x0, t0), (x1, t1) = next(
                    ((a, b) for a, b in itertools.pairwise(row) if size <= b[0]), (row[-2], row[-1])
                )
                ours = t0 + (size - x0) * (t1 - t0) / (x1 - x0)
                assert ours == pytest.approx(pricer.collective(kind, size, ranks).seconds, rel=1e-6)


def test_the_price_sheets_class_rules_are_kernel_class_in_posix_spelling() -> None:
    """The sheet's rules, compiled as C's regcomp would read them (no \\d: [0-9]), sort kernels as kernel_class
    does: the first match decides whether a kernel is priced as a reduction."""
    rules = [(v[0] == "r", re.compile(v[2:], re.I)) for v in _sheet("h100-sxm5-80gb")["class"]]
    names = ["void at::native::reduce_kernel<512, 1>", "void at::native::vectorized_elementwise_kernel<4>",
             "sm90_xmma_gemm_f32f32_tf32", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "softmax_warp_forward",
             "cunn_SoftMaxForward", "fmha_cutlassF_f32_aligned_64x64", "triton_poi_fused_add_0", "sum_functor",
             "cudnn:convolution", "layer_norm_kernel", "mystery"]
    for name in names:
        first = next((reduction for reduction, rule in rules if rule.search(name)), False)
        assert first == (kernel_class(name) == "reduction"), name
