"""Fit FakeGPU's load model (native/nvml/model.c) to a real GPU's telemetry capture.

    python tools/gpu_capture/fit_telemetry.py [CAPTURE_DIR]      # default tests/data/gpu/h200

Reads telemetry.json (telemetry.py: NVML at 20 Hz through idle, a bf16 GEMM loop, an HBM copy loop, a 50% duty
cycle of GEMMs and idle again, all while the process holds a CUDA context) and nvml.json (the board with no process
on it), and prints the parameters profiles/load_model.yaml and the board's profile carry, as YAML. Only the standard
library: the numbers must be reproducible anywhere the capture is.

What is measured directly: the idle and context-idle draw, clocks and temperatures; the capped GEMM's power, clock
and memory utilization; the copy's power and memory utilization; how often NVML's utilization changes (its sample
period) and how long power takes to follow a step (its averaging window). What is inferred: the uncapped power a
GEMM would draw at boost clock (from the duty cycle, which runs below the cap: context-idle draw plus the busy
share of the difference), the clock-versus-power exponent under the cap (one point: the capped GEMM), and the
thermal response (two first-order lags, least squares over the whole series).
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2] / "tests" / "data" / "gpu" / "h200"
SETTLE_S = 1.5  # a phase's first 1.5 s are its transient (power averages over a second): medians skip them


def phase_rows(doc: dict, name: str, settle: float = SETTLE_S) -> list[dict]:
    (p,) = [p for p in doc["phases"] if p["name"] == name]
    start = p["start"] + (settle if name != "idle_before" else 0.0)
    return [s for s in doc["samples"] if start <= s["t"] < p["end"]]


def median(rows: list[dict], key: str) -> float:
    return statistics.median(float(r[key]) for r in rows)


def change_period(samples: list[dict], key: str) -> float:
    """Median time between changes of a field while it moves: how often NVML refreshes it."""
    times = [b["t"] for a, b in itertools.pairwise(samples) if a[key] != b[key]]
    gaps = [b - a for a, b in itertools.pairwise(times) if b - a < 1.0]
    return statistics.median(gaps)


def step_window(doc: dict, lo: float, hi: float) -> float:
    """How long reported power takes to go from 10% to 90% of the step into the GEMM phase, / 0.8: the length of
    the boxcar average a linear ramp implies."""
    (p,) = [p for p in doc["phases"] if p["name"] == "gemm_bf16"]
    rows = [s for s in doc["samples"] if p["start"] <= s["t"] < p["start"] + 3]
    watts = [(s["t"], s["power_mw"] / 1000) for s in rows]
    t10 = next(t for t, w in watts if w >= lo + 0.1 * (hi - lo))
    t90 = next(t for t, w in watts if w >= lo + 0.9 * (hi - lo))
    return (t90 - t10) / 0.8


def load_spans(doc: dict, level: dict, active_idle_w: float, window: float) -> list[tuple[float, float, str]]:
    """(start, end, phase) of each loaded phase as the power shows it: the first sample whose power left the level
    before it, less the share of the window its move implies; the end likewise from the first fall after the phase
    (a phase that hands over to another loaded one ends where it says)."""
    samples, phases = doc["samples"], doc["phases"]
    spans = []
    for i, p in enumerate(phases):
        if p["name"] not in level:
            continue
        plateau = sum(level[p["name"]])
        before = [s["power_mw"] / 1000 for s in samples if s["t"] < p["start"]][-1]
        first = next(s for s in samples if s["t"] >= p["start"] and abs(s["power_mw"] / 1000 - before) > 3)
        start = first["t"] - window * (first["power_mw"] / 1000 - before) / (plateau - before)
        end = p["end"]
        if i + 1 == len(phases) or phases[i + 1]["name"] not in level:
            fall = next(s for s in samples if s["t"] > p["end"] and s["power_mw"] / 1000 < plateau - 3)
            end = fall["t"] - window * (plateau - fall["power_mw"] / 1000) / (plateau - active_idle_w)
        spans.append((start, end, p["name"]))
    return spans


def lag(series: list[float], dt: float, tau: float) -> list[float]:
    """A first-order lag (unit gain) of a series sampled every dt."""
    a = 1 - math.exp(-dt / tau)
    out, y = [], series[0]
    for x in series:
        y += a * (x - y)
        out.append(y)
    return out


def thermal_fit(doc: dict, heat: list[float], base: float, dt: float) -> tuple[float, float, float, float]:
    """(fast tau, slow tau, fast share, rms error) of T = base + share*lag_fast(heat) + (1-share)*lag_slow(heat),
    heat being each moment's steady-state rise, by grid search against the sampled temperatures."""
    temps = [float(s["temp_c"]) for s in doc["samples"]]
    best = (0.0, 0.0, 0.0, float("inf"))
    for fast in (0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3):
        lf = lag(heat, dt, fast)
        for slow in (0.6, 0.8, 1.0, 1.2, 1.5, 2.0, 2.5, 3.0):
            ls = lag(heat, dt, slow)
            for k in range(30, 91, 5):
                share = k / 100
                err = sum((base + share * f + (1 - share) * s - t) ** 2 for f, s, t in zip(lf, ls, temps, strict=True))
                rms = math.sqrt(err / len(temps))
                if rms < best[3]:
                    best = (fast, slow, share, rms)
    return best


