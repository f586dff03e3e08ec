"""Reading a file a user names (a fault plan, a telemetry recording): only a regular file, and at most a bound, so
a device or a FIFO in its place (/dev/urandom, a pipe) or a runaway file costs a bounded read, not the machine;
and parsing one: a hostile nesting depth is a parse error, not a RecursionError."""

from __future__ import annotations

import json
import os
import stat
from typing import Any, BinaryIO


class UnreadableFile(ValueError):
    """The file cannot be what was asked for; the message says why (without the file's name: callers add it)."""


# Bound for a configuration file a person wrote or a report a tool printed (manifests, op lists, fabric files,
# model and training configs): far above any real one, far below what a runaway file would cost.
CONFIG_BYTES = 16 << 20


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """The file opened for reading, or UnreadableFile when it is not a regular file. Opened non-blocking, so a FIFO
    in its place is refused at once instead of waiting forever for a writer; blocking again once known regular."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UnreadableFile(exc.strerror or str(exc)) from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
                "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket")
        raise UnreadableFile(f"not a regular file ({kind})")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_text(path: str | os.PathLike[str], limit: int) -> str:
    """The file's text (UTF-8), or UnreadableFile: missing, not a regular file, over `limit` bytes, not UTF-8."""
    with open_regular(path) as f:
        try:
            raw = f.read(limit + 1)
        except OSError as exc:
            raise UnreadableFile(exc.strerror or str(exc)) from exc
    if len(raw) > limit:
        raise UnreadableFile(f"more than {limit >> 20} MiB" if limit >= 1 << 20 else f"more than {limit} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(str(exc)) from exc


# Python's JSON and YAML readers recurse once per level of nesting, so a file of a few thousand `[` ends in a
# RecursionError that no caller's `except` names. No file FakeGPU reads nests that deep; these say so as each
# reader's own error, which its callers already turn into a message with the file's name.
TOO_DEEP = "nested too deeply to read (more levels of [ and { than a configuration or report ever has)"


def loads_json(text: str | bytes) -> Any:
    """json.loads; input nested too deeply for the parser raises json.JSONDecodeError like any other bad JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError(TOO_DEEP, text if isinstance(text, str) else "", 0) from None


def load_yaml(text: str) -> Any:
    """yaml.safe_load; input nested too deeply for the parser raises yaml.YAMLError like any other bad YAML."""
    import yaml

    try:
        return yaml.safe_load(text)
    except RecursionError:
        raise yaml.YAMLError(TOO_DEEP) from None
