"""How well two of the node's devices go together, for GetPreferredAllocation: the machine native/nvml's
pci_nvlink.c describes (nvidia-smi topo -m and NVML's topology queries say the same), in Python.

An HGX-style node: eight GPU slots per PCI domain, slots 0-3 on CPU socket 0 and 4-7 on socket 1, GPUs paired
behind PCIe switches (0-1, 2-3, ...); boards with NVLink reach every other NVLink board of the same model in
their domain through NVSwitches. tests/k8s/test_topology_nvml.py holds this against NVML's answers.
"""

from __future__ import annotations

from itertools import combinations
from math import comb
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fakegpu.devices import Device

SLOTS_PER_DOMAIN = 8

# nvidia-smi topo -m's names for a pair's best path, best first.
NVLINK, PCIE_SWITCH, SAME_SOCKET, CROSS_SOCKET = "NV", "PXB", "NODE", "SYS"
# What a pair is worth in a preferred allocation. Ratios, not measurements: an NVLink pair beats any number of
# PCIe pairs in a set of 8, and within PCIe, fewer hops beat more (as the bandwidth a collective gets does).
_WORTH = {NVLINK: 100, PCIE_SWITCH: 4, SAME_SOCKET: 2, CROSS_SOCKET: 1}
# A set of slices of one board shares its memory system and its host link; two slices of different boards pay
# the boards' path.
_SAME_BOARD = 200
# Above this many candidate sets, the choice is greedy rather than exhaustive (C(16, 8) = 12870 is exhaustive).
EXHAUSTIVE_LIMIT = 20000


def socket_of(device: Device) -> int:
    """The CPU socket (NUMA node) the GPU hangs off: what the plugin reports as the device's topology."""
    return 0 if device.index % SLOTS_PER_DOMAIN < SLOTS_PER_DOMAIN // 2 else 1


def _nvlinks(device: Device) -> int:
    return int(device.profile.data.get("nvlink", {}).get("links") or 0)


def path(a: Device, b: Device) -> str:
    """The best path between two different GPUs."""
    if (_nvlinks(a) and _nvlinks(b) and a.pci_domain == b.pci_domain and a.profile.id == b.profile.id):
        return NVLINK
    if a.pci_domain != b.pci_domain or socket_of(a) != socket_of(b):
        return CROSS_SOCKET
    if a.index % SLOTS_PER_DOMAIN // 2 == b.index % SLOTS_PER_DOMAIN // 2:
        return PCIE_SWITCH
    return SAME_SOCKET


def pair_worth(a: Device, b: Device, a_mig: int | None = None, b_mig: int | None = None) -> int:
    """A pair's worth: two slices of one board most, else their boards' path."""
    if a.index == b.index:
        return _SAME_BOARD if a_mig != b_mig else 0
    return _WORTH[path(a, b)]


def best_set(candidates: Sequence[int], must: Sequence[int], size: int,
             worth: dict[tuple[int, int], int]) -> list[int]:
    """`size` positions including `must`, chosen from `candidates` (positions, in preference order on ties) to
    maximise the summed worth of their pairs. worth[(i, j)] with i < j."""

    def score(chosen: Sequence[int]) -> int:
        ordered = sorted(chosen)
        return sum(worth[(i, j)] for i, j in combinations(ordered, 2))

    pool = [c for c in candidates if c not in must]
    need = size - len(must)
    if need <= 0:
        return list(must)[:size]
    if comb(len(pool), need) <= EXHAUSTIVE_LIMIT:
        best: tuple[int, ...] = ()
        best_score = -1
        for combo in combinations(pool, need):  # in pool order: the first best wins ties
            s = score([*must, *combo])
            if s > best_score:
                best, best_score = combo, s
        return [*must, *best]
    chosen = list(must)
    while len(chosen) < size:
        rest = [c for c in pool if c not in chosen]
        gain = {c: sum(worth[(min(c, o), max(c, o))] for o in chosen) for c in rest}
        pick = max(rest, key=lambda c: gain[c])  # max keeps the first of equals: pool order
        chosen.append(pick)
    return chosen
