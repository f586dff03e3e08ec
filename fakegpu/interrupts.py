"""Ending work that runs in processes or containers of its own when the user or a supervisor says stop.

A CI runner cancels a job with SIGTERM, a closed terminal sends SIGHUP, and neither reaches work in process
groups or containers of its own; a shell starts background jobs with SIGINT ignored, which Python then leaves
ignored. While such work runs, `interrupt_on_stop_signals` makes all three raise KeyboardInterrupt in the main
thread, as Ctrl-C does, so the caller's one `except KeyboardInterrupt` ends the work and cleans up.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def interrupt_on_stop_signals() -> Callable[[], None]:
    """Install the handlers; returns the undo. A no-op outside the main thread, where Python cannot set them."""
    def interrupt(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt

    old: dict[int, object] = {}
    try:
        for sig in STOP_SIGNALS:
            old[sig] = signal.signal(sig, interrupt)
    except ValueError:
        pass

    def undo() -> None:
        for sig, handler in old.items():
            signal.signal(sig, handler)

    return undo
