"""Telemetry that follows the work, held to a real H200: tools/gpu_capture/telemetry.py (NVML at 20 Hz through a
context held idle, a bf16 GEMM loop, an HBM copy loop, a 50% duty cycle of GEMMs and idle again) runs under
`fakegpu run --devices h200` in native mode, and each phase's medians must land near the real board's
(tests/data/gpu/h200/telemetry.json). The model is native/nvml/model.c's, fitted by tools/gpu_capture/fit_telemetry.py.

Medians skip a phase's first 1.5 s (power averages over a second; the real board's own transient), and the idle
phases are read in their last second. Tolerances: steady states the model reproduces by construction (context idle,
the capped GEMM, the copy) within a few watts, 30 MHz and 2 C; the duty cycle, whose busy share comes from the fake's
own timing of a sleep-and-launch loop on a shared CPU, within 12 points of utilization and 80 W. The script runs with
FAKEGPU_MEMORY=accounting: its 4 GiB device copies would otherwise be real memmoves on this CPU.
"""

from __future__ import annotations

import json
import statistics

import pytest

from tests.real_gpu.conftest import TOOLS, fake_json, real, under_fake

pytestmark = [pytest.mark.native, pytest.mark.torch, pytest.mark.slow]

SETTLE_S = 1.5
FIELDS = ("util", "mem_util", "power_mw", "sm_mhz", "temp_c", "reasons")
# phase: {field: tolerance}; None: equal. power in mW, clocks in MHz, temperature in C.
TOLERANCE = {
    "idle_before": {"util": None, "mem_util": None, "power_mw": 2000, "sm_mhz": None, "temp_c": 1, "reasons": None},
    "gemm_bf16": {"util": 3, "mem_util": 3, "power_mw": 15000, "sm_mhz": 30, "temp_c": 2, "reasons": None},
    "idle_gap": {"util": None, "mem_util": None, "power_mw": 5000, "sm_mhz": None, "temp_c": 2, "reasons": None},
    "copy_hbm": {"util": 3, "mem_util": 3, "power_mw": 15000, "sm_mhz": None, "temp_c": 2, "reasons": None},
    "duty_50": {"util": 12, "mem_util": 5, "power_mw": 80000, "sm_mhz": 60, "temp_c": 3},
    "idle_after": {"util": None, "mem_util": None, "power_mw": 5000, "sm_mhz": None, "temp_c": 2, "reasons": None},
}


def medians(doc: dict) -> dict[str, dict[str, float]]:
    out = {}
    for p in doc["phases"]:
        if p["name"] in ("idle_gap", "idle_after"):
            lo = p["end"] - 1.0
        else:
            lo = p["start"] + (SETTLE_S if p["name"] != "idle_before" else 0.0)
        rows = [s for s in doc["samples"] if lo <= s["t"] < p["end"]]
        assert rows, f"no samples in {p['name']}"
        out[p["name"]] = {k: statistics.median(float(r[k]) for r in rows) for k in FIELDS}
    return out


def first_time(doc: dict, phase: str, ok) -> float:
    """Seconds from the phase's start to its first sample that satisfies ok."""
    (p,) = [p for p in doc["phases"] if p["name"] == phase]
    return next(s["t"] for s in doc["samples"] if s["t"] >= p["start"] and ok(s)) - p["start"]


@pytest.fixture(scope="module")
def twin(native_libs, torch211) -> dict:
    return fake_json([torch211, str(TOOLS / "telemetry.py")], env={"FAKEGPU_MEMORY": "accounting"}, timeout=300)


# The real capture's duty cycle, which predates the script recording it: 10 ms of GEMMs, 10 ms asleep on an idle
# host (a sleep overshoots by about 0.1 ms); the fake's run achieves 0.498 on an idle 2-core machine.
REAL_DUTY = 0.5
DUTY_TOLERANCE = 0.05
# The share of a CPU the duty loop's launching got (an idle host: all of it, as the capture's had).
MIN_LAUNCH_CPU = 0.85
# The share of a back-to-back phase its launching thread waited for a CPU other work held: 0.0002 on an idle host,
# 0.5-0.6 beside two CPU burners. Utilization then depends on where the waits fall: a wait after a synchronize
# leaves the GPU idle (one fresh-clone run beside the suite's own load: copy_hbm at 94% against the board's 99),
# a wait while launches are queued does not.
MAX_WAITED_FOR_CPU = 0.05


