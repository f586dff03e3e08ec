"""FakeGPU's NCCL: communicators through torch.distributed's own store, collectives that move real data between
the ranks of one host (shared segment keyed by the unique id) and never hang without peers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakegpu import reports
from tests.native_cuda.conftest import run_fakegpu

pytestmark = pytest.mark.native
SCRIPTS = Path(__file__).with_name("scripts")
OPS = ["allreduce_f32_sum", "allreduce_bf16_avg", "allreduce_f16_sum", "allreduce_i32_max", "broadcast_chunked",
       "allgather", "reduce_scatter", "all_to_all", "premul_sum"]  # fmt: skip


def peers(env: dict[str, str], nranks: int, **extra: str) -> list[str]:
    key = os.urandom(128).hex()
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPTS / "nccl_peer.py"), str(r), str(nranks), key],
            env={**env, **extra},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(nranks)
    ]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        outs.append(out)
    return outs


@pytest.mark.parametrize("nranks", [2, 3])
def test_collectives_move_data_between_ranks(cuda_env: dict[str, str], nranks: int) -> None:
    for out in peers(cuda_env, nranks, FAKEGPU_NCCL_CHUNK="4096"):
        assert [ln.split()[1] for ln in out.splitlines() if ln.startswith("ok ")] == OPS, out
    assert not list(Path("/dev/shm").glob("fakegpu-nccl-*")), "the segment name is removed once all joined"


LONELY = """
import ctypes, os, time
nccl = ctypes.CDLL(os.path.join(os.environ["FAKEGPU_LIB"], "libnccl.so.2"))
class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]
uid, comm = UniqueId(), ctypes.c_void_p()
assert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0
assert nccl.ncclCommInitRank(ctypes.byref(comm), 2, uid, 0) == 0  # the other rank never comes
x = (ctypes.c_float * 2)(5.0, 6.0)
y = (ctypes.c_float * 2)()
t = time.monotonic()
assert nccl.ncclAllReduce(x, y, ctypes.c_size_t(2), 7, 0, comm, None) == 0
print(list(y), time.monotonic() - t)
"""


def test_no_peers_is_rank_local_and_never_hangs(cuda_env: dict[str, str]) -> None:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", LONELY],
        env={**cuda_env, "FAKEGPU_NCCL_JOIN_TIMEOUT_S": "0.5"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    values, took = proc.stdout.split("]")
    assert values == "[5.0, 6.0" and float(took) < 0.1  # this rank's own input, at once
    assert time.monotonic() - start < 20 and "rank-local" in proc.stderr


@pytest.mark.torch
def test_ddp_nccl_two_ranks_under_torchrun(cuda_build, torch_python, tmp_path: Path) -> None:
    # torch 2.15 (libcudart.so.13) and torch 2.10 (libcudart.so.12) share one libnccl.so.2
    torchrun = [torch_python, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone"]
    rep = tmp_path / "reports"
    args = ["--devices", "a100:2", "--report-dir", str(rep), "--", *torchrun, str(SCRIPTS / "ddp_step.py")]
    proc = run_fakegpu(args, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    ranks = sorted(ln.split() for ln in proc.stdout.splitlines() if ln.startswith("rank"))
    assert [r[:2] for r in ranks] == [["rank0", "step-ok"], ["rank1", "step-ok"]]
    (_, _, before0, after0, *rest0), (_, _, before1, after1, *rest1) = ranks
    assert (before0, before1) == ("1.0", "2.0")
    assert after0 == after1 != "2.0", "DDP's broadcast gave rank 1 what rank 0 sent"
    assert rest0 == rest1 == ["3.0", "0.0", "1.0"]  # 1 + 2 all-reduced, each rank's input all-gathered
    workers = []
    for f in rep.iterdir():  # torchrun's agent writes one too (it imports torch), without collectives
        r = json.loads(f.read_text())
        reports.validate(r, "native-process")
        if r["collectives"]["calls"]:
            workers.append(r["collectives"])
    assert len(workers) == 2
    for c in workers:
        assert c["exchanged_calls"] == c["calls"] and c["rank_local_calls"] == c["degraded_communicators"] == 0
        assert {"all_reduce", "broadcast"} <= set(c["ops"])  # torch all-gathers a list by broadcasts
