"""Ranks that share torch: torchrun's workers forked from one process that imported torch once.

A fakecuda rank's memory is mostly torch's own: importing it and what DistributedDataParallel pulls in (dynamo,
sympy, the distributed packages) leaves about 240 MiB of private pages in every worker torchrun starts, so a host
fits few ranks (issue 22). With FAKEGPU_SHARE_TORCH=1, FakeGPU's start hook in torchrun's agent hands each worker
launch to a zygote: one process per agent that imports those modules once, freezes its objects out of the
garbage collector's reach, and forks a worker per launch. The workers then share those pages copy-on-write; each
pays for what it touches after the fork (measured: 250 MiB of PSS per rank without, about 70 MiB with).

It stays torchrun: the agent's SubprocessHandler._popen (what torchrun calls for each worker of a script) gets a
Popen-like handle instead of a Popen: `pid` is a session leader, as with Popen(start_new_session=True), so
torchrun's os.killpg reaches the worker; `poll()`, `wait()` and `returncode` come from the zygote, which reaps its
children and reports each exit. The worker runs as `python [-u] script args` would: sys.argv, sys.path[0], the
working folder, the environment torchrun gave it, its stdio; fakecuda is activated in it after the fork, from its
own environment. A launch the zygote cannot run that way (another interpreter option, a binary, a `-m` or `-c`
entry point, a zygote that failed to start or has threads) is started with Popen as before, and the first such
fallback says why on stderr. The zygote exits with its agent (end of file on their socket), killing any worker
still running.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import Any

ENABLE = "FAKEGPU_SHARE_TORCH"
# What a DDP rank imports; imported once in the zygote so every worker shares the pages. A module missing from a
# torch release is skipped.
PRELOAD = ("torch", "torch.distributed", "torch.nn.parallel", "torch.distributed.algorithms.join", "torch._dynamo",
           "torch.distributed.fsdp", "torch.distributed.tensor", "torch.optim", "fakegpu.fakecuda",
           "fakegpu.fakecuda.mode", "fakegpu.fakecuda.dispatch", "fakegpu.fakecuda.cuda_api",
           "fakegpu.fakecuda.distributed", "fakegpu.fakecuda.dtensor")
_MAX_MESSAGE = 1 << 20  # a request carries the worker's environment
_REPLY_TIMEOUT_S = 120.0  # the zygote's first reply waits for torch's import


def _send(sock: socket.socket, doc: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(doc).encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.sendall(data)


def _recv(sock: socket.socket, nfds: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
    data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, nfds)
    return (json.loads(data) if data else None), fds


# --- the agent's side -----------------------------------------------------------------------------------------


class ZygoteProcess:
    """What torchrun's SubprocessHandler uses of a Popen, for a worker the zygote forked."""

    def __init__(self, client: Zygote, pid: int, args: tuple) -> None:
        self._client, self.pid, self.args = client, pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._client.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            code = self._client.wait(self.pid, timeout)
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self.returncode = code
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The agent's connection to its zygote, started at the first worker launch with that worker's environment."""

    def __init__(self, env: dict[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The zygote itself runs no program: without FAKEGPU_RUNTIME its start hook activates nothing (each worker
        # activates fakecuda after the fork, from its own environment).
        zenv = {k: v for k, v in env.items() if k not in ("FAKEGPU_RUNTIME", "FAKEGPU_TORCH_REPORT", ENABLE)}
        self.process = subprocess.Popen([sys.executable, "-m", "fakegpu.fakecuda.zygote", str(theirs.fileno())],
                                        pass_fds=[theirs.fileno()], env=zenv, stdin=subprocess.DEVNULL)
        theirs.close()
        self.sock = ours
        self._lock = threading.Lock()  # one launch at a time
        self._cond = threading.Condition()
        self._exits: dict[int, int] = {}
        self._replies: list[dict[str, Any]] = []
        self._closed = False
        ours.settimeout(_REPLY_TIMEOUT_S)
        ready, _ = _recv(ours)
        ours.settimeout(None)
        if not ready or not ready.get("ready"):
            raise RuntimeError((ready or {}).get("error", "the zygote ended before it was ready"))
        threading.Thread(target=self._read, name="fakegpu-zygote", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                doc, _ = _recv(self.sock)
            except OSError:
                doc = None
            with self._cond:
                if doc is None:  # the zygote is gone, and its workers with it
                    self._closed = True
                    self._cond.notify_all()
                    return
                if "exited" in doc:
                    self._exits[doc["exited"]] = doc["code"]
                else:
                    self._replies.append(doc)
                self._cond.notify_all()

    def spawn(self, args: tuple, env: dict[str, str], fds: list[int]) -> int:
        with self._lock:
            _send(self.sock, {"argv": list(args), "env": env, "cwd": os.getcwd()}, fds)
            with self._cond:
                if not self._cond.wait_for(lambda: self._replies or self._closed, _REPLY_TIMEOUT_S):
                    raise RuntimeError("the zygote did not answer a launch")
                if not self._replies:
                    raise RuntimeError("the zygote has ended")
                reply = self._replies.pop(0)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return int(reply["pid"])

    def exit_code(self, pid: int) -> int | None:
        with self._cond:
            if pid in self._exits:
                return self._exits[pid]
            return -signal.SIGKILL if self._closed else None

    def wait(self, pid: int, timeout: float | None) -> int | None:
        with self._cond:
            self._cond.wait_for(lambda: pid in self._exits or self._closed, timeout)
        return self.exit_code(pid)


def runnable(args: tuple) -> str | None:
    """Why the zygote cannot run `args` as the interpreter would, or None when it can: `python [-u] SCRIPT ...`."""
    if not args or os.path.realpath(str(args[0])) != os.path.realpath(sys.executable):
        return f"{args[0] if args else '(nothing)'} is not this interpreter ({sys.executable})"
    rest = [str(a) for a in args[1:]]
    while rest and rest[0] == "-u":
        rest.pop(0)
    if not rest or rest[0].startswith("-"):
        return f"interpreter options other than -u ({' '.join(rest[:2]) or 'none'}): started as usual"
    return None


_zygote: dict[str, Any] = {}


def _fallback(reason: str) -> None:
    if not _zygote.get("warned"):
        _zygote["warned"] = True
        print(f"fakegpu: {ENABLE}: a worker started without the shared torch: {reason}", file=sys.stderr, flush=True)


def install() -> None:
    """Route torchrun's worker launches of this (agent) process through a zygote."""
    from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler as handler

    popen = handler.SubprocessHandler._popen

    def _popen(self: Any, args: tuple, env: dict[str, str]) -> Any:
        why = runnable(args) or _zygote.get("failed")
        if why is None:
            try:
                if "client" not in _zygote:
                    try:
                        _zygote["client"] = Zygote(env)
                    except (OSError, RuntimeError) as exc:  # not started: every later launch goes to Popen at once
                        _zygote["failed"] = f"the zygote did not start: {exc}"
                        raise
                fds = [0, *((f.fileno() if f else n) for f, n in ((self._stdout, 1), (self._stderr, 2)))]
                return ZygoteProcess(_zygote["client"], _zygote["client"].spawn(args, env, fds), args)
            except (OSError, RuntimeError) as exc:
                why = _zygote.get("failed") or str(exc)
        _fallback(why)
        return popen(self, args, env)

    handler.SubprocessHandler._popen = _popen


