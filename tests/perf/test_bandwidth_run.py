"""fakegpu bandwidth for real on this host: 2 ranks of PyPI's CUDA torch under torchrun, in native mode (FakeGPU's
NCCL over shared memory, and over its socket transport) and in fakecuda mode (gloo). Small sizes: seconds each.
Timings are printed, never compared: they are this machine's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.reports import validate
from tests.conftest import IN_CI, REPO

pytestmark = [pytest.mark.torch, pytest.mark.slow]
SIZES = "8B:1MiB"


def _need(what: str, ok: bool) -> None:
    if not ok:
        if IN_CI:
            pytest.fail(what)
        pytest.skip(what)


@pytest.fixture(scope="module")
def torch_installed() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        _need("torch is not installed", False)


@pytest.fixture(scope="module")
def native_lib_dir(torch_installed) -> str:
    """The checkout's native build, or the one $FAKEGPU_NATIVE_DIR names (a worktree reading another's build)."""
    import torch

    lib = Path(os.environ.get("FAKEGPU_NATIVE_DIR") or REPO / "native" / "build" / "lib")
    _need(f"native build absent in {lib}; run `make native`", (lib / "libnccl.so.2").exists()
          and (lib / "libcudart.so.13").exists())
    _need(f"torch {torch.__version__} is not a CUDA 13 build", (torch.version.cuda or "").startswith("13"))
    return str(lib)


def bandwidth(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], dict]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    result = subprocess.run([sys.executable, "-m", "fakegpu", "bandwidth", *args, "--json"], capture_output=True,
                            text=True, env={**clean, **(env or {})}, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    doc = json.loads(result.stdout)
    validate(doc)
    validate(doc["data"])
    return result, doc["data"]


def _every_size_moved_data(doc: dict, ops: list[str]) -> None:
    assert [o["op"] for o in doc["ops"]] == ops
    for op in doc["ops"]:
        assert [r["check"] for r in op["rows"]] == ["ok"] * len(op["rows"]), op
        assert op["rows"][0]["size"] <= 16 and 1 << 17 < op["rows"][-1]["size"] <= 1 << 20
        assert all(r["measured"]["time_us"] > 0 and r["model"]["time_us"] > 0 for r in op["rows"])
    assert doc["all_checks_passed"] and doc["ranks"] == 2


OPS = ["all-reduce", "all-gather", "reduce-scatter", "broadcast", "all-to-all"]


@pytest.mark.native
@pytest.mark.parametrize("transport", ["auto", "socket"])
def test_native_two_ranks_move_real_data_at_every_size(native_lib_dir, transport):
    _, doc = bandwidth("--nproc", "2", "--mode", "native", "--transport", transport, "--sizes", SIZES,
                       "--step-factor", "8", "--iters", "3", "--warmup", "1", "--op", ",".join(OPS),
                       "--profile", "h100", env={"FAKEGPU_NATIVE_DIR": native_lib_dir})
    _every_size_moved_data(doc, OPS)
    assert doc["rank_local_calls"] == 0  # FakeGPU's NCCL exchanged every call between the two ranks
    assert doc["run"] == {"kind": "local", "cluster": None, "mode": "native", "devices": "h100:2", "nodes": 1,
                          "ranks_per_node": 2, "transport": transport, "worker": "file"}
    assert doc["target"]["node_groups"][0]["profile"] == "h100-sxm5-80gb" and doc["worker"]["backend"] == "nccl"


def test_fakecuda_two_ranks_through_gloo(torch_installed):
    _, doc = bandwidth("--nproc", "2", "--mode", "fakecuda", "--devices", "a100:2", "--sizes", SIZES,
                            "--step-factor", "8", "--iters", "3", "--warmup", "1")
    _every_size_moved_data(doc, ["all-reduce"])
    assert doc["rank_local_calls"] is None and doc["run"]["mode"] == "fakecuda"
    assert doc["target"]["node_groups"][0]["profile"] == "a100-sxm4-80gb"  # the model's board: the run's devices


@pytest.mark.native
def test_the_table_a_person_reads(native_lib_dir):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    result = subprocess.run([sys.executable, "-m", "fakegpu", "bandwidth", "--nproc", "2", "--sizes", "8B:64KiB",
                             "--step-factor", "64", "--iters", "2", "--warmup", "0"], capture_output=True, text=True,
                            env={**clean, "FAKEGPU_NATIVE_DIR": native_lib_dir}, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert "NOT a GPU's speed" in result.stdout
    header = next(i for i, ln in enumerate(lines) if ln.startswith("SIZE(B)"))
    rows = [ln.split() for ln in lines[header + 2:header + 5]]
    assert [r[0] for r in rows] == ["8", "512", "32768"] and all(r[6] == "ok" for r in rows)
    print(result.stdout)
