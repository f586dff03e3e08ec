"""Reading a file a user names (a fault plan, a telemetry recording): only a regular file, and at most a bound, so
a device or a FIFO in its place (/dev/urandom, a pipe) or a runaway file costs a bounded read, not the machine;
and parsing one: a hostile nesting depth is a parse error, not a RecursionError."""

from __future__ import annotations

import json
import os
import stat
from typing import Any


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
