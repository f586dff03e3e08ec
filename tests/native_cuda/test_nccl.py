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
       "allgather", "reduce_scatter", "all_to_all", "premul_sum", "split_allreduce"]  # fmt: skip


def peers(env: dict[str, str], nranks: int, key: str | None = None, **extra: str) -> list[str]:
    key = key or os.urandom(128).hex()
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


@pytest.mark.parametrize("nranks", [2, 4])
def test_the_socket_transport_moves_data_between_ranks(cuda_env: dict[str, str], nranks: int, tmp_path: Path) -> None:
    # What ranks in different containers or hosts use (net.c): the id from rank 0's ncclGetUniqueId carries its
    # bootstrap root; the ranks connect over TCP on this host's address, as NCCL's socket transport.
    outs = peers(cuda_env, nranks, key=f"@{tmp_path / 'id'}", FAKEGPU_NCCL_CHUNK="4096",
                 FAKEGPU_NCCL_TRANSPORT="socket", FAKEGPU_NCCL_JOIN_TIMEOUT_S="20")
    for out in outs:
        assert [ln.split()[1] for ln in out.splitlines() if ln.startswith("ok ")] == OPS, out


def test_socket_transport_peers_that_die_or_never_come_leave_the_rank_local(cuda_env, tmp_path: Path) -> None:
    # rank 1 of 2 never starts: the root never has the whole table to answer with, so rank 0's init gives up at
    # the join timeout and its collectives are rank-local
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(SCRIPTS / "nccl_peer.py"), "0", "2", f"@{tmp_path / 'id'}"],
                          env={**cuda_env, "FAKEGPU_NCCL_TRANSPORT": "socket", "FAKEGPU_NCCL_JOIN_TIMEOUT_S": "1"},
                          capture_output=True, text=True, timeout=60)
    assert time.monotonic() - start < 30
    assert "bootstrap root at" in proc.stderr and "did not answer" in proc.stderr, proc.stderr
    assert "rank-local" in proc.stderr
    # its all-reduce is its own input: the check that sums two ranks' inputs fails, and says so
    assert "bad allreduce_f32_sum" in proc.stdout, proc.stdout


