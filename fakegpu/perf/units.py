"""Quantities as people type them (`1.1e12`, `4GiB`, `2.5T`) and as the reports print them (`1.59 ms`)."""

from __future__ import annotations

import re

from fakegpu.errors import UsageError, shorten

# Decimal prefixes for counts and rates (FLOPs, bytes per second), binary ones for buffer sizes, as tools write
# them: 8B, 4GiB, 1.1T. A trailing unit word (B, FLOP, FLOPs) is allowed and ignored.
_PREFIX = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
           "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50}
_QUANTITY = re.compile(r"^\s*(?P<number>[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*"
                       r"(?P<prefix>Ki|Mi|Gi|Ti|Pi|[kKMGTP])?\s*(?:B|FLOPs?|flops?)?\s*$")


def parse_quantity(text: str | float | int, what: str) -> float:
    """A non-negative amount: a number, optionally with a decimal (k, M, G, T, P) or binary (Ki, Mi, Gi, Ti)
    prefix and a unit word; UsageError naming `what` otherwise."""
    if isinstance(text, bool):
        raise UsageError(f"{what}: {text!r} is not an amount")
    if isinstance(text, int | float):
        value = float(text)
    else:
        found = _QUANTITY.match(text)
        if not found:
            raise UsageError(f"{what}: {shorten(text)} is not an amount; expected a number such as 1.1e12, "
                             "2.5T or 4GiB")
        value = float(found["number"]) * _PREFIX[found["prefix"] or ""]
    if value < 0 or value != value or value == float("inf"):
        raise UsageError(f"{what}: {value!r} is not a non-negative finite amount")
    return value


def seconds_text(seconds: float) -> str:
    """1.59 ms, 21.5 us, 2.01 s: three significant figures in the unit that keeps them readable."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def amount_text(value: float) -> str:
    """1.1 T, 403 M, 512: a count with a decimal prefix."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}"
    return f"{value:.3g}"
