"""The CLI's output: every --json result in the one envelope (fakegpu.reports.envelope), errors once, in the
asked-for format. Text tables for people are fakegpu.text's."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import typer

from fakegpu.errors import EXIT_OK, FakeGPUError
from fakegpu.reports import envelope


def emit_json(command: str, data: Any, exit_code: int = EXIT_OK, errors: Sequence[dict[str, str]] = ()) -> None:
    typer.echo(json.dumps(envelope(command, data, exit_code, errors), indent=2, sort_keys=False))


def fail(command: str, error: FakeGPUError, as_json: bool) -> typer.Exit:
    """Report an expected error once, in the requested format; the caller raises what this returns."""
    if as_json:
        emit_json(command, None, error.exit_code, [{"code": error.code, "message": error.message}])
    else:
        print(f"fakegpu {command}: error: {error.message}", file=sys.stderr)
    return typer.Exit(error.exit_code)
