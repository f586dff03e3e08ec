"""Running torch in a subprocess under native mode, with PyTorch's exit race told apart from real failures.

The race (issue 13; pytorch/pytorch#38228): CUDA's autograd device thread can drop the last reference to a
backward's GraphTask after the main thread began Py_FinalizeEx. The GIL the destructor asks for then ends that
thread with pthread_exit, whose forced unwind crosses a noexcept destructor: libstdc++ prints
"terminate called without an active exception" and the process dies by SIGABRT, after its work is done.

`run()` counts such an exit as the known race instead of a failure if and only if all of these hold:
  - the process was killed by SIGABRT: returncode -6, or 134 (128 + 6) through `fakegpu run` or a shell;
  - the last line of its stderr is exactly the signature above;
  - the caller's `complete(proc)` finds the work's own output whole (the stdout markers the test asserts, the
    report files it reads).
The run is then returned with returncode 0 (stdout and stderr as they were) for the test's own assertions, and
listed in KNOWN_EXIT_RACES, which tests/native_cuda/conftest.py prints at the end of the session
("known upstream exit race: N"). Anything else, an abort without the signature or with incomplete output
included, is returned unchanged and fails the test's assertions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

SIGNATURE = "terminate called without an active exception"
ABORT_CODES = (-signal.SIGABRT, 128 + signal.SIGABRT)
# One entry per run counted as the race: "<test id>: <command>".
KNOWN_EXIT_RACES: list[str] = []

Check = Callable[[subprocess.CompletedProcess], bool]


def is_exit_race(proc: subprocess.CompletedProcess) -> bool:
    """Killed by SIGABRT, the signature the last line of stderr."""
    if proc.returncode not in ABORT_CODES:
        return False
    tail = (proc.stderr or "").rstrip("\r\n").rsplit("\n", 1)[-1]
    return tail.rstrip("\r") == SIGNATURE


def stdout_lines(*words: str) -> Check:
    """Complete when, for every word, some line of stdout has it as its first word (how the tests key lines)."""

    def check(proc: subprocess.CompletedProcess) -> bool:
        firsts = {ln.split()[0] for ln in (proc.stdout or "").splitlines() if ln.strip()}
        return all(w in firsts for w in words)

    return check


def stdout_json() -> Check:
    """Complete when the last line of stdout is one whole JSON document."""

    def check(proc: subprocess.CompletedProcess) -> bool:
        lines = (proc.stdout or "").strip().splitlines()
        try:
            json.loads(lines[-1])
        except (IndexError, ValueError):
            return False
        return True

    return check


def reports(folder: os.PathLike[str] | str, count: int = 1) -> Check:
    """Complete when `folder` holds `count` native-mode reports (fakegpu-native-<pid>.json) that parse, and no
    parts folder is left (every merge finished)."""

    def check(proc: subprocess.CompletedProcess) -> bool:
        del proc
        root = Path(folder)
        if not root.is_dir() or any(p.name.startswith(".fakegpu-native-") for p in root.iterdir()):
            return False
        files = list(root.glob("fakegpu-native-*.json"))
        try:
            return len(files) == count and all(isinstance(json.loads(f.read_text()), dict) for f in files)
        except ValueError:
            return False

    return check


def all_of(*checks: Check) -> Check:
    return lambda proc: all(c(proc) for c in checks)


def settle(proc: subprocess.CompletedProcess, complete: Check | None) -> subprocess.CompletedProcess:
    """`proc` itself, or, when it is the known exit race with complete output, a copy with returncode 0 (and the
    run listed in KNOWN_EXIT_RACES). complete=None: no run is ever counted as the race."""
    if complete is None or not is_exit_race(proc):
        return proc
    try:
        whole = bool(complete(proc))
    except Exception:  # a check that cannot read the output: not complete
        whole = False
    if not whole:
        return proc
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
    args = proc.args if isinstance(proc.args, str) else " ".join(map(str, proc.args))
    KNOWN_EXIT_RACES.append(f"{test}: {args[-200:]}")
    return subprocess.CompletedProcess(proc.args, 0, proc.stdout, proc.stderr)


def run(
    cmd: Sequence[str], *, complete: Check | None, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """subprocess.run(cmd) with captured text output, then settle(): see the module's docstring."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, env=env)
    return settle(proc, complete)
