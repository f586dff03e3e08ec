"""The one renderer of command results: aligned text tables for people, a versioned JSON envelope for machines.

Envelope (stable; pinned by tests):
    {"schema": "fakegpu.cli/v1", "command": "devices", "status": "ok"|"error", "exit_code": 0,
     "data": ..., "errors": [{"code": "...", "message": "..."}]}
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import typer

from fakegpu.errors import EXIT_OK, FakeGPUError

ENVELOPE_SCHEMA = "fakegpu.cli/v1"


def envelope(command: str, data: Any, exit_code: int = EXIT_OK, errors: Sequence[dict[str, str]] = ()) -> dict:
    return {
        "schema": ENVELOPE_SCHEMA,
        "command": command,
        "status": "ok" if exit_code == EXIT_OK else "error",
        "exit_code": exit_code,
        "data": data,
        "errors": list(errors),
    }


def emit_json(command: str, data: Any, exit_code: int = EXIT_OK, errors: Sequence[dict[str, str]] = ()) -> None:
    typer.echo(json.dumps(envelope(command, data, exit_code, errors), indent=2, sort_keys=False))


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """Left-aligned columns, two spaces apart, with a rule under the header."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def fail(command: str, error: FakeGPUError, as_json: bool) -> typer.Exit:
    """Report an expected error once, in the requested format; the caller raises what this returns."""
    if as_json:
        emit_json(command, None, error.exit_code, [{"code": error.code, "message": error.message}])
    else:
        print(f"fakegpu {command}: error: {error.message}", file=sys.stderr)
    return typer.Exit(error.exit_code)


def human_bytes(n: int) -> str:
    """Bytes in MiB, as nvidia-smi shows memory."""
    return f"{n // (1 << 20)} MiB"
