"""The CLI's output: a versioned JSON envelope for machines (text tables for people: fakegpu.text).

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


def fail(command: str, error: FakeGPUError, as_json: bool) -> typer.Exit:
    """Report an expected error once, in the requested format; the caller raises what this returns."""
    if as_json:
        emit_json(command, None, error.exit_code, [{"code": error.code, "message": error.message}])
    else:
        print(f"fakegpu {command}: error: {error.message}", file=sys.stderr)
    return typer.Exit(error.exit_code)
