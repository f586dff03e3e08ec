"""Durations as users type them: seconds, optionally with unit s, m or h (30, 1.5, 90s, 10m, 2h)."""

from __future__ import annotations

import re

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([smh]?)")
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}


def seconds(value: str | float) -> float | None:
    """The seconds a duration names, or None when it is not one (negative numbers included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if value >= 0 else None
    m = _DURATION.fullmatch(value.strip())
    return float(m[1]) * UNITS[m[2]] if m else None
