"""fakecuda on the other end of the supported torch range: release_check.py run by torch 2.10's interpreter.

The suite itself runs on the newest supported release (2.15, .venv); the oldest (2.10) lives in its own venv
(`make .venv-torch210`: torch==2.10.0 and numpy from PyPI, nothing else; the check puts this repository on
sys.path). Skipped when that venv is missing, failed under CI=true.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import IN_CI, REPO

CHECK = Path(__file__).with_name("release_check.py")
RELEASES = {"2.10": REPO / ".venv-torch210" / "bin" / "python"}
TIMEOUT_S = 420


def run_check(python: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKEGPU_", "PYTHON"))}
    proc = subprocess.run([str(python), str(CHECK)], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_accepted(res: dict) -> None:
    """What release_check.py must report on any supported torch build."""
    # training: same losses as the CPU, step by step
    assert len(res["fake_losses"]) == 3 and res["fake_losses"][-1] < res["fake_losses"][0]
    pairs = zip(res["fake_losses"], res["cpu_losses"], strict=True)
    assert all(math.isclose(f, c, rel_tol=1e-6, abs_tol=1e-7) for f, c in pairs)
    # allocator statistics of one 4000-byte tensor on a fresh device
    mem = res["memory"]
    assert mem["device"] == "cuda:1" and mem["is_cuda"] and mem["device_count"] == 2
    assert mem["allocated"] == mem["stats_current"] == mem["peak"] == 4096
    assert mem["reserved"] == mem["reserved_after_free"] == 2 * 1024 * 1024
    assert mem["allocated_after_free"] == 0 and mem["reserved_after_empty_cache"] == 0
    assert mem["name"] == "NVIDIA A100-SXM4-80GB" and mem["capability"] == [8, 0]
    # out of memory where CUDA would raise it, nothing left allocated by the failed request
    assert res["oom"]["raised"] == "OutOfMemoryError" and res["oom"]["allocated_unchanged"]
    assert res["oom"]["message"].startswith("CUDA out of memory. Tried to allocate")
    # DDP and FSDP2 on 2 ranks, backend "nccl": gradients of the whole batch
    ranks = res["ranks"]
    assert "error" not in ranks, ranks.get("error")
    assert ranks["backends"] == ["nccl", "nccl"]
    assert ranks["ddp_devices"] == ranks["fsdp2_devices"] == [["cuda:0"], ["cuda:1"]]
    assert ranks["ddp_max_error"] < 1e-6 and ranks["fsdp2_max_error"] < 1e-6
    assert res["modules"] == []  # fakecuda needs nothing beyond torch in that interpreter


@pytest.mark.slow
@pytest.mark.parametrize("release", sorted(RELEASES))
def test_fakecuda_acceptance_on_release(release):
    python = RELEASES[release]
    if not python.exists():
        message = f"no torch {release} interpreter at {python}: `make {python.parents[1].name}` creates it"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    res = run_check(python)
    assert res["torch"].startswith(f"{release}.") and res["torch_cuda"] is not None  # PyPI's CUDA build
    assert_accepted(res)