def is_torchrun_agent() -> bool:
    argv = getattr(sys, "orig_argv", sys.argv)
    if os.path.basename(sys.argv[0] if sys.argv else "") == "torchrun":
        return True
    return any(a == "-m" and b in ("torch.distributed.run", "torch.distributed.launch")
               for a, b in itertools.pairwise(argv))


# --- the zygote's side ----------------------------------------------------------------------------------------


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _reap(sock: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def serve(sock: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """Preload, then fork a worker per request. Returns (request, fds) in a forked worker; None when the agent
    has gone (every worker still running is killed first)."""
    import gc
    import importlib
    import select

    try:
        for name in PRELOAD:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
    except Exception as exc:  # any failure is reported, and the agent falls back to Popen
        _send(sock, {"error": f"preloading failed: {exc!r}"})
        return None
    # the preloaded objects stay out of the collector's passes (in the workers too), which would write to their pages
    gc.freeze()
    # a terminal's Ctrl-C reaches the agent's process group, the zygote included; the agent ends the workers (each
    # in a session of its own), and the zygote follows the agent, not the signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _send(sock, {"ready": True})
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([sock, read_end], [], [])
        if read_end in ready:
            os.read(read_end, 512)
            _reap(sock, children)
        if sock not in ready:
            continue
        request, fds = _recv(sock, 3)
        if request is None:
            for pid in children:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return None
        if _threads() != 1:  # forking a process with threads can copy a held lock; the agent uses Popen
            _send(sock, {"error": f"the zygote has {_threads()} threads"})
        else:
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (read_end, write_end):
                    os.close(fd)
                sock.close()
                signal.signal(signal.SIGINT, signal.default_int_handler)
                return request, fds
            children.add(pid)
            _send(sock, {"pid": pid})
        for fd in fds:
            os.close(fd)
        _reap(sock, children)


def run_worker(request: dict[str, Any], fds: list[int]) -> None:
    """Become the worker: its session, stdio, folder, environment and argv; fakecuda from its environment; then
    the script as __main__, and the end python gives a script (its threads joined, atexit run, the exit code or
    the traceback). Never returns."""
    import runpy

    os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    args = request["argv"][1:]
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    while args and args[0] == "-u":
        args, unbuffered = args[1:], True
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True, write_through=unbuffered)
    script = args[0]
    sys.argv = list(args)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    code = 0
    try:
        threads = os.environ.get("OMP_NUM_THREADS", "")
        if threads.isdigit() and int(threads) > 0:
            import torch  # the zygote read OMP_NUM_THREADS before torchrun set it

            torch.set_num_threads(int(threads))
        from fakegpu.fakecuda import envhook

        envhook.start(os.environ)
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        code = -signal.SIGINT
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    _finish(code)


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def _finish(code: int) -> None:
    """End as the interpreter ends a script, but without tearing down the heap: that would write to every page the
    worker shares with the zygote (measured: 32 workers grew from 1.2 to 6.8 GiB of PSS while exiting)."""
    import atexit

    try:
        threading._shutdown()  # non-daemon threads are joined, as at a normal exit
    except Exception:  # a thread's failure at exit must not hide the script's own code
        pass
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    served = serve(sock)
    if served is None:
        sys.exit(0)
    run_worker(*served)


if __name__ == "__main__":
    main()
