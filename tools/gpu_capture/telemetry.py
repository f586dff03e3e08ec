"""How NVML's telemetry follows work: utilization, power, clocks, temperature and clock-event reasons sampled at
20 Hz through phases of idle, a compute-bound loop, a memory-bound loop, a 50% duty cycle and idle again.
The fake's load model (native/nvml/model.c) was fitted to these series (fit_telemetry.py) and is held to them
(tests/real_gpu/test_telemetry.py). One JSON document on stdout.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import pynvml as N
import torch

QUICK = os.environ.get("CAPTURE_QUICK") == "1"
SCALE = 0.2 if QUICK else 1.0


def sampler(h, samples: list, stop: threading.Event, t0: float) -> None:
    while not stop.is_set():
        row = {"t": round(time.monotonic() - t0, 3)}
        for key, fn in (("util", lambda: N.nvmlDeviceGetUtilizationRates(h).gpu),
                        ("mem_util", lambda: N.nvmlDeviceGetUtilizationRates(h).memory),
                        ("power_mw", lambda: N.nvmlDeviceGetPowerUsage(h)),
                        ("sm_mhz", lambda: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM)),
                        ("mem_mhz", lambda: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_MEM)),
                        ("temp_c", lambda: N.nvmlDeviceGetTemperature(h, 0)),
                        ("reasons", lambda: N.nvmlDeviceGetCurrentClocksEventReasons(h)),
                        ("pstate", lambda: N.nvmlDeviceGetPerformanceState(h)),
                        ("used", lambda: N.nvmlDeviceGetMemoryInfo(h).used)):
            try:
                row[key] = fn()
            except N.NVMLError as exc:
                row[key] = str(exc)
        samples.append(row)
        time.sleep(0.05)


def run_delay_ns() -> int | None:
    """Nanoseconds this thread has spent runnable but not running (the kernel's schedstat); None where unreadable."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def main() -> int:
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    big = torch.empty(1 << 30, device="cuda")
    out = torch.empty_like(big)
    torch.cuda.synchronize()
    time.sleep(1.0 * SCALE)
    samples: list = []
    phases: list = []
    stop = threading.Event()
    t0 = time.monotonic()
    th = threading.Thread(target=sampler, args=(h, samples, stop, t0), daemon=True)
    th.start()

    def phase(name: str, seconds: float, body) -> None:
        start = time.monotonic() - t0
        waited = run_delay_ns()
        end = time.monotonic() + seconds * SCALE
        while time.monotonic() < end:
            body()
        torch.cuda.synchronize()
        stop = time.monotonic() - t0
        phases.append({"name": name, "start": round(start, 3), "end": round(stop, 3)})
        after = run_delay_ns()
        if waited is not None and after is not None:
            # The share of the phase this thread was ready to launch but waited for a CPU, taken by other work on
            # the host: a launcher descheduled after a synchronize leaves the GPU idle, on a real board as on the
            # fake, and a capture on an idle host says nothing about such a run
            phases[-1]["waited_for_cpu"] = round((after - waited) / 1e9 / (stop - start), 4)

    # The duty cycle's share of time in its GEMM loop, as it came out: a loaded CPU stretches the sleeps (and the
    # fake's busy time follows the loop's wall time), so a reader compares at the duty achieved. And the share of a
    # CPU the loop got while launching (its thread's CPU time over the wall time): the loop only launches and waits,
    # so on a CPU other work contends for, launches wait for a CPU and the GPU idles between them, on a real board
    # as on the fake, which a capture on an idle host does not describe.
    duty = {"on": 0.0, "off": 0.0, "cpu": 0.0}

    def gemm_burst():
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()

    def copy_burst():
        for _ in range(10):
            out.copy_(big)
        torch.cuda.synchronize()

    def duty_50():  # ~10 ms of GEMMs, then ~10 ms asleep
        t, cpu = time.monotonic(), time.thread_time()
        while time.monotonic() - t < 0.01:
            a @ a
            torch.cuda.synchronize()
        slept = time.monotonic()
        duty["cpu"] += time.thread_time() - cpu
        time.sleep(0.01)
        duty["on"] += slept - t
        duty["off"] += time.monotonic() - slept

    phase("idle_before", 3, lambda: time.sleep(0.05))
    phase("gemm_bf16", 8, gemm_burst)
    phase("idle_gap", 3, lambda: time.sleep(0.05))
    phase("copy_hbm", 4, copy_burst)
    phase("duty_50", 4, duty_50)
    phases[-1]["duty"] = round(duty["on"] / (duty["on"] + duty["off"]), 4)
    phases[-1]["on_cpu_share"] = round(duty["cpu"] / duty["on"], 4)
    phase("idle_after", 6, lambda: time.sleep(0.05))
    stop.set()
    th.join()
    doc = {"phases": phases, "samples": samples,
           "limits": {"power_limit_mw": N.nvmlDeviceGetEnforcedPowerLimit(h),
                      "max_sm_mhz": N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_SM),
                      "max_mem_mhz": N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_MEM)}}
    json.dump(doc, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
