"""Run a validate matrix's cases: each as `fakegpu run` would run its command (the launcher's environment for
its devices and mode, and its command line: under fakegpu-procfs as root, a static CUDA runtime refused), in a
process group of its own with its stdout and stderr in per-case logs, ended with its whole process tree at its
timeout; up to `jobs` at once. A case in mode `container` runs in a container of its image instead
(container.py), and every container a run made is removed when it ends, interrupted or not.

Before anything runs, `check_runnable` refuses a case whose cwd is no folder or whose program is not found, so
a typo in the manifest is a usage error (exit 2) and not N failed cases; a program the case lists under
`requires.binaries` is the exception: missing, it makes the case skipped (requires.py), as any unmet requirement.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakegpu.errors import FakeGPUError, shorten
from fakegpu.interrupts import interrupt_on_stop_signals
from fakegpu.validate import requires
from fakegpu.validate.checks import CheckResult, evaluate, wants_memory
from fakegpu.validate.manifest import ManifestError
from fakegpu.validate.matrix import Case

# How long a timed-out case gets after SIGTERM before SIGKILL.
GRACE_S = 2.0
STATUSES = ("passed", "failed", "timeout", "error", "skipped")
# What fails a run (and stops it under --fail-fast); a skip is reported as one, never as a pass, but fails nothing.
FAILING = ("failed", "timeout", "error")


@dataclass
class CaseResult:
    case: Case
    status: str  # one of STATUSES
    exit_code: int | None = None
    elapsed_s: float = 0.0
    checks: list[CheckResult] = field(default_factory=list)
    message: str = ""  # why a case timed out, could not start, or was skipped
    stdout_log: Path | None = None
    stderr_log: Path | None = None
    memory: dict[str, Any] | None = None  # the preflight document of the run, when its expectations need it

    @property
    def ok(self) -> bool:
        return self.status == "passed"

    @property
    def failing(self) -> bool:
        return self.status in FAILING


def check_runnable(cases: Sequence[Case]) -> None:
    """ManifestError naming each case (file:line) whose cwd is no folder or whose program cannot be found."""
    from fakegpu.launcher import nvidia_smi_binary

    problems: list[str] = []
    for case in cases:
        if not case.cwd.is_dir():
            problems.append(f"{case.cwd_origin or case.origin}: {case.id}: cwd {case.cwd} is not a folder")
            continue
        program = case.command[0]
        if program in requires.names(case.requires.get("binaries")) or case.mode == "container":
            continue  # a required program is a skip when missing; a container's programs are the image's
        path = case.env.get("PATH") or os.environ.get("PATH", os.defpath)
        found = (shutil.which(program, path=path) if os.sep not in program
                 else shutil.which(str(case.cwd / program)))
        # fakegpu run puts its own nvidia-smi first on the PATH: a case may call it by name.
        if found is None and not (program == "nvidia-smi" and nvidia_smi_binary() is not None):
            problems.append(f"{case.origin}: {case.id}: program {shorten(program)} not found "
                            f"({'not an executable file' if os.sep in program else 'not on PATH'})")
    unique = list(dict.fromkeys(problems))
    if unique:
        raise ManifestError(unique)


def run_case(case: Case, stop: threading.Event | None = None) -> CaseResult:
    """Run one case and check its expectations."""
    from fakegpu.launcher import child_argv, end_tree, prepare

    unmet = requires.unmet(case.requires, case.command, case.cwd, {**os.environ, **case.env})
    if unmet:
        return CaseResult(case, "skipped", message=f"requirement not met: {'; '.join(unmet)}")
    case.case_dir.mkdir(parents=True, exist_ok=True)
    out_log, err_log = case.case_dir / "stdout.log", case.case_dir / "stderr.log"
    result = CaseResult(case, "error", stdout_log=out_log, stderr_log=err_log)
    started = time.monotonic()
    if case.mode == "container":
        try:
            _run_in_container(case, stop, result)
        finally:
            result.elapsed_s = time.monotonic() - started
        return result
    try:
        launch = prepare(case.devices, case.mode, base_env={**os.environ, **case.env})
    except FakeGPUError as exc:
        result.message = exc.message
        return result
    try:
        report_dir = _ask_for_memory_reports(case, launch) if wants_memory(case.expect) else None
        group = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
        program = case.command[0]
        # The launcher looks a program up from our cwd; a case's relative ./tool is relative to its own.
        command = [str(case.cwd / program) if os.sep in program else program, *case.command[1:]]
        with open(out_log, "wb") as out, open(err_log, "wb") as err:
            try:
                argv = child_argv(command, launch, case.mode)
                proc = subprocess.Popen(argv, cwd=case.cwd, env=launch.env, stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=err, **group)
            except FakeGPUError as exc:
                result.message = exc.message
                return result
            except OSError as exc:
                result.message = f"cannot start {shorten(case.command[0])}: {exc.strerror or exc}"
                return result
            timed_out = not _wait(proc, case.timeout_s, stop)
            if timed_out:
                ended = end_tree(proc, GRACE_S)
                others = f" and {ended - 1} process{'es' if ended != 2 else ''} it started" if ended > 1 else ""
                result.status, result.message = "timeout", (
                    f"{_why_ended(case, stop)}; ended it (pid {proc.pid}{others}: SIGTERM, SIGKILL after "
                    f"{GRACE_S:g} s)")
        rc = proc.returncode
        result.exit_code = 128 - rc if rc < 0 else rc
        if not timed_out:
            memory = None
            if report_dir is not None:
                from fakegpu.fakecuda import preflight

                memory = preflight.document(case.command, case.devices, case.mode, result.exit_code,
                                            preflight.gather(report_dir, case.mode))
            _check(case, result, memory)
    finally:
        launch.cleanup()
        result.elapsed_s = time.monotonic() - started
    return result


def _run_in_container(case: Case, stop: threading.Event | None, result: CaseResult) -> None:
    from fakegpu.validate import container

    assert result.stdout_log is not None and result.stderr_log is not None
    try:
        status, timed_out, ended = container.run(case, stop, result.stdout_log, result.stderr_log, GRACE_S)
    except FakeGPUError as exc:
        result.message = exc.message
        return
    result.exit_code = status
    if timed_out:
        result.status, result.message = "timeout", f"{_why_ended(case, stop)}; {ended}"
        return
    _check(case, result, None)


def _why_ended(case: Case, stop: threading.Event | None) -> str:
    return "stopped (the run was interrupted)" if stop is not None and stop.is_set() else (
        f"ran past its timeout of {case.timeout_s:g} s")


def _check(case: Case, result: CaseResult, memory: dict[str, Any] | None) -> None:
    """Hold a case that ran to its end to its expectations."""
    assert result.stdout_log is not None and result.stderr_log is not None and result.exit_code is not None
    stdout = result.stdout_log.read_text(encoding="utf-8", errors="replace")
    stderr = result.stderr_log.read_text(encoding="utf-8", errors="replace")
    result.memory = memory
    result.checks = evaluate(case.expect, result.exit_code, stdout, stderr, case.cwd, memory)
    result.status = "passed" if all(c.passed for c in result.checks) else "failed"


def _ask_for_memory_reports(case: Case, launch: Any) -> Path:
    """<case_dir>/reports, emptied of an earlier run's, where the case's processes write their memory reports
    (preflight.request_reports: what `fakegpu preflight` asks of a command)."""
    from fakegpu.fakecuda import preflight

    folder = case.case_dir / "reports"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    preflight.request_reports(launch.env, launch.root, case.mode, str(folder))
    return folder


def _wait(proc: subprocess.Popen, limit: float, stop: threading.Event | None) -> bool:
    """Wait for `proc` up to `limit` seconds; False when it is still running then or the run is being stopped."""
    deadline = time.monotonic() + limit
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or (stop is not None and stop.is_set()):
            return proc.poll() is not None
        try:
            proc.wait(timeout=min(left, 0.1))
            return True
        except subprocess.TimeoutExpired:
            continue


def run_cases(cases: Sequence[Case], jobs: int = 1, fail_fast: bool = False,
              on_start: Callable[[Case], None] | None = None,
              on_done: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Run `cases`, up to `jobs` at once, in order of the list; results in the same order. With `fail_fast`,
    after the first case that fails (FAILING: a skip does not count) no new case starts (the running ones finish)
    and the rest are skipped. On KeyboardInterrupt every running case's process tree is ended before it propagates."""
    requires.forget()
    results: list[CaseResult | None] = [None] * len(cases)
    lock = threading.Lock()
    next_index = [0]
    failed = threading.Event()
    stop = threading.Event()

    crashed: list[BaseException] = []

    def worker(done: threading.Event) -> None:
        try:
            work()
        except BaseException as exc:  # raised again in the caller's thread, not printed by threading's hook
            crashed.append(exc)
            stop.set()
        finally:
            done.set()

    def work() -> None:
        while True:
            with lock:
                if next_index[0] >= len(cases) or (fail_fast and failed.is_set()) or stop.is_set():
                    return
                index = next_index[0]
                next_index[0] += 1
                if on_start is not None:
                    on_start(cases[index])
            result = run_case(cases[index], stop)
            with lock:
                results[index] = result
                if result.failing:
                    failed.set()
                if on_done is not None:
                    on_done(result)

    # Waited for through events, not Thread.join: a join that a signal interrupts can leave the thread looking
    # finished while it still runs (CPython's tstate lock), and the cases' trees must be ended before we return.
    dones = [threading.Event() for _ in range(max(1, min(jobs, len(cases))))]
    restore = interrupt_on_stop_signals()  # Ctrl-C, a CI job cancelled, a closed terminal
    try:
        for done in dones:
            threading.Thread(target=worker, args=(done,), daemon=True).start()
        for done in dones:
            while not done.wait(0.2):
                pass
    except KeyboardInterrupt:
        stop.set()  # each running case ends its own tree (run_case's _wait sees the event)
        for done in dones:
            while not done.wait(0.2):
                pass
        raise
    finally:
        restore()
        if any(c.mode == "container" for c in cases):  # whatever a case cut short could not remove itself
            from fakegpu.validate import container

            container.cleanup()
    if crashed:
        raise crashed[0]
    reason = "not run: an earlier case failed (--fail-fast)"
    return [r if r is not None else CaseResult(c, "skipped", message=reason) for r, c in zip(results, cases,
                                                                                             strict=True)]
