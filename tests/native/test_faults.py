"""Faults on a run's board as NVML's clients see them: pynvml's event wait returns the Xid with its data, a GPU
that falls off the bus (Xid 79) is lost for NVML and nvidia-smi while the others answer, and `fakegpu fault
inject --pid` reaches a running run from outside."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fakegpu.faults import board
from tests.native.conftest import LIB_DIR, NativeEnv
from tests.native.test_metrics import scrape

pytestmark = pytest.mark.native

SECOND = 1_000_000_000

WATCH = textwrap.dedent("""
    import os, sys, time, pynvml as n
    n.nvmlInit()
    s = n.nvmlEventSetCreate()
    for i in range(n.nvmlDeviceGetCount()):
        n.nvmlDeviceRegisterEvents(n.nvmlDeviceGetHandleByIndex(i), n.nvmlEventTypeXidCriticalError, s)
    print("registered", os.getpid(), flush=True)
    start = time.monotonic()
    events = 0
    while events < (int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 30):
        try:
            e = n.nvmlEventSetWait(s, int(sys.argv[1]))
        except n.NVMLError_Timeout:
            print("timeout", round(time.monotonic() - start, 1), flush=True)
            break
        uuid = n.nvmlDeviceGetUUID(e.device) if e.eventData != 79 else "lost"
        print("event", e.eventType == n.nvmlEventTypeXidCriticalError, e.eventData, uuid,
              e.gpuInstanceId == 0xFFFFFFFF, round(time.monotonic() - start, 1), flush=True)
        events += 1
""")

QUERY = textwrap.dedent("""
    import pynvml as n
    n.nvmlInit()
    for i in range(n.nvmlDeviceGetCount()):
        try:
            h = n.nvmlDeviceGetHandleByIndex(i)
            print(i, "ok", n.nvmlDeviceGetName(h), n.nvmlDeviceGetMemoryInfo(h).total)
        except n.NVMLError as e:
            print(i, type(e).__name__)
