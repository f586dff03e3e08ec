"""replay-trace on hand-written traces whose answers are worked out by hand: the breakdown, the step window, the
kernel classes, memory, collectives, ranks and their errors, the what-if and the CLI's --json against its schema."""

from __future__ import annotations

import json

import pytest

from fakegpu.errors import TraceError
from fakegpu.perf.trace_kernels import hta_category, kernel_class, kernel_dtype
from fakegpu.perf.trace_replay import analyse
from fakegpu.perf.trace_whatif import bandwidth_ratio_pricer, what_if
from fakegpu.profiles import load_catalog
from fakegpu.reports import validate
from tests.perf.conftest import runner
from tests.perf.kineto import A100, ADD, FLASH, GEMM, NORM, SUM, Trace, training_steps


def _small(tmp_path, name="t.json", **kw):
    """GEMM [0,100) and ADD [110,120) on stream 7, an all-reduce [50,150) on stream 20, a copy [160,170)."""
    t = Trace(**kw)
    t.kernel(GEMM, 0, 100)
    t.nccl("allreduce", 50, 100, nelems=1000, dtype="Float")
    t.kernel(ADD, 110, 10)
    t.kernel("Memcpy DtoH (Device -> Pageable)", 160, 10, cat="gpu_memcpy", bytes=4096)
    t.memory(-10, 1000, 2048, 1000)
    t.memory(60, 5000, 8192, 4000)
    t.memory(165, 3000, 8192, -2000)
    t.memory(170, 7777, 9999, 123, device_type=0)
    return t.write(tmp_path / name)


def test_the_breakdown_by_hand(tmp_path):
    report, _ = analyse([_small(tmp_path)])
    r = report["ranks"][0]
    assert r["span_us"] == 170 and r["busy_us"] == 160 and r["idle_us"] == 10
    assert r["compute_us"] == 110 and r["non_compute_us"] == 50
    assert r["communication_us"] == 100 and r["memory_us"] == 10
    assert r["overlap_us"] == 60 and r["exposed_communication_us"] == 40
    assert r["overlap_pct"] == 60.0
    assert r["compute_pct"] == pytest.approx(100 * 110 / 170, abs=1e-3)
    assert r["idle_pct"] == pytest.approx(100 * 10 / 170, abs=1e-3)
    assert r["classes"]["gemm"] == {"count": 1, "total_us": 100.0, "share_pct": pytest.approx(100 * 100 / 220)}
    assert set(r["classes"]) == {"gemm", "elementwise", "nccl", "memcpy"}
    assert r["window"]["mode"].startswith("all activities") and r["window"]["outside_window"] == 0
    assert r["collectives"]["allreduce"] == {"count": 1, "total_us": 100.0, "bytes": 4000, "bytes_known": 1,
                                             "group_sizes": [2], "algbw_gb_s": pytest.approx(4000 / 100e3)}
    mem = r["memory"]["device"]
    assert mem["peak_allocated_bytes"] == 5000 and mem["peak_reserved_bytes"] == 8192
    assert mem["peak_at_us"] == 60 and mem["samples"] == 3 and len(mem["timeline"]) == 3
    assert r["memory"]["host"]["peak_allocated_bytes"] == 7777
    assert r["device"] == "NVIDIA H100 80GB HBM3"
    validate(report)


def test_the_last_profiler_step_is_left_out_unless_asked(tmp_path):
    t = Trace()
    training_steps(t, 4)
    path = t.write(tmp_path / "t.json")
    per_step = 1 + 7 + 5 + 1  # copy, forward, backward, memset
    report, _ = analyse([path])
    w = report["ranks"][0]["window"]
    # The window ends where the last ProfilerStep event begins: the GPU's annotation of step 4 starts 10 us after
    # the host's, and step 4's first copy was launched in between (HTA draws the line at the same place).
    assert w["steps"] == 3 and w["activities"] == 3 * per_step + 1 and w["outside_window"] == per_step - 1
    assert w["step_names"] == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    assert any("outside the window" in n for n in report["notes"])
    report, _ = analyse([path], include_last_step=True)
    assert report["ranks"][0]["window"]["activities"] == 4 * per_step


