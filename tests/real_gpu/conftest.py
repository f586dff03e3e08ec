"""The fake against a real GPU: tests/data/gpu/h200 holds what one real H200 answered (driver 580.159.04, torch
2.11.0+cu130, tools/gpu_capture); these tests run the same capture scripts under `fakegpu run --devices h200` and
hold FakeGPU to the real answers, fact by fact. What belongs to the capture's VM rather than to the board (bus id,
pass-through mode, CPU affinity, NVLink hidden, serial, UUID) is never compared: see the data's README.

The torch scripts run under .venv-torch211 (the capture's torch version; `make test` builds it), so a difference
is FakeGPU's and not a torch version's. Without the native build or that venv these tests skip, unless CI=true.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CAPTURE = REPO / "tests" / "data" / "gpu" / "h200"
TOOLS = REPO / "tools" / "gpu_capture"
TORCH211_PYTHON = REPO / ".venv-torch211" / "bin" / "python"
LIB_DIR = REPO / "native" / "build" / "lib"
IN_CI = os.environ.get("CI") == "true"


def require(what: str, ok: bool) -> None:
    if not ok:
        if IN_CI:
            pytest.fail(what)
        pytest.skip(what)


def real(name: str) -> dict:
    """One JSON file of the real capture."""
    return json.loads((CAPTURE / name).read_text(encoding="utf-8"))


def real_smi(name: str) -> str:
    """One nvidia-smi capture (stdout then stderr), tests/data/gpu/h200/smi/NAME.txt."""
    return (CAPTURE / "smi" / f"{name}.txt").read_text(encoding="utf-8")


def real_smi_status(name: str) -> int:
    for line in (CAPTURE / "smi" / "exit_status.tsv").read_text(encoding="utf-8").splitlines():
        key, rc = line.split("\t")
        if key == name:
            return int(rc)
    raise KeyError(name)


@pytest.fixture(scope="session")
def native_libs() -> Path:
    require("native build absent; run `make native`", (LIB_DIR / "libnvidia-ml.so.1").exists())
    return LIB_DIR


@pytest.fixture(scope="session")
def torch211() -> str:
    require(f"{TORCH211_PYTHON} is missing: run `make .venv-torch211`", TORCH211_PYTHON.is_file())
    return str(TORCH211_PYTHON)


def under_fake(argv: list[str], *, mode: str = "native", devices: str = "h200", timeout: float = 600,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`fakegpu run --devices DEVICES --mode MODE -- ARGV` in a clean environment, as capture.sh's steps ran."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    base.update(env or {})
    quiet = ["--on-device-read", "ignore"] if mode == "native" else []  # the option is native mode's only
    return subprocess.run([sys.executable, "-m", "fakegpu", "run", "--devices", devices, "--mode", mode, *quiet,
                           "--", *argv],
                          capture_output=True, text=True, timeout=timeout, env=base, cwd=REPO)


def fake_json(argv: list[str], **kw) -> dict:
    """A capture script's JSON document, produced under the fake."""
    proc = under_fake(argv, **kw)
    assert proc.returncode == 0, f"{argv} under the fake exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout)