""")


def uuids(native: NativeEnv, devices: str) -> list[str]:
    out = native.smi("--query-gpu=uuid", "--format=csv,noheader", devices=devices)
    return out.stdout.split()


def inject_in_a_run(tmp_path: Path, run_args: list[str], inject: str, then: str) -> list[str]:
    """`fakegpu run RUN_ARGS -- sh -c '<fakegpu fault inject INJECT> && THEN'`, the console scripts as a user
    has them on PATH; the lines it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    exe = Path(sys.executable).with_name("fakegpu")
    env["PATH"] = f"{exe.parent}:{env.get('PATH', '')}"
    script = tmp_path / "inject.sh"
    script.write_text(f"fakegpu fault inject {inject} && {then}\n")
    proc = subprocess.run([str(exe), "run", *run_args, "--", "sh", str(script)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.splitlines()


def test_a_planned_xid_reaches_an_event_wait_with_its_data(native: NativeEnv) -> None:
    devices = "a100:2"
    ids = uuids(native, devices)
    watcher = subprocess.Popen([sys.executable, "-c", WATCH, "3000"], stdout=subprocess.PIPE, text=True,
                               env=native.env(devices))
    try:
        assert watcher.stdout.readline().startswith("registered")
        board.append(str(native.state_dir), [board.Record(time.time_ns() + SECOND // 2, 0, 48)])
        lines = watcher.communicate(timeout=30)[0].splitlines()
    finally:
        watcher.kill()
    event = lines[0].split()
    assert event[:5] == ["event", "True", "48", ids[0], "True"]
    assert 0.3 <= float(event[5]) < 2.5  # it fires when planned, not at once, and is delivered promptly
    assert lines[1].startswith("timeout")  # delivered once


def test_an_xid_before_registration_is_not_delivered(native: NativeEnv) -> None:
    board.append(str(native.state_dir), [board.Record(time.time_ns() - SECOND, 1, 13)])
    out = native.python(WATCH.replace("sys.argv[1]", "300"), devices="a100:2")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1].startswith("timeout 0.3")


def test_xid_79_loses_that_gpu_for_nvml_and_nvidia_smi_only(native: NativeEnv) -> None:
    devices = "a100:3"
    ids = uuids(native, devices)
    before = native.python(QUERY, devices=devices)
    before_bus = native.smi("--query-gpu=pci.bus_id", "--format=csv,noheader", devices=devices).stdout.split()
    assert [line.split()[1] for line in before.stdout.splitlines()] == ["ok", "ok", "ok"]
    board.append(str(native.state_dir), [board.Record(time.time_ns(), 1, 79, flags=board.FLAG_LOST),
                                         board.Record(time.time_ns(), 2, 13)])
    after = native.python(QUERY + textwrap.dedent(f"""
        try:
            n.nvmlDeviceGetHandleByUUID("{ids[1]}")
        except n.NVMLError as e:
            print("by uuid", type(e).__name__)
    """), devices=devices).stdout.splitlines()
    assert after[0].startswith("0 ok NVIDIA A100-SXM4-80GB")
    assert after[1] == "1 NVMLError_GpuIsLost"
    assert after[2].startswith("2 ok")  # an application Xid does not lose the board
    assert after[3] == "by uuid NVMLError_GpuIsLost"

    # The driver names the lost GPU by its bus id (domain in 4 digits), which NVML no longer gives.
    bus = before_bus[1][4:]
    lost_line = (f"Unable to determine the device handle for GPU1: {bus}: GPU is lost.  Reboot the system to "
                 "recover this GPU")
    listed = native.smi("-L", devices=devices)
    assert listed.returncode == 15
    first, *rest = listed.stdout.splitlines()
    assert first == lost_line
    assert [r.split(":")[0] for r in rest] == ["GPU 0", "GPU 2"]
    rows = native.smi("--query-gpu=index,pci.bus_id", "--format=csv,noheader", devices=devices).stdout.splitlines()
    assert rows == [lost_line, f"0, {before_bus[0]}", f"2, {before_bus[2]}"]
    default = native.smi(devices=devices)
    assert default.returncode == 15 and default.stdout.startswith("Unable to determine the device handle for GPU1")
    assert "A100-SXM4-80GB" in default.stdout


def test_a_gpu_lost_in_the_future_is_healthy_until_then(native: NativeEnv) -> None:
    board.append(str(native.state_dir), [board.Record(time.time_ns() + 3 * SECOND, 0, 79, flags=board.FLAG_LOST)])
    assert native.smi("-L", devices="a100").returncode == 0
    time.sleep(3.2)
    assert native.smi("-L", devices="a100").returncode == 15


def test_fault_inject_reaches_a_running_run_by_pid(tmp_path: Path) -> None:
    fakegpu = str(Path(sys.executable).with_name("fakegpu"))
    # One event and the watcher ends by itself, so `fakegpu run` removes its folder as after any command.
    watcher = subprocess.Popen([fakegpu, "run", "--devices", "h100:2", "--",
                                sys.executable, "-c", WATCH, "20000", "1"], stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        pid = watcher.stdout.readline().split()[1]
        done = subprocess.run([fakegpu, "fault", "inject", "--pid", pid, "--xid", "79", "--device", "1"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("Xid 79 (GPU has fallen off the bus) on GPU 1 (GPU-")
        line = watcher.stdout.readline().split()
        assert line[:4] == ["event", "True", "79", "lost"]
        assert watcher.wait(timeout=30) == 0
    finally:
        if watcher.poll() is None:
            os.killpg(watcher.pid, signal.SIGKILL)
            watcher.wait()
    bad = subprocess.run([fakegpu, "fault", "inject", "--pid", "999999999", "--xid", "79", "--device", "0"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--pid 999999999: no such process" in bad.stderr


ECC = textwrap.dedent("""
    import json, pynvml as n
    n.nvmlInit()
    out = []
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        unc = [n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, c)
               for c in (n.NVML_VOLATILE_ECC, n.NVML_AGGREGATE_ECC)]
        cor = n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC)
        dram = n.nvmlDeviceGetMemoryErrorCounter(h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC,
                                                 n.NVML_MEMORY_LOCATION_DRAM)
        out.append([unc, cor, dram, list(n.nvmlDeviceGetRemappedRows(h))])
    print(json.dumps(out))
""")


def test_memory_xids_drive_ecc_counters_and_row_remapping(native: NativeEnv) -> None:
    import json

    def read() -> list:
        out = native.python(ECC, devices="a100:2")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    assert read() == [[[0, 0], 0, 0, [0, 0, 0, 0]]] * 2
    now = time.time_ns()
    board.append(str(native.state_dir), [board.Record(now, 0, 48), board.Record(now, 0, 94),
                                         board.Record(now, 0, 13)])
    # Two uncorrectable errors in device memory, their rows waiting to be remapped at the next reset.
    assert read() == [[[2, 2], 0, 2, [0, 0, 1, 0]], [[0, 0], 0, 0, [0, 0, 0, 0]]]
    board.append(str(native.state_dir), [board.Record(now, 0, 63)])
    assert read()[0][3] == [0, 1, 1, 0]  # one remapping recorded, one still pending
    board.append(str(native.state_dir), [board.Record(now, 0, 63), board.Record(now, 0, 64)])
    assert read()[0][3] == [0, 2, 0, 1]


def test_corrected_ecc_errors_move_the_corrected_counters_alone_and_raise_no_event(native: NativeEnv) -> None:
    import json

    def read() -> list:
        out = native.python(ECC.replace("NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC,\n",
                                        "NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC,\n"), devices="a100:2")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    watcher = subprocess.Popen([sys.executable, "-c", WATCH, "1500"], stdout=subprocess.PIPE, text=True,
                               env=native.env("a100:2"))
    try:
        assert watcher.stdout.readline().startswith("registered")
        now = time.time_ns()
        board.append(str(native.state_dir), [board.Record(now, 1, 7, board.KIND_CORRECTED_ECC),
                                             board.Record(now, 1, 5, board.KIND_CORRECTED_ECC),
                                             board.Record(now + 3600 * SECOND, 1, 100, board.KIND_CORRECTED_ECC)])
        lines = watcher.communicate(timeout=30)[0].splitlines()
    finally:
        watcher.kill()
    assert lines[0].startswith("timeout"), lines  # correctable errors raise no Xid event
    # GPU 1: 12 corrected (the third batch is an hour away), in device memory (DRAM); nothing uncorrectable, no
    # row waits for remapping
    assert read() == [[[0, 0], 0, 0, [0, 0, 0, 0]], [[0, 0], 12, 12, [0, 0, 0, 0]]]
    smi = native.smi("--query-gpu=ecc.errors.corrected.volatile.total,ecc.errors.corrected.aggregate.total,"
                     "ecc.errors.uncorrected.volatile.total", "--format=csv,noheader")
    assert smi.stdout.splitlines() == ["0, 0, 0", "12, 12, 0"], smi.stdout + smi.stderr
    # dcgm-exporter's single-bit (corrected) and double-bit counters; prometheus_client's parser names a counter's
    # sample with a _total suffix
    metrics = scrape(native, "a100:2")
    assert [metrics["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL_total"][g][1] for g in "01"] == [0, 12]
    assert [metrics["DCGM_FI_DEV_ECC_SBE_AGG_TOTAL_total"][g][1] for g in "01"] == [0, 12]
    assert [metrics["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL_total"][g][1] for g in "01"] == [0, 0]


def test_fault_inject_counts_corrected_errors_in_a_running_run(tmp_path: Path) -> None:
    lines = inject_in_a_run(tmp_path, ["--devices", "a100:2", "--fault", "corrected_ecc=2,device=1"],
                            "--corrected-ecc 3 --device 0",
                            "nvidia-smi --query-gpu=ecc.errors.corrected.volatile.total --format=csv,noheader")
    assert lines[0].startswith("3 corrected ECC errors on GPU 0 (GPU-") and lines[1:] == ["3", "2"], lines


def test_a_fifo_or_a_link_in_the_boards_place_is_ignored_not_waited_on(native: NativeEnv, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    board.append(str(elsewhere), [board.Record(time.time_ns(), 0, 79, flags=board.FLAG_LOST)])
    path = Path(board.board_path(str(native.state_dir)))
    path.symlink_to(Path(board.board_path(str(elsewhere))))
    assert native.smi("-L", devices="a100", timeout=20).returncode == 0  # the link is not followed
    path.unlink()
    os.mkfifo(path)
    assert native.smi("-L", devices="a100", timeout=20).returncode == 0  # nor a FIFO opened and waited on


PRESSURE = textwrap.dedent("""
    import ctypes, json, os, pynvml as n
    n.nvmlInit()
    h = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
    cu = ctypes.CDLL(os.path.join(os.environ["FAKEGPU_LIB"], "libcuda.so.1"))
    ctx, free, total, ptr = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_uint64()
    assert cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 1) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0 and cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
    used = [n.nvmlDeviceGetMemoryInfo(d).used for d in h]
    rc = cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(40 << 30))
    print(json.dumps({"used": used, "cuda_free": free.value,
                      "alloc_40g": rc, "procs": [[p.pid for p in n.nvmlDeviceGetComputeRunningProcesses(d)
                                                 if p.pid != os.getpid()] for d in h]}))
""")


def test_memory_pressure_takes_memory_nobody_in_the_run_lists(native: NativeEnv) -> None:
    """Memory a plan has something outside the run hold (another container's process, say): NVML counts it used,
    CUDA cannot have it (cuMemGetInfo, cuMemAlloc), and no process list shows it, as in a container."""
    import json

    env = native.env("a100:2", FAKEGPU_LIB=str(LIB_DIR))

    def read() -> dict:
        out = subprocess.run([sys.executable, "-c", PRESSURE], capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    before = read()
    assert before["alloc_40g"] == 0 and before["procs"] == [[], []]  # each reader's memory goes at its exit
    board.append(str(native.state_dir), [board.Record(time.time_ns(), 1, 50 * 1024, board.KIND_MEMORY_PRESSURE),
                                         board.Record(time.time_ns() + 3600 * SECOND, 1, 1024,
                                                      board.KIND_MEMORY_PRESSURE)])
    after = read()
    assert after["used"][0] == before["used"][0]
    assert after["used"][1] - before["used"][1] == 50 << 30            # the one that fired
    assert before["cuda_free"] - after["cuda_free"] == 50 << 30
    assert after["alloc_40g"] == 2 and after["procs"] == [[], []]      # CUDA_ERROR_OUT_OF_MEMORY; nobody listed


def test_memory_pressure_from_a_plan_and_from_fault_inject(tmp_path: Path) -> None:
    lines = inject_in_a_run(tmp_path, ["--devices", "a100:2", "--fault", "memory_pressure=20GiB,device=1"],
                            "--memory-pressure 10GiB --device 0",
                            "nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits")
    assert lines[0].startswith("10240 MiB held outside the run on GPU 0 (GPU-"), lines
    assert lines[1:] == ["10240", "20480"], lines  # an idle board shows 0 MiB used on the 580 driver


THROTTLE = textwrap.dedent("""
    import json, pynvml as n
    n.nvmlInit()
    out = []
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        out.append({"reasons": n.nvmlDeviceGetCurrentClocksEventReasons(h),
                    "sm": n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
                    "boost": n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM),
                    "temp": n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
                    "max": n.nvmlDeviceGetTemperatureThreshold(h, n.NVML_TEMPERATURE_THRESHOLD_GPU_MAX),
                    "thermal_ns": n.nvmlDeviceGetViolationStatus(h, n.NVML_PERF_POLICY_THERMAL).violationTime,
                    "power_ns": n.nvmlDeviceGetViolationStatus(h, n.NVML_PERF_POLICY_POWER).violationTime})
    print(json.dumps(out))
""")


def test_a_thermal_throttle_agrees_across_reasons_clocks_temperature_and_violation_time(native: NativeEnv) -> None:
    import json

    native.register(os.getpid(), 0, 600 << 20, "python3")  # a context on each GPU: active, at boost clocks
    native.register(os.getpid(), 1, 600 << 20, "python3")

    def read() -> list[dict]:
        out = native.python(THROTTLE, devices="a100:2")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    before = read()
    assert [d["reasons"] for d in before] == [0, 0] and before[1]["sm"] == before[1]["boost"]
    fired = time.time_ns() - 2 * SECOND
    board.append(str(native.state_dir), [board.Record(fired, 1, 0x20 | 900 << 8, board.KIND_THROTTLE)])
    g0, g1 = read()
    assert g0 == before[0] | {"thermal_ns": g0["thermal_ns"]} and g0["thermal_ns"] == 0  # GPU 0 untouched
    assert g1["reasons"] == 0x20 and g1["sm"] == 900                         # SW thermal slowdown, at 900 MHz
    assert g1["temp"] >= g1["max"]                                          # as hot as makes a driver slow down
    assert 2 * SECOND <= g1["thermal_ns"] < 60 * SECOND and g1["power_ns"] == 0
    # a power cap at half the boost clock on GPU 0: 15 MHz steps below it, its own violation counter
    board.append(str(native.state_dir), [board.Record(fired, 0, 0x04 | 50 << 8, board.KIND_THROTTLE,
                                                      board.FLAG_CLOCK_PERCENT)])
    g0 = read()[0]
    assert g0["reasons"] == 0x04 and g0["sm"] == g0["boost"] // 2 // 15 * 15 and g0["power_ns"] >= 2 * SECOND
    assert g0["temp"] == before[0]["temp"]


def test_fault_inject_throttles_a_running_run(tmp_path: Path) -> None:
    lines = inject_in_a_run(tmp_path, ["--devices", "a100"], "--throttle power_brake --clock 600MHz --device 0",
                            "nvidia-smi --query-gpu=clocks_event_reasons.active,clocks_event_reasons.hw_slowdown "
                            "--format=csv,noheader")
    assert lines[0].startswith("HW slowdown: HW power brake slowdown to 600 MHz on GPU 0 (GPU-"), lines
    # GPU idle (no process holds a context) and HW slowdown with HW power brake slowdown
    assert lines[1] == "0x0000000000000089, Active", lines


def test_a_throttle_and_a_memory_pressure_that_ended_leave_only_the_violation_time(native: NativeEnv) -> None:
    import json

    native.register(os.getpid(), 0, 600 << 20, "python3")
    out = native.python(THROTTLE, devices="a100")
    assert out.returncode == 0, out.stderr
    before = json.loads(out.stdout)[0]
    used = native.smi("--query-gpu=memory.used", "--format=csv,noheader,nounits", devices="a100").stdout
    three_s_ago = time.time_ns() - 3 * SECOND
    one_s = 1000 << 32  # a record's length in ms, in data's high 32 bits
    board.append(str(native.state_dir), [
        board.Record(three_s_ago, 0, 0x20 | 900 << 8, board.KIND_THROTTLE, data=one_s),
        board.Record(three_s_ago, 0, 10 * 1024, board.KIND_MEMORY_PRESSURE, data=one_s)])
    out = native.python(THROTTLE, devices="a100")
    after = json.loads(out.stdout)[0]
    # over: no reason, the boost clock, the model's temperature; the thermal counter keeps the second it lasted
    assert after == before | {"thermal_ns": SECOND}
    assert native.smi("--query-gpu=memory.used", "--format=csv,noheader,nounits", devices="a100").stdout == used