def test_hta_categories_follow_its_name_rules():
    assert hta_category("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)") == "communication"
    assert hta_category("ncclSomethingElse") == "compute"  # HTA: nccl... without 'Kernel' is not communication
    assert hta_category("Memcpy HtoD (Pageable -> Device)") == "memory"
    assert hta_category("Memset (Device)") == "memory"
    assert hta_category("my_Memcpy_kernel") == "other"
    assert hta_category("SyncBatchNormKernel") == "other"
    assert hta_category(GEMM) == hta_category(ADD) == "compute"


@pytest.mark.parametrize("name,cls", [
    (GEMM, "gemm"), ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", "gemm"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm"), (FLASH, "attention"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention"), (ADD, "elementwise"), (NORM, "reduction"),
    (SUM, "reduction"), ("ncclDevKernel_AllGather_RING_LL", "nccl"), ("Memset (Device)", "memset"),
    ("triton_poi_fused_add_0", "elementwise"), ("some_custom_kernel", "other"),
    # names from real A100 traces: FBGEMM's embedding lookups and cub's sorts are not GEMMs
    ("void fbgemm_gpu::split_embedding_codegen_forward_unweighted_kernel<c10::Half, float>()", "elementwise"),
    ("void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, long>>()", "reduction"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x64_32x6_nt_align4>(Params)", "gemm"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 64, 64>()", "elementwise"),
])
def test_kernel_classes(name, cls):
    assert kernel_class(name) == cls


def test_kernel_dtypes_from_names():
    assert kernel_dtype(GEMM) == "bf16"
    assert kernel_dtype("volta_sgemm_128x64_nn") == "fp32"
    assert kernel_dtype("sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize96x128x32") == "fp16"
    assert kernel_dtype("cutlass_80_tensorop_s1688gemm_tf32_256x128") == "tf32"
    assert kernel_dtype("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x64_32x6_nt_align4>") == "tf32"
    assert kernel_dtype("ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_64x3_nn") == "fp16"
    assert kernel_dtype("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn") == "bf16"
    assert kernel_dtype("some_kernel") is None


def _two_ranks(tmp_path, world=2, ranks=(0, 1), slow=1):
    traces = [Trace(rank=r, world=world) for r in ranks]
    training_steps(traces, 4, comm=True, compute_scale=[1.5 if r == slow else 1.0 for r in ranks])
    for r, t in zip(ranks, traces, strict=True):
        t.write(tmp_path / f"rank{r}.json.gz")
    return tmp_path


def test_two_ranks_from_distributed_info_and_the_straggler(tmp_path):
    report, _ = analyse([_two_ranks(tmp_path)])
    assert [r["rank"] for r in report["ranks"]] == [0, 1] and report["input"]["world_size"] == 2
    x = report["across_ranks"]
    assert x["slowest_rank"] == 1 and x["matched_collectives"] == 3
    assert x["last_arrivals"] == {"0": 0, "1": 3}
    assert x["wait_us"]["1"] == 0 and x["wait_us"]["0"] > 0
    assert x["stragglers"] == [1]
    assert "gemm kernels" in x["why"]
    validate(report)


