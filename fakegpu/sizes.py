"""Sizes as users type them and as PyTorch prints them: bytes, or a number with a unit, KB/MB/GB/TB (powers of
1000, as disks and `nvidia-smi`'s product names count) or KiB/MiB/GiB/TiB (powers of 1024, as CUDA, PyTorch and
nvidia-smi's MiB columns count): 70GiB, 1.5 TB, 512 MiB, 4096.

A bare G or GB-without-i is the one ambiguity users trip on, so the unit is asked for in full: "70G" is refused
with both readings named."""

from __future__ import annotations

import re

from fakegpu.errors import shorten

UNITS = {"B": 1, "KB": 1000, "MB": 1000**2, "GB": 1000**3, "TB": 1000**4,
         "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)")
EXPECTED = ("bytes, or a number with unit B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of "
            "1024), e.g. 70GiB")


def parse_bytes(value: str | int) -> int:
    """The bytes a size names; ValueError saying what a size is when `value` is none."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size; expected {EXPECTED}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value} is not a size; expected {EXPECTED}")
        return value
    found = _SIZE.fullmatch(value.strip())
    unit = found[2].upper() if found else ""
    if found is None or (unit and unit not in UNITS):
        hint = ""
        if found and unit in ("K", "M", "G", "T"):
            hint = f" ({found[1]}{unit}iB or {found[1]}{unit}B?)"
        raise ValueError(f"{shorten(value)} is not a size{hint}; expected {EXPECTED}")
    return round(float(found[1]) * UNITS[unit or "B"])
