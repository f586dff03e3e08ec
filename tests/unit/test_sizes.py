"""Sizes as users type them (fakegpu.sizes): decimal and binary units, the bare-G ambiguity refused."""

from __future__ import annotations

import pytest

from fakegpu.sizes import parse_bytes


@pytest.mark.parametrize(("text", "size"), [
    ("70GiB", 70 << 30), ("70 GiB", 70 << 30), ("70gib", 70 << 30), ("1.5 TB", 1_500_000_000_000),
    ("512MiB", 512 << 20), ("4096", 4096), ("4096 B", 4096), ("80GB", 80_000_000_000), (".5KiB", 512),
    ("1024.00 MiB", 1 << 30), (0, 0), (123, 123),
])
def test_sizes(text: str | int, size: int) -> None:
    assert parse_bytes(text) == size


def test_a_bare_g_names_both_readings() -> None:
    with pytest.raises(ValueError) as caught:
        parse_bytes("70G")
    assert str(caught.value).startswith("'70G' is not a size (70GiB or 70GB?); expected bytes, or a number with unit")


@pytest.mark.parametrize("bad", ["", "GiB", "70 GiBs", "-1", "1e9", "70 GiB 2", True, -5])
def test_what_is_no_size(bad: str | int) -> None:
    with pytest.raises(ValueError, match="is not a size"):
        parse_bytes(bad)
