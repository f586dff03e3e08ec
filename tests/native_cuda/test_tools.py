"""The tools a CUDA user types: `nvidia-smi` first on PATH under `fakegpu run`, and `fakegpu nvidia-smi`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.native.conftest import NATIVE_DRIVER_VERSION
from tests.native_cuda.conftest import run_fakegpu
from tests.subprocess_torch import stdout_lines

pytestmark = pytest.mark.native


@pytest.fixture(autouse=True)
def _built(cuda_build) -> None:
    """The native build (nvidia-smi and the libraries), else a skip, or a failure in CI."""


def _fakegpu(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    return subprocess.run([sys.executable, "-m", "fakegpu", *args], capture_output=True, text=True,
                          env={**clean, **(env or {})}, timeout=120)


@pytest.mark.parametrize("mode", ["native", "fakecuda"])
def test_fakegpu_run_puts_our_nvidia_smi_first_on_path(mode: str) -> None:
    proc = run_fakegpu(["--devices", "t4:2", "--mode", mode, "--", "sh", "-c", "command -v nvidia-smi; nvidia-smi -L"])
    assert proc.returncode == 0, proc.stderr
    where, *gpus = proc.stdout.splitlines()
    assert where.endswith("/bin/nvidia-smi") and "fakegpu-run-" in where
    assert [g.split(" (UUID")[0] for g in gpus] == ["GPU 0: Tesla T4", "GPU 1: Tesla T4"]


def test_fakegpu_nvidia_smi_runs_on_the_chosen_devices() -> None:
    listed = _fakegpu("nvidia-smi", "--devices", "h100:2,l4", "-L")
    assert listed.returncode == 0, listed.stderr
    assert [g.split(" (UUID")[0] for g in listed.stdout.splitlines()] == [
        "GPU 0: NVIDIA H100 80GB HBM3", "GPU 1: NVIDIA H100 80GB HBM3", "GPU 2: NVIDIA L4"]
    query = _fakegpu("nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader",
                     env={"FAKEGPU_DEVICES": "a100:1"})
    assert query.stdout.splitlines() == [f"NVIDIA A100-SXM4-80GB, {NATIVE_DRIVER_VERSION}"]
    bad = _fakegpu("nvidia-smi", "--devices", "a10O:2", "-L")
    assert bad.returncode == 2 and "unknown profile 'a10O'" in bad.stderr and "Traceback" not in bad.stderr
    # nvidia-smi's own verdict on its arguments comes through, exit status included.
    odd = _fakegpu("nvidia-smi", "--no-such-flag")  # driver 580's words and status (tests/data/gpu/h200/smi)
    assert odd.returncode == 255 and "Option --no-such-flag is not recognized" in odd.stdout + odd.stderr


def test_fakegpu_nvidia_smi_inside_a_run_sees_that_runs_devices() -> None:
    proc = run_fakegpu(["--devices", "t4:3", "--", sys.executable, "-m", "fakegpu", "nvidia-smi", "-L"])
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 3 and "Tesla T4" in proc.stdout


@pytest.mark.torch
def test_torch_collect_env_finds_the_gpus_and_the_driver() -> None:
    proc = run_fakegpu(["--devices", "a100:2", "--", sys.executable, "-m", "torch.utils.collect_env"],
                       complete=stdout_lines("GPU", "Nvidia"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "GPU 0: NVIDIA A100-SXM4-80GB" in lines and "GPU 1: NVIDIA A100-SXM4-80GB" in lines
    assert f"Nvidia driver version: {NATIVE_DRIVER_VERSION}" in lines
    assert "Is CUDA available: True" in lines


@pytest.mark.torch
def test_a_cuda_13_torch_refuses_a_550_driver_as_on_a_real_host(torch_python: str) -> None:
    code = ("import torch, warnings\nwith warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always'); ok = torch.cuda.is_available()\n"
            "print('available', ok, torch.version.cuda)\nprint('warned', ' '.join(str(x.message) for x in w))\n")
    proc = run_fakegpu(["--driver", "550.127.08", "--", torch_python, "-c", code],
                       complete=stdout_lines("available", "warned"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    available, warned = proc.stdout.splitlines()[-2:]
    if available.split()[-1].startswith("13."):  # PyPI's CUDA 13 build
        assert available.startswith("available False")
        assert "The NVIDIA driver on your system is too old (found version 12040)" in warned
    else:  # the CUDA 12.8 build runs on a 12.4 driver (minor version compatibility)
        assert available.startswith("available True") and "too old" not in warned
