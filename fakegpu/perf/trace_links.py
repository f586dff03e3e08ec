"""How a what-if prices what crosses links rather than the chip: the CollectivePricer seam and its fallback (the
boards' GPU-to-GPU bandwidth ratio, used when no fabric is given), and the PCIe rate of host copies."""

from __future__ import annotations

from collections.abc import Callable

from fakegpu.perf.trace_collectives import Collective
from fakegpu.profiles import Profile

# PCIe per-lane rate of each generation, GB/s one way (after line coding).
_PCIE_LANE_GB_S = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

# (collective, source board, target board, recorded transfer in us) -> re-priced transfer in us
CollectivePricer = Callable[[Collective, Profile, Profile, float], float]


def link_gb_s(profile: Profile) -> float:
    """One GPU's GPU-to-GPU bandwidth one way: NVLink where the board has it, else its PCIe link."""
    nvlink = profile.data.get("nvlink") or {}
    if nvlink.get("bandwidth_gb_s"):
        return float(nvlink["bandwidth_gb_s"]) / 2  # the catalog gives both directions together
    return pcie_gb_s(profile)


def pcie_gb_s(profile: Profile) -> float:
    pci = profile.data.get("pci") or {}
    return _PCIE_LANE_GB_S.get(int(pci.get("generation", 4)), 1.969) * int(pci.get("link_width", 16))


def bandwidth_ratio_pricer(c: Collective, source: Profile, target: Profile, transfer_us: float) -> float:
    """The fallback collective price, when no fabric is given: the transfer scaled by the GPU-to-GPU link
    bandwidth ratio of the two boards (no message size, group size or network in it; trace_fabric's
    FabricPricer prices with the topology model instead)."""
    return transfer_us * link_gb_s(source) / link_gb_s(target)


def ratio_basis(profile: Profile) -> str:
    return f"{link_gb_s(profile):.0f} GB/s GPU-to-GPU one way (fallback link ratio: no fabric given)"
