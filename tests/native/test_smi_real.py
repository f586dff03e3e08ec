"""nvidia-smi's default view against a real board's, field by field (issue 24: goldens are our own output).

The reference is a real capture of one H100 80GB HBM3 on driver 550.127.08 / CUDA 12.4, published in a public
issue; its facts are restated here as numbers (no NVIDIA text is kept): every row is 91 characters, the GPU
table's rows split at columns 0, 42, 67 and 90, the process table's at 0 and 90, and the board's static fields
read as below. Telemetry (temperature, power draw, used memory) and the PCI address differ between any two
machines and are not compared.
"""

from __future__ import annotations

import re

import pytest

from .conftest import NativeEnv

pytestmark = pytest.mark.native

WIDTH = 91
GPU_TABLE_COLUMNS = [0, 42, 67, 90]
FRAME_COLUMNS = [0, 90]
# What the real capture's GPU row and its two continuation rows show for this board (static facts only).
REAL_H100_550 = {
    "version": ("550.127.08", "12.4"),
    "name": "NVIDIA H100 80GB HBM3",
    "persistence": "On",
    "display_active": "Off",
    "ecc_errors": "0",
    "fan": "N/A",
    "perf": "P0",
    "power_cap_w": 700,
    "memory_total_mib": 81559,
    "compute_mode": "Default",
    "mig_mode": "Disabled",
}


def _separators(line: str) -> list[int]:
    return [i for i, c in enumerate(line) if c in "|+"]


def test_default_view_matches_a_real_h100_on_the_550_branch(native: NativeEnv) -> None:
    out = native.smi(devices="h100", FAKEGPU_DRIVER_VERSION="550.127.08", FAKEGPU_CUDA_VERSION="12.4")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()[1:]  # the first is the timestamp
    gpu_table = lines[:11]
    assert all(len(line) == WIDTH for line in gpu_table)
    assert [_separators(line) for line in gpu_table[:2]] == [FRAME_COLUMNS, FRAME_COLUMNS]
    assert all(_separators(line) == GPU_TABLE_COLUMNS for line in gpu_table[2:])
    version = re.search(r"NVIDIA-SMI (\S+) +Driver Version: (\S+) +CUDA Version: (\S+)", gpu_table[1])
    assert version and version.group(1) == version.group(2) and (version.group(2), version.group(3)) == \
        REAL_H100_550["version"]
    # the device rows (their cells between the separators)
    row1, row2, row3 = ([cell.strip() for cell in line.split("|")[1:-1]] for line in gpu_table[7:10])
    index, name, persistence = re.fullmatch(r"(\d+)\s+(.+?)\s+(On|Off)", row1[0]).groups()
    assert (index, name, persistence) == ("0", REAL_H100_550["name"], REAL_H100_550["persistence"])
    assert row1[1].split()[-1] == REAL_H100_550["display_active"] and row1[2] == REAL_H100_550["ecc_errors"]
    fan, _temp, perf, _draw, _slash, cap = row2[0].split()
    assert (fan, perf, cap) == (REAL_H100_550["fan"], REAL_H100_550["perf"], f"{REAL_H100_550['power_cap_w']}W")
    assert row2[1].split("/")[1].strip() == f"{REAL_H100_550['memory_total_mib']}MiB"
    assert row2[2].split()[-1] == REAL_H100_550["compute_mode"] and row3[2] == REAL_H100_550["mig_mode"]
    # a blank separator line, then the process table in the same frame
    processes = [line for line in lines[11:] if line.strip()]
    assert all(len(line) == WIDTH and _separators(line) == FRAME_COLUMNS for line in processes[1:-1])
    assert processes[-1].startswith("+") and "No running processes found" in processes[-2]
