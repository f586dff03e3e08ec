"""torch.profiler in native mode: FakeGPU's CUPTI (native/cuda/cupti/activity.c) hands Kineto activity records of
the simulated GPU work, so an unmodified script's profile shows its kernels, linked to the aten ops that launched
them, with the durations `fakegpu run --timeline` prices (the same Pricer, through timeline_price.price_sheet).

The script (scripts/profiler_kernels.py) runs a few matmuls and a small model's training step under
torch.profiler with CUDA activities, with PyPI's CUDA 13 torch and CUDA 12 torch (each against its set of
FakeGPU's libraries). The checks read what the profiler itself reports (key_averages, the exported trace) and the
run's timeline log, read on its own."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from fakegpu.devices import resolve_devices
from fakegpu.perf import timeline
from fakegpu.perf import timeline_log as tl
from fakegpu.perf.timeline_price import SHEET_SIZES, Pricer
from tests import subprocess_torch
from tests.native_cuda.conftest import run_fakegpu

pytestmark = [pytest.mark.native, pytest.mark.torch]
SCRIPT = Path(__file__).parent / "scripts" / "profiler_kernels.py"
DDP_SCRIPT = Path(__file__).parent / "scripts" / "profiler_ddp.py"
DEVICES = "h100:1"
GEMM_ROUTINES = ("cublasGemmEx", "cublasLtMatmul", "cublasSgemm_v2")
# CUPTI's status codes (cupti_result.h). The probe's kinds (cupti_activity.h): activity kind 0 is INVALID, 10
# CONCURRENT_KERNEL; external correlation kind 0 is INVALID, 3 CUSTOM0; result 18 is QUEUE_EMPTY.
CUPTI_SUCCESS, CUPTI_ERROR_INVALID_PARAMETER, CUPTI_ERROR_MAX_LIMIT_REACHED = 0, 1, 12
CUPTI_ERROR_QUEUE_EMPTY, CUPTI_ERROR_INVALID_KIND = 18, 21


def _fakegpu_run(python: str, args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    return subprocess_torch.run(
        [
            sys.executable,
            "-m",
            "fakegpu",
            "run",
            "--devices",
            DEVICES,
            "--report-dir",
            str(tmp / "reports"),
            "--timeline",
            str(tmp / "timeline.json"),
            "--",
            python,
            str(SCRIPT),
            *args,
        ],
        complete=subprocess_torch.stdout_json(),
        timeout=600,
        env=env,
    )


@pytest.fixture(scope="module")
def profiled(tmp_path_factory, cuda_build, torch_python) -> dict:
    tmp = tmp_path_factory.mktemp("cupti")
    trace = tmp / "trace.json"
    proc = _fakegpu_run(torch_python, [str(trace)], tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    (log,) = tl.logs_in(tmp / "reports" / "timeline")
    plain = _fakegpu_run(torch_python, ["--no-profiler"], tmp_path_factory.mktemp("plain"))
    return {"out": out, "doc": json.loads(trace.read_text()), "log": log, "plain": plain}


def _events(doc: dict, cat: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == cat]


def test_kernels_are_in_the_profile_with_device_time(profiled) -> None:
    rows = {r["key"]: r for r in profiled["out"]["rows"]}
    kernels = _events(profiled["doc"], "kernel")
    assert len(kernels) >= 10
    assert all(k["dur"] > 0 for k in kernels)
    gpu_rows = [r for r in rows.values() if r["device_type"] == "DeviceType.CUDA"]
    assert gpu_rows and all(r["self_device_time_total"] > 0 for r in gpu_rows)
    # copies the script makes (the model to the GPU) are there too
    assert _events(profiled["doc"], "gpu_memcpy")


def test_each_gemm_is_one_kernel_attributed_to_its_aten_op(profiled) -> None:
    rows = {r["key"]: r for r in profiled["out"]["rows"]}
    gemms = [k for k in _events(profiled["doc"], "kernel") if k["name"] in GEMM_ROUTINES]
    matmul_ops = rows["aten::mm"]["count"] + rows.get("aten::addmm", {"count": 0})["count"]
    # the script's matmuls plus the model's: two linear layers forward (addmm), three mm in backward
    assert rows["aten::mm"]["count"] == profiled["out"]["matmuls"] + 3
    assert len(gemms) == matmul_ops
    assert len(gemms) == sum(r.kind == tl.GEMM for r in profiled["log"].records)
    # the GEMMs' device time is aten::mm's and aten::addmm's
    mm_kernels = sum(rows[k]["self_device_time_total"] for k in GEMM_ROUTINES if k in rows)
    op_time = (
        rows["aten::mm"]["device_time_total"] + rows.get("aten::addmm", {"device_time_total": 0})["device_time_total"]
    )
    assert rows["aten::mm"]["device_time_total"] > 0
    assert op_time == pytest.approx(mm_kernels, rel=1e-6)
    # in the trace: each GEMM's External id is a matmul op's, and its correlation a cudaLaunchKernel's
    ops = {
        e["args"]["External id"]: e["name"]
        for e in _events(profiled["doc"], "cpu_op")
        if "External id" in e.get("args", {})
    }
    launches = {e["args"]["correlation"]: e for e in _events(profiled["doc"], "cuda_runtime")}
    for k in gemms:
        assert ops[k["args"]["External id"]] in ("aten::mm", "aten::addmm")
        launch = launches[k["args"]["correlation"]]
        assert launch["name"] == "cudaLaunchKernel"
        assert k["ts"] >= launch["ts"] + launch["dur"] - 1e-3  # no earlier than its launch returned


def test_durations_are_the_timelines_prices(profiled) -> None:
    """Each kernel, copy and fill lasts in the profile what --timeline prices the log's record of it at: GEMMs by
    the shape and dtypes libcublas recorded, the others estimated from their launch (reductions at their share)."""
    pricer = Pricer(resolve_devices(DEVICES)[0].profile)
    pending: dict[int, tl.Record] = {}
    priced = []
    for r in profiled["log"].records:
        if r.kind == tl.GEMM:
            pending[r.tid] = r
        elif (work := timeline._work(r, pricer, pending)) is not None:
            priced.append((work[0], work[2].seconds * 1e6))
    events = sorted(
        (e for cat in ("kernel", "gpu_memcpy", "gpu_memset") for e in _events(profiled["doc"], cat)),
        key=lambda e: e["args"]["correlation"],
    )
    # the script's GPU work all happens inside the profile
    assert len(events) == len(priced)
    for (name, _), event in zip(priced, events, strict=True):
        if not name.startswith("_Z"):  # the profile shows the mangled names demangled
            assert event["name"] == name
    assert [e["dur"] for e in events] == pytest.approx([us for _, us in priced], rel=1e-3, abs=2e-3)
    gemms = [us for name, us in priced if name in GEMM_ROUTINES]
    assert max(gemms) > 5  # the 512^3 fp32 products are compute-bound, not just the kernel's fixed cost
    reductions = [e["dur"] for e in events if "reduce_kernel" in e["name"]]
    elementwise = [e["dur"] for e in events if "vectorized_elementwise_kernel" in e["name"]]
    assert reductions and elementwise and min(reductions) > max(elementwise)  # a reduction's own fixed cost


def test_kernels_on_a_stream_do_not_overlap(profiled) -> None:
    by_stream: dict[int, list[dict]] = {}
    for e in _events(profiled["doc"], "kernel") + _events(profiled["doc"], "gpu_memcpy"):
        by_stream.setdefault(e["args"]["stream"], []).append(e)
    for events in by_stream.values():
        events.sort(key=lambda e: e["ts"])
        for a, b in itertools.pairwise(events):
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-3


def test_the_script_without_the_profiler_is_unaffected(profiled) -> None:
    plain = profiled["plain"]
    assert plain.returncode == 0, plain.stderr[-3000:]
    out = json.loads(plain.stdout.strip().splitlines()[-1])
    assert out == {"result": profiled["out"]["result"], "cuda": True}


def test_ddp_ranks_profiles_hold_nccls_kernels_priced_by_the_topology_model(
    tmp_path: Path, cuda_build, cuda_torch
) -> None:
    """A 2-rank torchrun DDP job profiling a few steps on each rank: each profile has one NCCL kernel per
    all-reduce DDP made (and the script's own), attributed to its record_param_comms op, on the NCCL stream after
    the gradients' kernels, lasting what --timeline prices the rank's log record of it at when priced alone (the
    topology model, through the price sheet's samples; no cross-rank wait, which a process cannot know)."""
    out = tmp_path / "profiles"
    out.mkdir()
    proc = run_fakegpu(
        [
            "--devices",
            "h100:2",
            "--report-dir",
            str(tmp_path / "reports"),
            "--timeline",
            str(tmp_path / "timeline" / "ddp.json"),
            "--",
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            str(DDP_SCRIPT),
            str(out),
        ],
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert sorted(s["rank"] for s in said) == [0, 1]
    steps, sampled, bucket = said[0]["steps"], said[0]["sampled"], said[0]["bucket"]
    assert sampled in SHEET_SIZES
    pricer = Pricer(resolve_devices("h100:2")[0].profile)
    logs = {log.rank: log for log in tl.logs_in(tmp_path / "reports" / "timeline")}
    for rank in (0, 1):
        doc = json.loads((out / f"rank{rank}.json").read_text())
        ops = {e["args"]["External id"]: e for e in _events(doc, "cpu_op") if "External id" in e.get("args", {})}
        nccl = [e for e in _events(doc, "kernel") if e["name"].startswith("ncclDevKernel_")]
        reduces = [e for e in nccl if e["name"] == "ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
        # DDP's one bucket (the Linear's weight and bias) per step, then the script's all-reduce
        assert [ops[e["args"]["External id"]]["args"]["In msg nelems"] for e in reduces] == (
            [bucket // 4] * steps + [sampled // 4]
        )
        assert len(reduces) == sum(
            1
            for e in _events(doc, "cpu_op")
            if e["name"] == "record_param_comms" and e["args"].get("Collective name") == "all_reduce"
        )
        for e in nccl:
            op = ops[e["args"]["External id"]]
            assert op["name"] == "record_param_comms"
        launches = {e["args"]["correlation"]: e for e in _events(doc, "cuda_runtime")}
        assert {launches[e["args"]["correlation"]]["name"] for e in nccl} == {"cudaLaunchKernelExC"}
        # the rank's log, priced record by record as --timeline prices it alone: the profile's NCCL kernels are
        # the log's last collectives (init's and the first step's came before the profile)
        pending: dict[int, tl.Record] = {}
        priced = [
            work
            for r in logs[rank].records
            if r.kind == tl.COLL and (work := timeline._work(r, pricer, pending)) is not None
        ][-len(nccl) :]
        assert [w[0] for w in priced] == [e["name"] for e in nccl]
        assert [w[2].args["In msg nelems"] for w in priced] == [e["args"]["In msg nelems"] for e in nccl]
        # to the profile's clock: Kineto's cycles, converted at a rate measured against the host's (as for every
        # kernel in test_durations_are_the_timelines_prices)
        assert [e["dur"] for e in nccl] == pytest.approx([w[2].seconds * 1e6 for w in priced], rel=1e-3, abs=2e-3)
        # the sampled size lasts the sheet's sample (the model's price, test_timeline_sim checks it to the bit);
        # DDP's bucket, not sampled, the model's price too
        assert reduces[-1]["dur"] == pytest.approx(pricer.collective(0, sampled, 2).seconds * 1e6, rel=1e-3)
        for e in reduces[:-1]:
            assert e["dur"] == pytest.approx(pricer.collective(0, bucket, 2).seconds * 1e6, rel=1e-3)
        # on the NCCL stream, after every kernel the compute stream was given before it (the gradients')
        compute = [k for k in _events(doc, "kernel") if not k["name"].startswith("ncclDevKernel_")]
        nccl_streams = {e["args"]["stream"] for e in reduces[:-1]}
        assert len(nccl_streams) == 1 and not nccl_streams & {k["args"]["stream"] for k in compute}
        for e in reduces[:-1]:
            before = [k for k in compute if k["args"]["correlation"] < e["args"]["correlation"]]
            assert any(k["name"] in GEMM_ROUTINES for k in before[-6:])  # the weight's gradient
            assert e["ts"] >= max(k["ts"] + k["dur"] for k in before) - 1e-3


# Run in a process of its own against the built libcupti (cuda_env's device table): each call's status.
PROBE = r"""
import ctypes, json, os
cupti = ctypes.CDLL(os.path.join(os.environ["FAKEGPU_LIB"], "libcupti.so.13"))
out = {}
record, last, dropped, text = ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_size_t(99), ctypes.c_char_p()
empty = (ctypes.c_uint8 * 64)()
out["enable invalid"] = cupti.cuptiActivityEnable(0)
out["enable unknown"] = cupti.cuptiActivityEnable(10000)
out["disable invalid"] = cupti.cuptiActivityDisable(0)
out["register null"] = cupti.cuptiActivityRegisterCallbacks(None, None)
out["next null buffer"] = cupti.cuptiActivityGetNextRecord(None, ctypes.c_size_t(0), ctypes.byref(record))
out["next empty"] = cupti.cuptiActivityGetNextRecord(empty, ctypes.c_size_t(0), ctypes.byref(record))
out["push invalid kind"] = cupti.cuptiActivityPushExternalCorrelationId(0, ctypes.c_uint64(1))
out["pop empty"] = cupti.cuptiActivityPopExternalCorrelationId(3, ctypes.byref(last))
out["push"] = cupti.cuptiActivityPushExternalCorrelationId(3, ctypes.c_uint64(42))
out["pop"] = [cupti.cuptiActivityPopExternalCorrelationId(3, ctypes.byref(last)), last.value]
out["attribute null"] = cupti.cuptiActivitySetAttribute(0, None, None)
out["result string null"] = cupti.cuptiGetResultString(0, None)
out["result string"] = [cupti.cuptiGetResultString(18, ctypes.byref(text)), text.value.decode()]
held = []
request_t = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.POINTER(ctypes.c_uint8)), ctypes.POINTER(ctypes.c_size_t),
                             ctypes.POINTER(ctypes.c_size_t))
complete_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint8),
                              ctypes.c_size_t, ctypes.c_size_t)
callbacks = (request_t(lambda b, s, m: None), complete_t(lambda c, s, b, size, valid: held.append(valid)))
out["register"] = cupti.cuptiActivityRegisterCallbacks(*callbacks)
out["enable kernels"] = cupti.cuptiActivityEnable(10)
out["flush"] = cupti.cuptiActivityFlushAll(1)
out["disable kernels"] = cupti.cuptiActivityDisable(10)
out["completed"] = held
out["dropped"] = [cupti.cuptiActivityGetNumDroppedRecords(None, 0, ctypes.byref(dropped)), dropped.value]
print(json.dumps(out))
"""


def test_bad_arguments_get_cuptis_errors(cuda_env: dict[str, str]) -> None:
    """The statuses cupti_activity.h documents for each misuse; and a client's buffer cycle with nothing
    launched hands back no buffer."""
    proc = subprocess.run([sys.executable, "-c", PROBE], env=cuda_env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {
        "enable invalid": CUPTI_ERROR_INVALID_KIND,
        "enable unknown": CUPTI_ERROR_INVALID_KIND,
        "disable invalid": CUPTI_ERROR_INVALID_KIND,
        "register null": CUPTI_ERROR_INVALID_PARAMETER,
        "next null buffer": CUPTI_ERROR_INVALID_PARAMETER,
        "next empty": CUPTI_ERROR_MAX_LIMIT_REACHED,
        "push invalid kind": CUPTI_ERROR_INVALID_PARAMETER,
        "pop empty": CUPTI_ERROR_QUEUE_EMPTY,
        "push": CUPTI_SUCCESS,
        "pop": [CUPTI_SUCCESS, 42],
        "attribute null": CUPTI_ERROR_INVALID_PARAMETER,
        "result string null": CUPTI_ERROR_INVALID_PARAMETER,
        "result string": [CUPTI_SUCCESS, "CUPTI_ERROR_QUEUE_EMPTY"],
        "register": CUPTI_SUCCESS,
        "enable kernels": CUPTI_SUCCESS,
        "flush": CUPTI_SUCCESS,
        "disable kernels": CUPTI_SUCCESS,
        "completed": [],
        "dropped": [CUPTI_SUCCESS, 0],
    }


def test_capabilities_list_the_activity_api() -> None:
    table = Path(__file__).resolve().parents[2] / "native" / "cuda" / "api" / "cupti.tsv"
    names = Counter(line.split("\t")[0] for line in table.read_text().splitlines() if not line.startswith("#"))
    for name in (
        "cuptiActivityEnable",
        "cuptiActivityGetNextRecord",
        "cuptiActivityPushExternalCorrelationId",
        "cuptiActivityRegisterCallbacks",
        "cuptiActivityFlushAll",
    ):
        assert names[name] == 1
