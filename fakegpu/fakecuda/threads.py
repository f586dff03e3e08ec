"""Threads a program starts while fakecuda is active see the fake devices too, as every thread of a CUDA process
sees its GPUs.

torch keeps function modes, dispatch modes and the dispatch keys a C++ hook turns on per thread, so FakeCudaMode and
the charging hook that activate() entered on its own thread are absent from threads started later: there a
`torch.randn(8, device="cuda")` reached the CUDA build's real path ("Found no NVIDIA driver"). That is what
transformers' streaming generation (generate() on a Thread feeding a TextIteratorStreamer), a web server's worker
threads and a prefetching thread that moves batches to the GPU do. Every thread started while fakecuda is active
runs its body inside the hook's and the mode's per-thread entry (threading.Thread's bootstrap, which every thread
passes whatever its run() is). Threads started before activate() are left alone, and a thread still running after
deactivate() keeps the retired mode and hook on its stack, which then pass every call through untouched.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable
from typing import Any

_original: list[Callable[..., Any]] = []


def install(enter: Callable[[], contextlib.AbstractContextManager]) -> None:
    """From now on, each new thread runs inside `enter()` (a fresh context manager per thread)."""
    if _original or not hasattr(threading.Thread, "_bootstrap_inner"):
        return
    bootstrap = threading.Thread._bootstrap_inner

    def _bootstrap_inner(self: threading.Thread) -> None:
        try:
            context = enter()
            context.__enter__()
        except Exception as exc:
            # Thread.start() waits for the bootstrap to mark the thread started: it must run, fakecuda or not
            warnings.warn(f"fakecuda: thread {self.name} runs without the fake devices ({exc!r})", RuntimeWarning,
                          stacklevel=1)
            bootstrap(self)
            return
        try:
            bootstrap(self)
        finally:
            context.__exit__(None, None, None)

    _original.append(bootstrap)
    threading.Thread._bootstrap_inner = _bootstrap_inner


def uninstall() -> None:
    if _original:
        threading.Thread._bootstrap_inner = _original.pop()
