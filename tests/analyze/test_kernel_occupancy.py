"""Theoretical occupancy on worked examples (tests/data/kernels/occupancy_examples.yaml, each with how its
numbers follow from CUDA's documented rules), the allocation-rule table against the catalog, and CUDA's binary
and PTX compatibility rules."""

from __future__ import annotations

import pytest
import yaml

from fakegpu.analyze.kernel import compat
from fakegpu.analyze.kernel.occupancy import Limits, capabilities, occupancy, rules_for
from fakegpu.profiles import load_catalog
from tests.analyze.conftest import REPO

EXAMPLES = yaml.safe_load((REPO / "tests" / "data" / "kernels" / "occupancy_examples.yaml").read_text())["examples"]


@pytest.mark.parametrize("case", EXAMPLES, ids=[c["name"] for c in EXAMPLES])
def test_worked_examples(case):
    board = load_catalog().get(case["profile"])
    major, minor = board.compute_capability
    limits = Limits.of(f"{major}.{minor}", board.data["sm_limits"])
    got = occupancy(limits, case["threads"], case["registers"], case["shared"], case.get("dynamic_shared", 0))
    expect = dict(case["expect"])
    if "why_contains" in expect:
        assert got["launchable"] is False and expect.pop("why_contains") in got["why"]
    for key, value in expect.items():
        assert got[key] == value, (key, got)


def test_every_catalog_capability_has_rules_whose_largest_carveout_is_the_catalogs_shared_per_sm():
    for board in load_catalog():
        major, minor = board.compute_capability
        rules = rules_for(f"{major}.{minor}")
        assert rules is not None, board.id
        shared = board.data["sm_limits"]["shared_memory_per_sm_bytes"]
        if rules["shared_carveouts_kib"]:
            assert max(rules["shared_carveouts_kib"]) * 1024 == shared, board.id
        if (major, minor) >= (8, 0):
            # the most one block may opt in to is the SM's shared memory less the system's reservation
            assert board.data["sm_limits"]["shared_memory_per_block_optin_bytes"] == \
                shared - rules["reserved_shared_per_block_bytes"], board.id
    assert capabilities()[0] == "5.0"


def test_a_binary_that_holds_the_reservation_is_not_charged_twice():
    board = load_catalog().get("h100")
    limits = Limits.of("9.0", board.data["sm_limits"])
    # 1152 bytes: 1024 reserved at offset 0 (nvcc's .nv.reservedSmem on sm_90) and 128 of the kernel's own
    held = occupancy(limits, 256, 16, 1152, reserved_included=True)
    added = occupancy(limits, 256, 16, 128)
    assert held["shared_bytes_per_block_allocated"] == added["shared_bytes_per_block_allocated"] == 1152


@pytest.mark.parametrize("arch, device, runs", [
    ("sm_80", (8, 0), True), ("sm_80", (8, 6), True), ("sm_86", (8, 0), False), ("sm_80", (9, 0), False),
    ("sm_90a", (9, 0), True), ("sm_90a", (10, 0), False), ("sm_100f", (10, 3), True), ("sm_100a", (10, 3), False),
    ("compute_80", (9, 0), True), ("compute_80", (12, 0), True), ("compute_90", (8, 9), False),
    ("compute_90a", (9, 0), True), ("compute_90a", (10, 0), False), ("compute_100f", (10, 3), True),
    ("compute_100f", (12, 0), False), ("sm_75", (7, 5), True), ("sm_70", (7, 5), True), ("sm_75", (8, 0), False),
])
def test_binary_and_ptx_compatibility(arch, device, runs):
    assert compat.runs(arch, device) is runs


def test_the_verdicts_say_how_or_why_not():
    assert compat.verdict(["sm_90a"], [], (8, 0))["why"] == (
        "no kernel image for compute capability 8.0: launches fail with cudaErrorNoKernelImageForDevice (sm_90a is "
        "architecture-specific: it runs on compute capability 9.0 only; and there is no PTX the driver could "
        "JIT-compile)")
    jit = compat.verdict(["sm_80"], ["compute_80"], (9, 0))
    assert (jit["runs"], jit["how"], jit["images"]) == (True, "ptx-jit", ["compute_80"])
    assert compat.best_sass(["sm_80", "sm_86", "sm_90"], (8, 9)) == "sm_86"
    assert compat.best_sass(["sm_90", "sm_90a"], (9, 0)) == "sm_90a"