def test_a_missing_or_repeated_rank_is_an_error(tmp_path):
    (tmp_path / "a").mkdir()
    _two_ranks(tmp_path / "a", world=3)
    with pytest.raises(TraceError, match=r"rank\(s\) 2 missing: the files hold rank\(s\) 0-1 of world size 3"):
        analyse([tmp_path / "a"])
    report, _ = analyse([tmp_path / "a"], allow_missing_ranks=True)
    assert report["input"]["missing_ranks"] == [2] and any("rank(s) 2 of the job" in n for n in report["notes"])
    validate(report)
    (tmp_path / "b").mkdir()
    _two_ranks(tmp_path / "b")
    with pytest.raises(TraceError, match="rank 0 again"):
        analyse([tmp_path / "b" / "rank0.json.gz", tmp_path / "b" / "rank0.json.gz", tmp_path / "b"])
    (tmp_path / "c").mkdir()
    _small(tmp_path / "c", "x.json")
    _small(tmp_path / "c", "y.json")
    with pytest.raises(TraceError, match=r"no distributedInfo\.rank"):
        analyse([tmp_path / "c"])
    (tmp_path / "d").mkdir()
    with pytest.raises(TraceError, match="no trace files"):
        analyse([tmp_path / "d"])


def test_rank_ranges():
    from fakegpu.perf.trace_window import ranges

    assert ranges([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8" and ranges(list(range(2, 128))) == "2-127"


def test_one_rank_of_a_larger_job_is_read_alone(tmp_path):
    _two_ranks(tmp_path)
    report, _ = analyse([tmp_path / "rank1.json.gz"])
    assert report["input"]["ranks"] == [1]
    assert any("one rank of a larger job" in n for n in report["notes"])


def test_what_if_on_the_same_board_replays_the_trace(tmp_path):
    path = tmp_path / "t.json"
    t = Trace()
    training_steps(t, 4)
    t.write(path)
    report, windows = analyse([path])
    h100 = load_catalog().get("h100")
    w = what_if(windows, h100)
    assert w["source_profile"] == w["target_profile"] == "h100-sxm5-80gb"
    # gaps are kept and kernels unchanged: the replay reproduces the recorded span
    assert w["ranks"][0]["replayed_source_us"] == pytest.approx(report["ranks"][0]["span_us"])
    assert w["predicted_step_us"] == pytest.approx(report["ranks"][0]["step_us"])


def test_what_if_scales_gemms_by_the_rooflines_rates(tmp_path):
    t = Trace()
    t.kernel(GEMM, 0, 1000)
    _, windows = analyse([t.write(tmp_path / "t.json")])
    catalog = load_catalog()
    h100, a100 = catalog.get("h100"), catalog.get("a100")
    w = what_if(windows, a100)
    from fakegpu.perf.roofline import Board
    from fakegpu.profiles.efficiency import load

    eff = load()
    src = Board.of(h100).matrix_peak("bf16") * eff.factor("hopper", "gemm.compute.bf16").expected
    dst = Board.of(a100).matrix_peak("bf16") * eff.factor("ampere", "gemm.compute.bf16").expected
    fixed_src, fixed_dst = eff.kernel_fixed_s("hopper") * 1e6, eff.kernel_fixed_s("ampere") * 1e6
    assert w["predicted_step_us"] == pytest.approx(fixed_dst + (1000 - fixed_src) * src / dst)
    assert "989.4 TFLOP/s" in w["basis"]["gemm"]["source"]


def test_what_if_needs_the_source_board(tmp_path):
    t = Trace(device={"id": 0, "name": "Some Unknown Accelerator"})
    t.kernel(GEMM, 0, 100)
    _, windows = analyse([t.write(tmp_path / "t.json")])
    a100 = load_catalog().get("a100")
    with pytest.raises(Exception, match="--from-profile"):
        what_if(windows, a100)
    assert what_if(windows, a100, from_profile="h100")["source_profile"] == "h100-sxm5-80gb"


def test_the_collective_pricer_is_a_seam(tmp_path):
    for r in (0, 1):  # an exposed all-reduce between two kernels
        t = Trace(rank=r, world=2)
        t.kernel(GEMM, 0, 100 + 20 * r)
        t.nccl("allreduce", 100 + 20 * r, 200 - 20 * r, nelems=1000, dtype="BFloat16")
        t.kernel(ADD, 310, 10, launch=105)  # queued early, it waits for the all-reduce (an event wait)
        t.write(tmp_path / f"r{r}.json")
    _, windows = analyse([tmp_path])
    h100 = load_catalog().get("h100")
    seen = []

    def free(c, source, target, transfer_us):
        seen.append((c.collective, c.nbytes, c.group_size, transfer_us))
        return 0.0

    fast = what_if(windows, h100, pricer=free)
    same = what_if(windows, h100, pricer=bandwidth_ratio_pricer)
    # the transfer handed to the pricer is the shortest duration any rank saw (the other waited 20 us of it)
    assert seen[0] == ("allreduce", 2000, 2, 180.0)
    assert same["predicted_step_us"] == pytest.approx(320.0)
    assert fast["predicted_step_us"] == pytest.approx(320.0 - 180.0)


def test_the_cli_json_validates_and_renders(tmp_path):
    from fakegpu.cli.main import app

    _two_ranks(tmp_path)
    result = runner.invoke(app, ["replay-trace", str(tmp_path), "--profile", "a100", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    validate(doc)
    validate(doc["data"])
    assert doc["data"]["what_if"]["target_profile"] == "a100-sxm4-80gb"
    text = runner.invoke(app, ["replay-trace", str(tmp_path), "--profile", "a100"])
    assert text.exit_code == 0 and "slowest rank: 1" in text.stdout and "predicted step" in text.stdout


@pytest.mark.parametrize("option", ["--profile", "--from-profile"])
def test_an_empty_board_name_is_refused_not_ignored(tmp_path, option):
    from fakegpu.cli.main import app

    _two_ranks(tmp_path)
    result = runner.invoke(app, ["replay-trace", str(tmp_path), option, ""])
    assert result.exit_code == 2 and "unknown GPU profile ''" in result.output


def test_a_dtype_without_a_what_if_is_refused_not_ignored(tmp_path):
    from fakegpu.cli.main import app

    _small(tmp_path)
    result = runner.invoke(app, ["replay-trace", str(tmp_path), "--dtype", "fp16"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "--dtype 'fp16' needs --profile (or a fabric" in result.stderr
    # with a board to re-time for, it is the what-if's dtype
    doc = json.loads(runner.invoke(app, ["replay-trace", str(tmp_path), "--dtype", "fp16", "-p", "a100",
                                         "--json"]).stdout)
    assert doc["data"]["what_if"]["dtype_default"] == "fp16"


def test_the_cli_reports_a_bad_file_once_with_exit_2(tmp_path):
    from fakegpu.cli.main import app

    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name"')
    result = runner.invoke(app, ["replay-trace", str(bad), "--json"])
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    validate(doc)
    assert doc["errors"][0]["code"] == "trace-invalid" and "truncated" in doc["errors"][0]["message"]


def test_an_a100_trace_names_its_board(tmp_path):
    t = Trace(device=A100)
    t.kernel(GEMM, 0, 100)
    _, windows = analyse([t.write(tmp_path / "t.json")])
    assert what_if(windows, load_catalog().get("h100"))["source_profile"] == "a100-sxm4-80gb"


def test_after_a_synchronizing_call_the_host_follows_the_gpu(tmp_path):
    """GEMM A [0,1000); the host blocks in cudaStreamSynchronize from 10 to 1002; GEMM B is launched at 1005 and
    runs at 1010. On a faster board A ends earlier, the host leaves the call earlier, and B comes earlier too."""
    t = Trace()
    t.kernel(GEMM, 0, 1000, launch=-5)
    t.host("cudaStreamSynchronize", 10, 992, cat="cuda_runtime", correlation=t.next_correlation())
    for k in range(2000):  # a run of calls that waited for nothing (no GPU work ended during them)
        t.host("cudaStreamSynchronize", 1002.0 + k * 0.001, 0.0005, cat="cuda_runtime",
               correlation=t.next_correlation())
    t.kernel(GEMM, 1010, 1000, launch=1005)
    _, windows = analyse([t.write(tmp_path / "t.json")])
    w = what_if(windows, load_catalog().get("b200"))
    new = w["classes"]["gemm"]["predicted_us"] / 2
    assert w["ranks"][0]["replayed_source_us"] == pytest.approx(2010)
    assert w["ranks"][0]["predicted_us"] == pytest.approx(2 * new + 10, abs=0.01)


def test_a_copy_call_that_waited_for_its_copy_frees_the_host_with_it(tmp_path):
    """loss.item(): GEMM A [0,1000), then cudaMemcpyAsync to pageable memory called at 10 returns at 1012 after its
    copy [1000,1010) (same correlation); GEMM B launched at 1015 runs at 1020. The host follows the copy."""
    t = Trace()
    t.kernel(GEMM, 0, 1000, launch=-5)
    corr = t.kernel("Memcpy DtoH (Device -> Pageable)", 1000, 10, cat="gpu_memcpy", launch=10, bytes=4)
    launch = next(e for e in t.events if e.get("args", {}).get("correlation") == corr and e["cat"] == "cuda_runtime")
    launch["dur"] = 1002.0  # the call blocks until its copy is done
    t.kernel(GEMM, 1020, 1000, launch=1015)
    _, windows = analyse([t.write(tmp_path / "t.json")])
    w = what_if(windows, load_catalog().get("b200"))
    gemm, copy = w["classes"]["gemm"]["predicted_us"], w["classes"]["memcpy (host)"]["predicted_us"]
    assert w["ranks"][0]["replayed_source_us"] == pytest.approx(2020)
    assert w["ranks"][0]["predicted_us"] == pytest.approx(gemm + copy + 10, abs=0.01)


def test_a_cpu_only_profile_has_nothing_to_re_time():
    from fakegpu.errors import UsageError
    from tests.perf.test_trace_read import CPU_TRACE

    report, windows = analyse([CPU_TRACE])
    assert report["ranks"][0]["window"]["activities"] == 0 and report["ranks"][0]["compute_pct"] is None
    assert report["ranks"][0]["memory"]["host"]["peak_allocated_bytes"] > 0
    validate(report)
    with pytest.raises(UsageError, match="nothing to re-time"):
        what_if(windows, load_catalog().get("a100"))


def test_an_unknown_dtype_is_refused(tmp_path):
    from fakegpu.errors import UsageError

    _, windows = analyse([_small(tmp_path)])
    with pytest.raises(UsageError, match="--dtype: 'bf17'"):
        what_if(windows, load_catalog().get("a100"), dtype="bf17")


def test_cuda_sync_events_count_as_hta_counts_them_and_are_not_re_timed(tmp_path):
    """torch 2.3+ draws stream and event waits on the GPU track (cat cuda_sync, with a stream): HTA counts them as
    GPU time of type other (their names hold 'Sync'); the what-if keeps their length."""
    t = Trace()
    t.kernel(GEMM, 0, 100)
    t.events.append({"ph": "X", "cat": "cuda_sync", "name": "Event Sync", "pid": 0, "tid": 7,
                     "ts": t.events[-3]["ts"] + 100, "dur": 50,
                     "args": {"cuda_sync_kind": "Event Synchronize", "stream": 7, "correlation": 999,
                              "device": 0, "context": 1, "wait_on_cuda_event_record_corr_id": 100}})
    report, windows = analyse([t.write(tmp_path / "t.json")])
    r = report["ranks"][0]
    assert r["busy_us"] == 150 and r["compute_us"] == 100 and r["other_us"] == 50
    assert r["classes"]["sync"]["count"] == 1
    w = what_if(windows, load_catalog().get("a100"))
    assert w["classes"]["sync"] == {"recorded_us": 50.0, "predicted_us": 50.0}