def fit(capture: Path) -> dict:
    doc = json.loads((capture / "telemetry.json").read_text())
    nvml = json.loads((capture / "nvml.json").read_text())["devices"][0]
    limit_w = doc["limits"]["power_limit_mw"] / 1000
    boost = doc["limits"]["max_sm_mhz"]
    idle_w = nvml["PowerUsage"] / 1000
    idle_c = float(nvml["Temperature.GPU"])
    ctx = phase_rows(doc, "idle_before")
    gemm, copy, duty = (phase_rows(doc, n) for n in ("gemm_bf16", "copy_hbm", "duty_50"))
    active_idle_w = median(ctx, "power_mw") / 1000
    capped_w = median(gemm, "power_mw") / 1000
    memory_w = median(copy, "power_mw") / 1000
    duty_util = median(duty, "util") / 100
    compute_w = active_idle_w + (median(duty, "power_mw") / 1000 - active_idle_w) / duty_util
    # Under the cap the clock falls with the demand: clock/boost = ((cap - active idle) / (demand - active idle))^k.
    clock_ratio = median(gemm, "sm_mhz") / boost
    exponent = math.log(clock_ratio) / math.log((capped_w - active_idle_w) / (compute_w - active_idle_w))
    # Steady-state heating per watt above the no-process idle: the context's own draw and GEMM power heat the die
    # alike (the context-idle and GEMM plateaus give the same figure); copy power, spent mostly in the HBM stacks,
    # heats the GPU's sensor less.
    compute_c_per_w = (median(gemm, "temp_c") - idle_c) / (capped_w - idle_w)
    memory_c_per_w = (median(copy, "temp_c") - idle_c - compute_c_per_w * (active_idle_w - idle_w)) / (
        memory_w - active_idle_w)
    # The heat input over time: each loaded phase's plateau from the moment its load began to the moment it ended,
    # read off the reported power (a one-second average: its ramp, projected back, dates the step).
    dt = statistics.median(b["t"] - a["t"] for a, b in itertools.pairwise(doc["samples"]))
    window = step_window(doc, active_idle_w, capped_w)
    level = {"gemm_bf16": (capped_w, 0.0), "copy_hbm": (active_idle_w, memory_w - active_idle_w),
             "duty_50": (median(duty, "power_mw") / 1000, 0.0)}
    spans = load_spans(doc, level, active_idle_w, window)
    heat = []
    for s in doc["samples"]:
        sm_w, mem_w = active_idle_w, 0.0
        for start, end, name in spans:
            if start <= s["t"] < end:
                sm_w, mem_w = level[name]
        heat.append(compute_c_per_w * (sm_w - idle_w) + memory_c_per_w * mem_w)
    fast, slow, share, rms = thermal_fit(doc, heat, idle_c, dt)
    return {
        "board": {
            "power.idle_w": round(idle_w, 1),
            "power.active_idle_w": round(active_idle_w, 1),
            "power.compute_w": round(compute_w),
            "power.memory_w": round(memory_w),
            "clocks_mhz.graphics_min": nvml["ClockInfo.SM"],  # idle, the SM clock sits at the bottom of its table
            "clocks_mhz.video": nvml["MaxClockInfo.VIDEO"],
            "clocks_mhz.video_idle": nvml["ClockInfo.VIDEO"],
            "thermal.idle_c": idle_c,
            "thermal.compute_c_per_w": round(compute_c_per_w, 4),
            "thermal.memory_c_per_w": round(memory_c_per_w, 4),
        },
        "model": {
            "cap_fraction": round(capped_w / limit_w, 3),
            "clock_exponent": round(exponent, 2),
            "memory_util.compute": round(median(gemm, "mem_util") / median(gemm, "util") * 100),
            "memory_util.memory": round(median(copy, "mem_util") / median(copy, "util") * 100),
            "util_period_s": round(change_period(doc["samples"], "util"), 2),
            "power_window_s": round(window, 1),
            "thermal.fast_tau_s": fast,
            "thermal.slow_tau_s": slow,
            "thermal.fast_share": share,
        },
        "ratios_to_limit": {
            "active_idle_w - idle_w": round((active_idle_w - idle_w) / limit_w, 4),
            "compute_w": round(compute_w / limit_w, 3),
            "memory_w": round(memory_w / limit_w, 3),
            "compute_c_per_w * limit": round(compute_c_per_w * limit_w, 1),
            "memory_c_per_w * limit": round(memory_c_per_w * limit_w, 1),
        },
        "thermal_fit_rms_c": round(rms, 2),
    }


def main(argv: list[str]) -> int:
    capture = Path(argv[1]) if len(argv) > 1 else DEFAULT
    for section, values in fit(capture).items():
        if isinstance(values, dict):
            print(f"{section}:")
            for k, v in values.items():
                print(f"  {k}: {v}")
        else:
            print(f"{section}: {values}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
