"""Utilization, power, SM clock and temperature follow the work of PyPI's CUDA torch, in native mode (launches
mark the shared state's busy slots) and in fakecuda (its ops do): idle while the process only holds memory, busy
during a loop of kernels, idle again a second after it; the GPU the loop does not touch stays idle. Thresholds from
native/nvml/model.c: utilization is the busy share of the last second, power idle + 0.8 x (limit - idle) x
utilization."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.native_cuda.conftest import run_fakegpu
from tests.subprocess_torch import stdout_json

pytestmark = [pytest.mark.native, pytest.mark.torch]

PROBE = Path(__file__).resolve().parents[1] / "data" / "probes" / "busy_loop.py"
A100_IDLE_W, A100_LIMIT_W = 60.0, 400.0


@pytest.mark.parametrize("mode", ["native", "fakecuda"])
def test_telemetry_rises_with_kernels_and_falls_back(cuda_build, torch_python, mode: str) -> None:
    memory = ["--memory", "accounting"] if mode == "native" else []
    proc = run_fakegpu(["--devices", "a100:2", "--mode", mode, *memory, "--", torch_python, str(PROBE)],
                       complete=stdout_json())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    (b0, b1), (d0, d1), (a0, a1) = out["before"], out["during"], out["after"]
    assert b0[0] == 0 and b0[1] == A100_IDLE_W and b0[2] == 210  # memory held, nothing running: idle
    # A loaded 2-core machine may starve the loop thread for a few slots of the second: 50% is the floor.
    assert d0[0] >= 50, out
    assert d0[1] >= A100_IDLE_W + 0.8 * (A100_LIMIT_W - A100_IDLE_W) * 0.5 and d0[2] == 1410 and d0[3] > b0[3]
    assert a0[:3] == b0[:3], out
    assert b1 == d1 == a1 and b1[0] == 0  # the other GPU never ran anything
