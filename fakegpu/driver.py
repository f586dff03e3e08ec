"""The driver FakeGPU stands in for, on the Python side: its default version (fakegpu/data/native_versions.json,
the copy compiled into the shims by tools/gen_cuda_versions.py) and what a version looks like.

Standard library only and no `re`: the container runtime imports it at every start. native/common/fg_driver.c
holds the C side of the same rules (fg_is_driver_version).
"""

from __future__ import annotations

import json
import os

from fakegpu.locations import PACKAGE_DIR

# Longest accepted text: "999.999.999". Checked before anything else looks at a value.
MAX_DRIVER_VERSION_LENGTH = 11
_default: str | None = None


def default_driver_version() -> str:
    """The driver every surface reports unless the user picks another."""
    global _default
    if _default is None:
        with open(os.path.join(PACKAGE_DIR, "data", "native_versions.json"), encoding="utf-8") as f:
            _default = str(json.load(f)["driver_version"])
    return _default


def is_driver_version(text: str) -> bool:
    """NVIDIA's form: a three-digit branch (not starting with 0), then one or two parts of 1-3 digits
    (535.104.05, 550.127.08, 580.95.05)."""
    if len(text) > MAX_DRIVER_VERSION_LENGTH or not text.isascii():
        return False
    parts = text.split(".")
    return (2 <= len(parts) <= 3 and len(parts[0]) == 3 and parts[0][0] != "0"
            and all(p.isdigit() and 1 <= len(p) <= 3 for p in parts))


def driver_version_problem(text: str) -> str:
    """What is wrong with a value that is_driver_version refuses, for messages."""
    shown = text if len(text) <= 40 else text[:37] + "..."
    return (f"{shown!r} is not a driver version; expected one like 580.95.05 or 550.127.08 (its branch decides "
            "the CUDA version it supports)")
