"""The device plugin's picture of the node (fakegpu.k8s.topology) against the one NVML and nvidia-smi give:
`nvidia-smi topo -m`'s path between every pair of GPUs and each GPU's NUMA node."""

from __future__ import annotations

import re

import pytest

from fakegpu.devices import resolve_devices
from fakegpu.k8s.topology import NVLINK, path, socket_of

pytestmark = pytest.mark.native


@pytest.mark.parametrize("spec", ["l4:4,h100:4,a100:2", "h100:8,l4:8", "rtx-4090:3,a100:5"])
def test_topology_matches_nvidia_smi(native, spec):
    result = native.smi("topo", "-m", devices=spec)
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines() if re.match(r"GPU\d+\t", line)]
    devices = resolve_devices(spec, seed="0")
    assert len(rows) == len(devices)
    for i, row in enumerate(rows):
        cells = [c.strip() for c in row[1:len(devices) + 1]]
        for j, cell in enumerate(cells):
            if i != j:
                want = NVLINK if cell.startswith("NV") else cell
                assert path(devices[i], devices[j]) == want, (i, j, cell)
        numa = row[len(devices) + 2].strip()
        assert int(numa) == socket_of(devices[i]), (i, row)
