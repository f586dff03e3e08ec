"""Errors of the estimators; each names the file (and field) a user has to fix."""

from __future__ import annotations

from pathlib import Path

from fakegpu.errors import EXIT_USAGE, FakeGPUError


class EstimateInputError(FakeGPUError):
    """A checkpoint, config or observation file the estimators cannot use."""

    exit_code = EXIT_USAGE
    code = "estimate-input"

    def __init__(self, path: Path | str, reason: str, field: str | None = None) -> None:
        where = f"{path}" + (f": field {field!r}" if field else "")
        super().__init__(f"{where}: {reason}")
        self.path = str(path)
        self.field = field
        self.reason = reason
