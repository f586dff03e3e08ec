"""tests/subprocess_torch.py: only an abort with PyTorch's exit-race signature as the last stderr line, after
complete output, counts as the known race; every other failure stays a failure."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests import subprocess_torch as st

ABORT = """
import os, sys
print("done 1", flush=True)
sys.stderr.write({before!r})
sys.stderr.write("terminate called without an active exception\\n")
sys.stderr.write({after!r})
sys.stderr.flush()
os.{how}
"""


def child(before: str = "", after: str = "", how: str = "abort()", complete: st.Check | None = None):
    code = ABORT.format(before=before, after=after, how=how)
    return st.run([sys.executable, "-c", code], complete=complete, timeout=60)


@pytest.fixture(autouse=True)
def races(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    fresh: list[str] = []
    monkeypatch.setattr(st, "KNOWN_EXIT_RACES", fresh)  # the session's count is left alone
    return fresh


def test_the_race_after_complete_output_counts_and_passes(races: list[str]) -> None:
    proc = child(before="a warning\n", complete=st.stdout_lines("done"))
    assert proc.returncode == 0 and proc.stdout == "done 1\n"
    assert proc.stderr.endswith(st.SIGNATURE + "\n")
    assert len(races) == 1 and "test_the_race_after_complete_output" in races[0]


def test_fakegpu_run_status_134_is_the_same_abort() -> None:
    proc = subprocess.CompletedProcess(["x"], 134, "done\n", f"{st.SIGNATURE}\n")
    assert st.settle(proc, st.stdout_lines("done")).returncode == 0


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"complete": None}, -6),  # the caller said nothing about its output
        ({"complete": st.stdout_lines("done", "missing")}, -6),  # output incomplete
        ({"complete": st.stdout_json()}, -6),  # a check that fails on the output
        ({"after": "more output\n", "complete": st.stdout_lines("done")}, -6),  # not the last thing said
        ({"how": "kill(os.getpid(), 11)", "complete": st.stdout_lines("done")}, -11),  # another signal
        ({"how": "_exit(1)", "complete": st.stdout_lines("done")}, 1),  # an ordinary failure
    ],
)
def test_anything_else_stays_a_failure(races: list[str], kwargs: dict, code: int) -> None:
    assert child(**kwargs).returncode == code
    assert races == []


def test_reports_check(tmp_path) -> None:
    proc = subprocess.CompletedProcess(["x"], -6, "", "")
    assert not st.reports(tmp_path / "absent")(proc)
    (tmp_path / "fakegpu-native-1.json").write_text("{}")
    assert st.reports(tmp_path)(proc)
    (tmp_path / ".fakegpu-native-2.parts").mkdir()  # a merge that never ran
    assert not st.reports(tmp_path)(proc)
    (tmp_path / ".fakegpu-native-2.parts").rmdir()
    (tmp_path / "fakegpu-native-2.json").write_text('{"trunc')
    assert not st.reports(tmp_path, count=2)(proc)


# What native mode does about the race (native/cuda/driver/stream.c, fgd_sync_wait): a synchronisation gives the
# CPU away, so a thread waiting for the GIL the caller released around it (autograd's device thread, about to drop
# its GraphTask) gets it, as it would while a real device is waited for. A native thread blocked on the GIL is made
# with ctypes (a CFUNCTYPE callback as its start routine); ctypes releases the GIL around each foreign call.
WAITER = """
import ctypes, json, os, sys, time
sys.setswitchinterval(5.0)  # no forced GIL handoff: only the synchronisation's release can let the waiter in
# One CPU for the process and the waiter it starts: the waiter then runs only when the synchronising thread gives the
# CPU away, not because another core happened to be free (or busy), which is what makes the count load-proof.
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
rt = ctypes.CDLL(os.path.join(os.environ["FAKEGPU_LIB"], "libcudart.so.13"))
assert rt.cudaFree(None) == 0
event = ctypes.c_void_p()
assert rt.cudaEventCreate(ctypes.byref(event)) == 0
libc = ctypes.CDLL(None)
ran = []
START = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
waiter = START(lambda _: ran.append(1))
syncs = {"device": rt.cudaDeviceSynchronize, "stream": lambda: rt.cudaStreamSynchronize(None),
         "event": lambda: rt.cudaEventSynchronize(event)}
out = {}
for name, sync in syncs.items():
    hits, least = 0, 1.0
    for _ in range(40):
        ran.clear()
        tid = ctypes.c_ulong()
        assert libc.pthread_create(ctypes.byref(tid), None, waiter, None) == 0
        end = time.perf_counter() + 0.003
        while time.perf_counter() < end:  # holding the GIL: the new thread blocks on it
            pass
        t = time.perf_counter()
        assert sync() == 0
        least = min(least, time.perf_counter() - t)
        hits += bool(ran)
        libc.pthread_join(tid, None)
    out[name] = [hits, least]
print(json.dumps(out))
"""


def test_synchronize_lets_a_thread_waiting_for_the_gil_in(cuda_env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-c", WAITER], env=cuda_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name, (hits, least) in json.loads(proc.stdout).items():
        assert least >= 50e-6, f"cuda{name.title()}Synchronize returned at once"  # FAKEGPU_SYNC_YIELD_US=50
        assert hits >= 36, f"{name}: the waiting thread got the GIL in {hits} of 40 synchronisations"
