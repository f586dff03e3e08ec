"""A case's `requires`: Python modules its interpreter can import, programs on its PATH, a Docker Engine. Unmet,
the case is skipped with the reason (a skip is reported as one in every format and fails nothing), so a matrix
can hold cases for tools a given CI runner lacks without turning red or, worse, green for a case never run.

Which interpreter: `requires.python` when given; else the command's program when it is a Python interpreter, or
the interpreter a script's #! line names (torchrun, accelerate and other console scripts are such scripts); else
python3 on the case's PATH. Modules are looked up with importlib.util.find_spec in that interpreter, under the
case's environment (not the fake GPUs': finding a module must not start CUDA), so nothing is imported but a
dotted name's parents.

Each distinct question is asked once a run, whatever the number of cases that ask it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fakegpu.errors import shorten

# How long an interpreter gets to answer which modules it finds (an import of a parent package can be slow).
FIND_TIMEOUT_S = 120.0
_PYTHON = re.compile(r"python[0-9.]*")
_FIND = ("import importlib.util, sys\n"
         "for name in sys.argv[1:]:\n"
         "    try:\n"
         "        found = importlib.util.find_spec(name) is not None\n"
         "    except (ImportError, ValueError):\n"
         "        found = False\n"
         "    print(name if found else '-' + name)\n")


def names(value: str | Sequence[str] | None) -> list[str]:
    return [] if value is None else [value] if isinstance(value, str) else list(value)


class _Memo:
    """Answers kept for the run, computed once each even when cases ask at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: dict[Any, Any] = {}

    def get(self, key: Any, compute: Callable[[], Any]) -> Any:
        with self._lock:  # one question at a time: they are few, and a second asker waits for the first's answer
            if key not in self._answers:
                self._answers[key] = compute()
            return self._answers[key]


_memo = _Memo()


def forget() -> None:
    """A new run asks afresh (a module installed, an engine started since the last run in this process)."""
    global _memo
    _memo = _Memo()


def unmet(requires: Mapping[str, Any], command: Sequence[str], cwd: Path, env: Mapping[str, str]) -> list[str]:
    """Why a case cannot run, one reason per requirement not met; empty when all are met. `env` is the case's
    own environment (os.environ with the manifest's env on top)."""
    reasons: list[str] = []
    path = env.get("PATH", os.defpath)
    for binary in names(requires.get("binaries")):
        if _which(binary, path, cwd) is None:
            reasons.append(f"program {shorten(binary)} is not on PATH")
    modules = names(requires.get("modules"))
    if modules:
        python = interpreter(requires.get("python"), command, cwd, path)
        if python is None:
            reasons.append(f"no Python interpreter to import {', '.join(map(shorten, modules))} with "
                           "(set requires.python)")
        else:
            key = ("modules", python, tuple(modules), env.get("PYTHONPATH", ""), env.get("VIRTUAL_ENV", ""))
            missing = _memo.get(key, lambda: _missing_modules(python, modules, env))
            if isinstance(missing, str):
                reasons.append(missing)
            elif missing:
                reasons.append(f"module{'s' if len(missing) > 1 else ''} {', '.join(map(shorten, missing))} not "
                               f"importable by {python}")
    if requires.get("docker"):
        problem = _memo.get(("docker",), _docker_problem)
        if problem:
            reasons.append(problem)
    return reasons


def _which(program: str, path: str, cwd: Path) -> str | None:
    if os.sep in program:
        return shutil.which(str(cwd / program))
    found = shutil.which(program, path=path)
    if found is None and program == "nvidia-smi":  # fakegpu run puts its own first on a case's PATH
        from fakegpu.launcher import nvidia_smi_binary

        smi = nvidia_smi_binary()
        return None if smi is None else str(smi)
    return found


def interpreter(explicit: str | None, command: Sequence[str], cwd: Path, path: str) -> str | None:
    """The Python that runs the case's command, as the module doc says, or None when there is none."""
    if explicit:
        return _which(explicit, path, cwd)
    program = _which(command[0], path, cwd) if command else None
    if program is not None:
        if _PYTHON.fullmatch(Path(program).name):
            return program
        named = _shebang_python(Path(program), path)
        if named is not None:
            return named
    return shutil.which("python3", path=path) or sys.executable


def _shebang_python(program: Path, path: str) -> str | None:
    """The Python interpreter a script's #! line names (#!/venv/bin/python3, #!/usr/bin/env python3), if any."""
    try:
        with open(program, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", errors="replace").split()
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
        return shutil.which(words[0], path=path) if words and _PYTHON.fullmatch(words[0]) else None
    return words[0] if words and _PYTHON.fullmatch(Path(words[0]).name) else None


def _missing_modules(python: str, modules: list[str], env: Mapping[str, str]) -> list[str] | str:
    """The modules `python` cannot find, or why it could not be asked."""
    try:
        proc = subprocess.run([python, "-c", _FIND, *modules], env=dict(env), capture_output=True, text=True,
                              timeout=FIND_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot ask {python} for modules: {exc}"
    answered = proc.stdout.split()
    if proc.returncode != 0 or len(answered) != len(modules):
        last = (proc.stderr.strip().splitlines() or ["no answer"])[-1]
        return f"cannot ask {python} for modules: {shorten(last)}"
    return [line[1:] for line in answered if line.startswith("-")]


def _docker_problem() -> str:
    from fakegpu.doctor import PASS, check_docker

    result = check_docker()
    return "" if result.status == PASS else result.detail