def test_the_bootstrap_root_ignores_strangers(cuda_env: dict[str, str], tmp_path: Path) -> None:
    import socket

    code = (
        "import ctypes, os, sys\n"
        "nccl = ctypes.CDLL(os.path.join(os.environ['FAKEGPU_LIB'], 'libnccl.so.2'))\n"
        "class U(ctypes.Structure): _fields_ = [('internal', ctypes.c_char * 128)]\n"
        "u = U(); assert nccl.ncclGetUniqueId(ctypes.byref(u)) == 0\n"
        "raw = ctypes.string_at(ctypes.addressof(u), 128); print(raw.hex(), flush=True); sys.stdin.readline()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env={**cuda_env, "FAKEGPU_NCCL_TRANSPORT": "socket"},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        raw = bytes.fromhex(proc.stdout.readline().strip())
        assert raw[16:20] == b"FGN1"
        family, port = int.from_bytes(raw[20:22], "little"), int.from_bytes(raw[22:24], "big")
        assert family == socket.AF_INET and port > 0
        host = socket.inet_ntoa(raw[24:28])
        # a stranger's garbage, then a hello with the wrong key: the root drops both and keeps serving
        for payload in (b"GET / HTTP/1.0\r\n\r\n" * 10, b"FGN1"[::-1] + os.urandom(16) + bytes(28)):
            with socket.create_connection((host, port), timeout=5) as s:
                s.sendall(payload)
                s.settimeout(5)
                try:
                    answer = s.recv(100)
                except ConnectionResetError:  # closed with our bytes unread: a reset
                    answer = b""
                assert answer == b""  # closed on us, nothing answered
        with socket.create_connection((host, port), timeout=5):
            pass  # still listening
    finally:
        proc.communicate(input="\n", timeout=30)


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
@pytest.mark.parametrize("transport", ["shm", "socket"])
def test_ddp_nccl_two_ranks_under_torchrun(cuda_build, torch_python, tmp_path: Path, transport: str) -> None:
    # torch 2.15 (libcudart.so.13) and torch 2.10 (libcudart.so.12) share one libnccl.so.2; the socket transport
    # is what ranks on different hosts use, here through torch's own id exchange
    torchrun = [torch_python, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone"]
    rep = tmp_path / "reports"
    args = ["--devices", "a100:2", "--report-dir", str(rep), "--", "env", f"FAKEGPU_NCCL_TRANSPORT={transport}",
            *torchrun, str(SCRIPTS / "ddp_step.py")]
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


def fault_peers(env: dict[str, str], plan: str, ops: int, transport: str = "shm") -> list[list[list[str]]]:
    """Two ranks of one communicator (nccl_fault_peer.py) under the fault plan `plan` (one --fault flag's text);
    each rank's printed lines, split."""
    from fakegpu.faults import board
    from fakegpu.faults.plan import parse_flag, records

    board.append(env["FAKEGPU_STATE_DIR"], records([parse_flag(plan)], ["GPU-0", "GPU-1"], 0))
    key = os.urandom(128).hex() if transport == "shm" else "@" + os.path.join(env["FAKEGPU_STATE_DIR"], "nccl-id")
    procs = [subprocess.Popen([sys.executable, str(SCRIPTS / "nccl_fault_peer.py"), str(r), "2", key, str(ops)],
                              env={**env, "RANK": str(r), "FAKEGPU_NCCL_TIMEOUT_S": "3",
                                   "FAKEGPU_NCCL_TRANSPORT": transport},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        outs.append([ln.split(maxsplit=3) for ln in out.splitlines()])
    return outs


@pytest.mark.parametrize("transport", ["shm", "socket"])
def test_an_injected_nccl_hang_hangs_the_rank_and_the_peers_waiting_for_it(cuda_env: dict[str, str],
                                                                          transport: str) -> None:
    start = time.monotonic()
    rank0, rank1 = fault_peers(cuda_env, "nccl=hang,rank=1,after_collectives=3", 4, transport)
    # ops 1 and 2 move data and complete; at op 3 rank 1 hangs, and rank 0, waiting for it in the same
    # collective, hangs with it: each call returns (its kernel is queued), and nothing after it completes
    for out in (rank0, rank1):
        assert out[:2] == [["op", "1", "0", "0 0 3.0"], ["op", "2", "0", "0 0 3.0"]], out
        assert [ln[:3] for ln in out[2:4]] == [["op", "3", "0"], ["op", "4", "0"]]
        assert all(ln[3].split()[:2] == ["600", "600"] for ln in out[2:4]), out
        assert out[4] == ["async", "0"], out  # a hang is no error NCCL reports: only a watchdog can tell
    assert time.monotonic() - start < 30  # rank 0 saw the hang; it did not wait out FAKEGPU_NCCL_TIMEOUT_S


@pytest.mark.parametrize("transport", ["shm", "socket"])
def test_an_injected_nccl_error_fails_the_rank_s_operations_from_then_on(cuda_env: dict[str, str],
                                                                        transport: str) -> None:
    rank0, rank1 = fault_peers(cuda_env, "nccl=error,rank=1,after_collectives=2", 3, transport)
    assert [ln[:3] for ln in rank1[:3]] == [["op", "1", "0"], ["op", "2", "6"], ["op", "3", "6"]]  # ncclRemoteError
    assert rank1[3][:2] == ["async", "6"] and "rank 1's connection to its peers failed" in " ".join(rank1[3][2:])
    # rank 0 loses its peer in op 2 (after FAKEGPU_NCCL_TIMEOUT_S, or its exit) and goes on rank-locally
    assert [ln[:3] for ln in rank0[:3]] == [["op", "1", "0"], ["op", "2", "0"], ["op", "3", "0"]]
    assert rank0[0][3] == "0 0 3.0" and rank0[2][3] == "0 0 1.0" and rank0[3] == ["async", "0"]