@pytest.mark.parametrize("phase", list(TOLERANCE))
def test_each_phase_reads_as_on_the_real_board(twin: dict, phase: str) -> None:
    got, want = medians(twin)[phase], medians(real("telemetry.json"))[phase]
    (p,) = [p for p in twin["phases"] if p["name"] == phase]
    if phase == "duty_50":
        # The script's own timing makes this phase: on a CPU other work contends for (two CPU burners beside the
        # suite: 0.574), its loop overruns and its launches wait for a CPU, as they would beside a real GPU, and
        # the capture (an idle host) says nothing about that run
        if abs(p["duty"] - REAL_DUTY) > DUTY_TOLERANCE:
            pytest.skip(f"the duty cycle ran at {p['duty']:.3f}, not the capture's {REAL_DUTY}: this host's CPU "
                        "was contended, and the capture's was not")
        # The duty can come out right while the launching still waited for a CPU (two burners beside the suite: a
        # duty of 0.5, utilization 36 against 48, 439 W against 536): fewer launches, a GPU idle between them
        if p["on_cpu_share"] < MIN_LAUNCH_CPU:
            pytest.skip(f"the duty loop's launching got {p['on_cpu_share']:.2f} of a CPU, the capture's all of "
                        "one: this host's CPU was contended, and the capture's was not")
    if phase in ("gemm_bf16", "copy_hbm") and p.get("waited_for_cpu", 0.0) > MAX_WAITED_FOR_CPU:
        pytest.skip(f"the phase's launching waited for a CPU {p['waited_for_cpu']:.0%} of the time: this host's "
                    "CPU was contended, and the capture's was not")
    for field, tol in TOLERANCE[phase].items():
        if tol is None:
            assert got[field] == want[field], (phase, field, got, want)
        else:
            assert abs(got[field] - want[field]) <= tol, (phase, field, got, want)


def test_power_averages_a_second_and_temperature_lags(twin: dict) -> None:
    """After the work stops, power falls over the one-second average (real: 1.1 s to the context idle), utilization
    within NVML's 0.2 s sample period or two, and the temperature most of the way in under a second."""
    doc = real("telemetry.json")
    idle_w = medians(doc)["idle_before"]["power_mw"]
    for d in (doc, twin):
        settled = first_time(d, "idle_after", lambda s: s["power_mw"] < idle_w + 5000)
        assert 0.8 <= settled <= 1.5, settled
        assert first_time(d, "idle_after", lambda s: s["util"] == 0) <= 0.5
        assert first_time(d, "idle_after", lambda s: s["temp_c"] <= 42) <= 1.2
        ramp = [s["power_mw"] for s in d["samples"] if 0.3 <= s["t"] - d["phases"][1]["start"] <= 0.7]
        assert all(idle_w + 30000 < w < 650000 for w in ramp), ramp  # mid-ramp: neither idle nor capped yet


NO_PROCESS = """
import json, pynvml as N
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
print(json.dumps({"PowerUsage": N.nvmlDeviceGetPowerUsage(h), "Temperature.GPU": N.nvmlDeviceGetTemperature(h, 0),
                  "ClockInfo.SM": N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM),
                  "ClockInfo.GRAPHICS": N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_GRAPHICS),
                  "ClockInfo.VIDEO": N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_VIDEO),
                  "ClockInfo.MEM": N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_MEM),
                  "MaxClockInfo.VIDEO": N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_VIDEO),
                  "CurrentClocksEventReasons": N.nvmlDeviceGetCurrentClocksEventReasons(h),
                  "PerformanceState": N.nvmlDeviceGetPerformanceState(h),
                  "UtilizationRates": {"gpu": N.nvmlDeviceGetUtilizationRates(h).gpu,
                                       "memory": N.nvmlDeviceGetUtilizationRates(h).memory}}))
"""


def test_a_board_with_no_process_idles_as_the_real_one(native_libs, torch211) -> None:
    """nvml.json was dumped with no process on the board: lower clocks, less power, cooler than a held context."""
    proc = under_fake([torch211, "-c", NO_PROCESS])
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    want = real("nvml.json")["devices"][0]
    assert abs(got.pop("PowerUsage") - want["PowerUsage"]) <= 100  # mW
    for key, value in got.items():
        assert value == want[key], key
