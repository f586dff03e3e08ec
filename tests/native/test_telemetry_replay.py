"""A run's telemetry recording (`fakegpu run --telemetry-replay`, $FAKEGPU_TELEMETRY_REPLAY) as NVML's clients
see it: pynvml, nvidia-smi and `fakegpu metrics` read the recorded values at the times they cover, and the load
model elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.native

SWITCH_S = 4  # the recording's second set of samples, from 4 s after the run's start
RECORDING = f"""time,device,metric,value
0,0,utilization.gpu,20
0,0,power.draw,150.5
0,0,temperature.gpu,41
{SWITCH_S}s,0,utilization.gpu,90
{SWITCH_S}s,0,DCGM_FI_DEV_POWER_USAGE,410
{SWITCH_S},0,clocks.sm,900
{SWITCH_S},1,temperature.gpu,77
"""
# Reads once at whatever time the process got to run, then once after the switch: each reading with its time
# from the run's start (the compiled recording's start), so the test knows which samples applied.
READER = textwrap.dedent("""
    import json, os, subprocess, sys, time
    import pynvml as n
    from fakegpu.faults import replay
    from fakegpu.faults.exporter import DcgmCollector, load_nvml
    start_ns, _ = replay.read(os.path.join(os.environ["FAKEGPU_STATE_DIR"], replay.FILE_NAME))
    n.nvmlInit()
    def reading():
        t = (time.time_ns() - start_ns) / 1e9
        out = {"t": t, "gpus": []}
        for i in range(2):
            h = n.nvmlDeviceGetHandleByIndex(i)
            out["gpus"].append([n.nvmlDeviceGetUtilizationRates(h).gpu, n.nvmlDeviceGetPowerUsage(h),
                                n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
                                n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)])
        out["smi"] = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,power.draw",
                                     "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout.split()
        out["dcgm"] = [line for line in DcgmCollector(load_nvml()).scrape().decode().splitlines()
                       if line.startswith("DCGM_FI_DEV_POWER_USAGE{")]
        return out
    first = reading()
    time.sleep(max(0.0, SWITCH - (time.time_ns() - start_ns) / 1e9 + 0.3))
    print(json.dumps([first, reading()]))
""").replace("SWITCH", str(SWITCH_S))


def run_reader(tmp_path: Path, recording: Path, through_env: bool) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    exe = Path(sys.executable).with_name("fakegpu")
    env["PATH"] = f"{exe.parent}:{env.get('PATH', '')}"
    args = [str(exe), "run", "--devices", "a100:2"]
    if through_env:
        env["FAKEGPU_TELEMETRY_REPLAY"] = str(recording)
    else:
        args += ["--telemetry-replay", str(recording)]
    proc = subprocess.run([*args, "--", sys.executable, "-c", READER], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_nvml_nvidia_smi_and_metrics_follow_the_recording_and_the_model_elsewhere(tmp_path: Path) -> None:
    recording = tmp_path / "rec.csv"
    recording.write_text(RECORDING)
    first, second = run_reader(tmp_path, recording, through_env=False)
    idle = first["gpus"][1]  # GPU 1 before its one sample: the model's idle board (A100 SXM: 210 MHz)
    assert idle[0] == 0 and idle[3] == 210 and idle[2] != 77
    if first["t"] < SWITCH_S:
        assert first["gpus"][0][:3] == [20, 150500, 41], first
        assert first["smi"] == ["20,", "150.50", "0,", f"{idle[1] / 1000:.2f}"], first
        assert 'gpu="0"' in first["dcgm"][0] and first["dcgm"][0].endswith(" 150.5"), first
    # after the switch: utilization, power and clock replayed, the temperature held from its last sample
    assert second["t"] >= SWITCH_S
    assert second["gpus"][0] == [90, 410000, 41, 900], second
    assert second["gpus"][1][2] == 77 and second["gpus"][1][0] == 0
    assert second["smi"][:2] == ["90,", "410.00"] and second["dcgm"][0].endswith(" 410"), second


def test_a_json_recording_through_the_environment(tmp_path: Path) -> None:
    rows = [dict(zip(("time", "device", "metric", "value"), line.split(","), strict=True))
            for line in RECORDING.splitlines()[1:]]
    recording = tmp_path / "rec.json"
    recording.write_text(json.dumps({"samples": rows}))
    _, second = run_reader(tmp_path, recording, through_env=True)
    assert second["gpus"][0] == [90, 410000, 41, 900]


def test_a_bad_recording_stops_the_run_before_it_starts(tmp_path: Path) -> None:
    recording = tmp_path / "rec.csv"
    recording.write_text("time,device,metric,value\n0,2,power.draw,100\n")
    exe = Path(sys.executable).with_name("fakegpu")
    runs = Path(tempfile.gettempdir())
    before = set(runs.glob("fakegpu-run-*"))
    proc = subprocess.run([str(exe), "run", "--devices", "a100:2", "--telemetry-replay", str(recording), "--",
                           "true"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and f"{recording}:2: GPU 2: the run has GPUs 0..1" in proc.stderr
    assert set(runs.glob("fakegpu-run-*")) <= before  # checked before the run's folder was made
