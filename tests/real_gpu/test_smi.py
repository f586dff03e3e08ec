"""nvidia-smi under the fake against a real H200's: every call of tools/gpu_capture/capture.sh, run the same way under
`fakegpu run --devices h200`, compared with tests/data/gpu/h200/smi (text and exit status).

What may differ is normalised before the comparison, each for its reason: the timestamp (the moment), the bus id,
UUID, serial, VBIOS, InfoROM and part numbers (that board and the VM it ran in), and the readings of a board at
work (temperature, power, clocks, PCIe throughput, BAR1: the telemetry model, compared elsewhere). The driver is
the capture's (FAKEGPU_DRIVER_VERSION=580.159.04), so the layouts are that driver's.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.real_gpu.conftest import TOOLS, TORCH211_PYTHON, real, real_smi, under_fake

pytestmark = pytest.mark.native

DRIVER = real("nvml.json")["SystemDriverVersion"]


def smi(*args: str) -> subprocess.CompletedProcess[str]:
    """One nvidia-smi call under the fake, as capture.sh makes it (stdout then stderr, as the capture keeps them)."""
    return under_fake(["nvidia-smi", *args], env={"FAKEGPU_DRIVER_VERSION": DRIVER})


@pytest.mark.torch
def test_a_process_is_named_by_its_argv0(native_libs, torch211, tmp_path):
    """`python3 torch_memory.py OUT` holding 10 GiB: real nvidia-smi names it "python3", in the table and in
    --query-compute-apps, not the whole command line."""
    env = {"PATH": f"{TORCH211_PYTHON.parent}:{os.environ['PATH']}", "FAKEGPU_DRIVER_VERSION": DRIVER}
    proc = under_fake(["python3", str(TOOLS / "torch_memory.py"), str(tmp_path)], env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    apps = (tmp_path / "smi_holding_apps.out").read_text().splitlines()
    real_apps = real_smi("holding_apps").splitlines()
    assert apps[0] == real_apps[0]
    assert apps[1].split(", ")[1] == real_apps[1].split(", ")[1] == "python3"
    row = re.compile(r"^\|\s+0\s+N/A\s+N/A\s+\d+\s+C\s+(\S.*?)\s+\d+MiB \|$")
    names = [m[1] for line in (tmp_path / "smi_holding_default.out").read_text().splitlines() if (m := row.match(line))]
    real_names = [m[1] for line in real_smi("holding_default").splitlines() if (m := row.match(line))]
    assert names == real_names == ["python3"]

