"""Reading a file a user names (a fault plan, a telemetry recording): only a regular file, and at most a bound, so
a device or a FIFO in its place (/dev/urandom, a pipe) or a runaway file costs a bounded read, not the machine."""

from __future__ import annotations

import os
import stat


class UnreadableFile(ValueError):
    """The file cannot be what was asked for; the message says why (without the file's name: callers add it)."""


def read_text(path: str | os.PathLike[str], limit: int) -> str:
    """The file's text (UTF-8), or UnreadableFile: missing, not a regular file, over `limit` bytes, not UTF-8."""
    try:
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise UnreadableFile("not a regular file")
            raw = f.read(limit + 1)
    except OSError as exc:
        raise UnreadableFile(exc.strerror or str(exc)) from exc
    if len(raw) > limit:
        raise UnreadableFile(f"more than {limit >> 20} MiB" if limit >= 1 << 20 else f"more than {limit} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(str(exc)) from exc
