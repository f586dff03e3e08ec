"""fakecuda jobs exit cleanly whether or not the script destroys its process groups (issue 13).

A group the script never destroyed stays in c10d's C++ GroupRegistry until libc's exit handlers, after Python
has finalized; anything Python that fakecuda hung on it (the collective-counting pre-hook) was destroyed there,
taking a dead interpreter's GIL: every rank printed its result and then died with SIGSEGV. The worker,
scripts/exit_worker.py, is a user's script: DDP, FSDP1 or FSDP2, one all_reduce, a printed line, and then
either destroy_process_group() or a plain return; launched by torchrun or by torch.multiprocessing.spawn.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import IN_CI, REPO

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from tests.fakecuda.test_distributed import (  # noqa: E402
    COUNTS_COLLECTIVES,
    INIT_TIMEOUT,
    RUN_TIMEOUT_S,
    WORLD,
    free_port,
    skip_without_libuv_store,
    worker_env,
)

pytestmark = pytest.mark.torch
WORKER = Path(__file__).with_name("scripts") / "exit_worker.py"
TORCH210 = REPO / ".venv-torch210" / "bin" / "python"


def run_worker(tmp_path: Path, python: str, kind: str, destroy: bool, launcher: str) -> None:
    args = [kind, "1" if destroy else "0"]
    if launcher == "spawn":
        cmd = [python, str(WORKER), *args, "spawn"]
    else:
        skip_without_libuv_store()
        cmd = [python, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD), "--master-addr",
               "127.0.0.1", "--master-port", str(free_port()), str(WORKER), *args]
    env = worker_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(REPO)])  # fakegpu for another release's venv
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=REPO)
    # every rank's own line (1 + 2, all-reduced), and then an exit status of 0 from every rank
    printed = sorted(line for line in proc.stdout.splitlines() if line.startswith("rank "))
    seen = f"exit status {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    assert printed == [f"rank {r} {kind} 3" for r in range(WORLD)], seen
    assert proc.returncode == 0, seen


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "destroy", "launcher"), [
    ("ddp", False, "torchrun"),  # the reproduction
    ("ddp", False, "spawn"),
    ("fsdp1", False, "torchrun"),
    ("fsdp2", False, "spawn"),
    ("fsdp1", True, "spawn"),  # the script's own destroy_process_group() meets fakecuda's exit handler
])
def test_job_exits_cleanly_with_or_without_destroy(tmp_path, kind, destroy, launcher):
    run_worker(tmp_path, sys.executable, kind, destroy, launcher)


@pytest.mark.slow
def test_job_exits_cleanly_without_destroy_on_torch_2_10(tmp_path):
    if not TORCH210.exists():
        message = f"no torch 2.10 interpreter at {TORCH210}: `make .venv-torch210` creates it"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    run_worker(tmp_path, str(TORCH210), "ddp", False, "torchrun")


@pytest.mark.skipif(not COUNTS_COLLECTIVES, reason="this torch has no ProcessGroup.register_pre_hook")
def test_exit_handler_takes_the_counting_hook_off_live_groups(fakecuda):
    from fakegpu.fakecuda import distributed

    fakecuda("a100:2")
    distributed.reset_collective_stats()
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                            timeout=INIT_TIMEOUT)
    try:
        t = torch.ones(2, device="cuda")
        dist.all_reduce(t)
        assert distributed.collective_stats()["all_reduce"]["calls"] == 1
        assert dist.group.WORLD in [ref() for ref in distributed._hooked]
        distributed._unhook_groups()  # what the atexit handler does first
        assert distributed._hooked == []
        dist.all_reduce(t)  # the group works on, uncounted: c10d holds nothing of fakecuda's any more
        assert distributed.collective_stats()["all_reduce"]["calls"] == 1
        assert t.cpu().tolist() == [1.0, 1.0]
    finally:
        dist.destroy_process_group()
