"""Path options the CLI reads as text first: Path("") is the current folder, so an empty value (an unset variable
in a script) would be read as ".", and whatever is there used without a word."""

from __future__ import annotations

from pathlib import Path
from typing import overload

from fakegpu.errors import UsageError

MODEL_DIR_ACCEPTED = "a model folder, a .safetensors file or an index json"
CONFIG_ACCEPTED = "a model folder or its config.json"


@overload
def given_path(value: str, option: str, accepted: str) -> Path: ...
@overload
def given_path(value: None, option: str, accepted: str) -> None: ...
def given_path(value: str | None, option: str, accepted: str) -> Path | None:
    """`value` as a Path (None when the option was left out); UsageError (exit 2) when it is empty, naming `option`
    and what it `accepted`."""
    if value is None:
        return None
    if value == "":
        raise UsageError(f"{option} '' names no path; give {accepted}")
    return Path(value)
