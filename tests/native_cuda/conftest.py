"""Fixtures for FakeGPU's CUDA libraries (built by `make native` into native/build/lib).

Without a build these tests skip with the reason, unless CI=true: then they fail, because CI must build them.
Each test process gets its own device table and state folder through `fakegpu run` or the `cuda_env` fixture.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import subprocess_torch

REPO = Path(__file__).resolve().parents[2]
LIB_DIR = REPO / "native" / "build" / "lib"
IN_CI = os.environ.get("CI") == "true"
LIBS = (
    "libcuda.so.1",
    "libcudart.so.13",
    "libcublas.so.13",
    "libcublasLt.so.13",
    "libnccl.so.2",
    "libcudnn.so.9",
    "libcusparse.so.12",
    "libcusolver.so.12",
    "libcufft.so.12",
    "libcufile.so.0",
    "libcusparseLt.so.0",
    "libnvrtc.so.13",
    "libnvshmem_host.so.3",
    "libcupti.so.13",
    "libcurand.so.10",
    # the CUDA 12 set (sonames that differ from CUDA 13's)
    "libcudart.so.12",
    "libcublas.so.12",
    "libcublasLt.so.12",
    "libcusolver.so.11",
    "libcufft.so.11",
    "libnvrtc.so.12",
    "libcupti.so.12",
)
# PyPI's last CUDA 12 torch (2.10.0+cu128), in a venv of its own: `make .venv-torch210` (`make test` makes it).
TORCH210_PYTHON = REPO / ".venv-torch210" / "bin" / "python"


def _require(what: str, ok: bool) -> None:
    if not ok:
        if IN_CI:
            pytest.fail(what)
        pytest.skip(what)


@pytest.fixture(scope="session")
def cuda_build() -> Path:
    missing = [n for n in LIBS if not (LIB_DIR / n).exists()]
    _require(f"native CUDA build absent ({', '.join(missing)}); run `make native`", not missing)
    return LIB_DIR


@pytest.fixture(scope="session")
def cuda_torch() -> None:
    """PyPI's CUDA build of torch (what native mode must fool)."""
    try:
        import torch
    except ImportError:
        _require("torch is not installed", False)
        return
    _require(f"torch {torch.__version__} is not a CUDA 13 build", (torch.version.cuda or "").startswith("13"))


@pytest.fixture(scope="session", params=["cu13", "cu12"])
def torch_python(request: pytest.FixtureRequest) -> str:
    """The interpreter of a CUDA build of torch: this venv's (CUDA 13, torch 2.15) or .venv-torch210's (CUDA 12.8,
    torch 2.10), so each native-mode torch test runs against both sets of FakeGPU's CUDA libraries."""
    if request.param == "cu13":
        request.getfixturevalue("cuda_torch")
        return sys.executable
    _require(f"{TORCH210_PYTHON} is missing: run `make .venv-torch210`", TORCH210_PYTHON.is_file())
    return str(TORCH210_PYTHON)


@pytest.fixture
def cuda_env(tmp_path: Path, cuda_build: Path) -> dict[str, str]:
    """An environment with a2 x A100 device table and a private state folder (for ctypes tests)."""
    from fakegpu.devices import resolve_devices
    from fakegpu.devices.table import write_table

    table = tmp_path / "devices.tbl"
    write_table(table, resolve_devices("a100:2", seed="0"), "a100:2", "0")
    state = tmp_path / "state"
    state.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    env.update(FAKEGPU_DEVICE_TABLE=str(table), FAKEGPU_STATE_DIR=str(state), FAKEGPU_LIB=str(cuda_build))
    return env


def run_fakegpu(
    args: list[str], timeout: float = 300, complete: subprocess_torch.Check | None = None
) -> subprocess.CompletedProcess[str]:
    """`fakegpu run ARGS` in a clean environment. A run of torch passes `complete`, what its whole output is
    (tests/subprocess_torch.py): an exit by PyTorch's known exit race after complete output then counts as the
    race, not a failure; without `complete` every exit is what it is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    return subprocess_torch.run(
        [sys.executable, "-m", "fakegpu", "run", *args], complete=complete, timeout=timeout, env=env
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    races = subprocess_torch.KNOWN_EXIT_RACES
    if races:
        terminalreporter.write_sep("-", f"known upstream exit race: {len(races)}")
        for line in races:
            terminalreporter.write_line(f"  {line}")
