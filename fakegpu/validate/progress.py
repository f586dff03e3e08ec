"""How a validate run shows its progress: one plain line per finished case wherever the output goes (a CI log
reads them as they come), and on a terminal also a status line under them, redrawn as cases start and end and
twice a second for the clock: cases done of all, how many run (and which), how many failed, time so far."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from typing import TextIO

from fakegpu.validate.matrix import Case
from fakegpu.validate.report import progress_line
from fakegpu.validate.runner import CaseResult

# Carriage return, then erase to the end of the line (ECMA-48 EL): every terminal emulator has it.
CLEAR = "\r\x1b[K"
TICK_S = 0.5


def is_live(stream: TextIO, environ: dict[str, str] | None = None) -> bool:
    """A status line only for a terminal that can redraw one: not a pipe or file, not TERM=dumb."""
    env = os.environ if environ is None else environ
    try:
        return stream.isatty() and env.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):  # a closed or foreign stream
        return False


class Progress:
    """Feed it `start` and `done` from the runner's threads (run_cases' on_start and on_done); `close` when the
    run ends or is interrupted, which takes the status line away and stops the clock."""

    def __init__(self, stream: TextIO, total: int, live: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, width: Callable[[], int] | None = None) -> None:
        self.stream, self.total, self.clock = stream, total, clock
        self.live = is_live(stream) if live is None else live
        self._width = width or (lambda: shutil.get_terminal_size((100, 24)).columns)
        self._lock = threading.Lock()
        self._began = clock()
        self._running: list[str] = []  # case ids, in the order they started
        self._done = self._failed = 0
        self._closed = threading.Event()
        self._ticker: threading.Thread | None = None
        if self.live:
            self._ticker = threading.Thread(target=self._tick, name="validate-progress", daemon=True)
            self._ticker.start()

    def start(self, case: Case) -> None:
        with self._lock:
            self._running.append(case.id)
            self._draw()

    def done(self, result: CaseResult) -> None:
        with self._lock:
            if result.case.id in self._running:
                self._running.remove(result.case.id)
            self._done += 1
            self._failed += result.failing
            line = progress_line(result, self._done, self.total)
            self.stream.write(f"{CLEAR}{line}\n" if self.live else f"{line}\n")
            self._draw()

    def close(self) -> None:
        self._closed.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
        with self._lock:
            if self.live:
                self.stream.write(CLEAR)
            self.stream.flush()

    def status(self) -> str:
        """[7/19] 2 running, 1 failed, 12.3 s: smi[profile=t4,mode=native], env[...], cut to the terminal's width."""
        text = f"[{self._done}/{self.total}] {len(self._running)} running"
        if self._failed:
            text += f", {self._failed} failed"
        text += f", {self.clock() - self._began:.1f} s"
        if self._running:
            text += ": " + ", ".join(self._running)
        width = max(20, self._width() - 1)  # the last column would wrap on some terminals
        return text if len(text) <= width else text[:width - 3] + "..."

    def _draw(self) -> None:  # with the lock held
        if self.live and not self._closed.is_set():
            self.stream.write(CLEAR + self.status())
        self.stream.flush()

    def _tick(self) -> None:
        while not self._closed.wait(TICK_S):
            with self._lock:
                self._draw()
