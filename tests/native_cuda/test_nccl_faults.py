"""A fault plan's NCCL faults under torchrun with backend nccl: PyPI's CUDA torch in native mode (FakeGPU's
libnccl, torch's own watchdog and errors) and the same plan under fakecuda (NCCL on gloo)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from tests.native_cuda.conftest import TORCH210_PYTHON, run_fakegpu

pytestmark = [pytest.mark.native, pytest.mark.torch, pytest.mark.slow]
SCRIPTS = Path(__file__).with_name("scripts")
STEPS = 6
# The group's timeout (nccl_fault_steps.py), and how long torch 2.15 waits for its debug dump before aborting
# (15 s by default) shortened, so a hang ends within seconds.
ENV = {"STEPS_TIMEOUT_S": "4", "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "1000"}


def run_steps(python: str, mode: str, fault: str) -> tuple[str, dict[int, list[int]], float]:
    """The job under `fakegpu run --mode MODE --fault FAULT`: its output and the steps each rank finished."""
    args = ["--devices", "a100:2", "--mode", mode, "--fault", fault, "--timeout", "120", "--", "env",
            *[f"{k}={v}" for k, v in ENV.items()], python, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--standalone", str(SCRIPTS / "nccl_fault_steps.py"), str(STEPS)]
    start = time.monotonic()
    proc = run_fakegpu(args, timeout=180)
    took = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]  # torchrun's: a worker failed (not our --timeout's 124)
    # (the ranks' lines may share one: their prints interleave)
    steps = {r: [int(m) for m in re.findall(rf"rank {r} step (\d+) 3\.0", out)] for r in (0, 1)}
    return out, steps, took


def exitcode(out: str, local_rank: int) -> int:
    """The exit code torchrun's failure summary gives the rank."""
    for block in out.split("[")[1:]:
        if f"local_rank: {local_rank})" in block and "exitcode" in block:
            return int(re.search(r"exitcode\s*:\s*(-?\d+)", block).group(1))
    raise AssertionError(f"no exit code for local rank {local_rank} in\n{out[-3000:]}")


def root_cause(out: str) -> tuple[int, int]:
    """(local rank, exit code) of the failure torchrun observed first (its summary's root cause): the ranks that
    fail later may already have been ended by its SIGTERM."""
    cause = out.split("Root Cause (first observed failure):", 1)[1]
    return (int(re.search(r"local_rank:\s*(\d+)", cause).group(1)),
            int(re.search(r"exitcode\s*:\s*(-?\d+)", cause).group(1)))


@pytest.mark.parametrize("mode", ["native", "fakecuda"])
def test_an_nccl_error_fails_the_rank_s_collective_with_torch_s_error(cuda_build, mode: str) -> None:
    out, steps, _ = run_steps(sys.executable, mode, "nccl=error,rank=1,after_collectives=4")
    assert steps[1] == [1, 2, 3], out[-4000:]  # its 4th NCCL operation is step 4's all-reduce
    assert ("RuntimeError: NCCL AllReduce failed: remote process exited or there was a network error \n"
            "[rank1]: NCCL Last Error: FakeGPU fault plan: rank 1's connection to its peers failed") in out
    assert exitcode(out, 1) == 1


@pytest.mark.parametrize("mode", ["native", "fakecuda"])
def test_an_nccl_hang_meets_the_watchdog_which_takes_the_process_down(cuda_build, mode: str) -> None:
    out, steps, took = run_steps(sys.executable, mode, "nccl=hang,rank=1,after_collectives=4")
    assert steps == {0: [1, 2, 3], 1: [1, 2, 3]}, out[-4000:]
    if mode == "native":
        # torch's own watchdog, on both ranks: rank 0 waits in the collective rank 1 never finishes; whichever
        # aborts first (SIGABRT, torch's way of taking the process down) is what torchrun reports
        assert re.search(r"\[rank1\]:.*Operation timed out after \d+ ms", out), out[-4000:]
        assert re.search(r"\[rank0\]:.*Operation timed out after \d+ ms", out), out[-4000:]
        assert root_cause(out)[1] == -6, out[-4000:]
    elif root_cause(out) == (1, -6):  # fakecuda: the hung rank's watchdog came first
        assert ("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE, "
                "NumelIn=4, NumelOut=4, Timeout(ms)=4000) ran for 4000 milliseconds") in out
    else:  # or its peer's gloo timeout, at the same group timeout, and torchrun ended rank 1
        assert root_cause(out) == (0, 1) and "Timed out waiting 4000ms for recv operation to complete" in out, \
            out[-4000:]
    assert took < 90


def test_torch_2_10_s_watchdog_meets_a_native_nccl_hang(cuda_build) -> None:
    if not TORCH210_PYTHON.is_file():
        pytest.fail(f"{TORCH210_PYTHON} is missing: run `make .venv-torch210`")
    out, steps, _ = run_steps(str(TORCH210_PYTHON), "native", "nccl=hang,rank=1,after_collectives=4")
    assert steps == {0: [1, 2, 3], 1: [1, 2, 3]}, out[-4000:]
    for r in (0, 1):
        assert (f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE, "
                "NumelIn=4, NumelOut=4, Timeout(ms)=4000)") in out, out[-4000:]
    assert root_cause(out)[1] == -6, out[-4000:]
