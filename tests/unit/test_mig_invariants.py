"""The MIG checks in check_profile: a good board passes, and each deliberately broken block is reported."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from fakegpu.profiles.compile import PROFILES_DIR, load_capabilities
from fakegpu.profiles.invariants import check_profile

CAPABILITIES = load_capabilities()
GOOD_REL = "ampere/a100-sxm4-80gb.yaml"
GOOD = yaml.safe_load((PROFILES_DIR / GOOD_REL).read_text())


def _gip(p: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in p["mig"]["gpu_instance_profiles"] if g["name"] == name)


def _unsupported_with_profiles(p: dict[str, Any]) -> None:
    p["mig"]["supported"] = False
    del p["mig"]["max_instances"]


def _duplicate_name(p: dict[str, Any]) -> None:
    _gip(p, "2g.20gb")["name"] = "1g.10gb"


def _ng_mismatch(p: dict[str, Any]) -> None:
    _gip(p, "2g.20gb")["compute_slices"] = 3


def _placement_past_end(p: dict[str, Any]) -> None:
    _gip(p, "3g.40gb")["placements"]["starts"] = [0, 6]


def _more_instances_than_placements(p: dict[str, Any]) -> None:
    _gip(p, "2g.20gb")["instances"] = 4


def _too_many_compute_slices(p: dict[str, Any]) -> None:
    p["mig"]["slices"]["compute"] = 4


def _memory_over_board(p: dict[str, Any]) -> None:
    _gip(p, "1g.10gb")["memory_mib"] = 12288  # x8 = 96 GiB on an 80 GiB board


def _full_profile_many_instances(p: dict[str, Any]) -> None:
    full = _gip(p, "7g.80gb")
    full["instances"] = 2
    full["placements"]["starts"] = [0, 0]
    full["placements"]["size"] = 4
    full["memory_mib"] = 40192


def _sm_over_board(p: dict[str, Any]) -> None:
    _gip(p, "7g.80gb")["sm_count"] = 112


def _max_instances_off(p: dict[str, Any]) -> None:
    p["mig"]["max_instances"] = 6


@pytest.mark.parametrize(("breaker", "needle"), [
    (_unsupported_with_profiles, "only when MIG is supported"),
    (_duplicate_name, "listed twice"),
    (_ng_mismatch, "does not match compute_slices"),
    (_placement_past_end, "runs past the 8 memory slices"),
    (_more_instances_than_placements, "only 3 placements"),
    (_too_many_compute_slices, "but the board has 4"),
    (_memory_over_board, "exceeds the board's"),
    (_full_profile_many_instances, "can have 1 instance"),
    (_sm_over_board, "SMs, but the board has 108"),
    (_max_instances_off, "differs from the 7 instances"),
], ids=lambda v: v.__name__.strip("_") if callable(v) else None)
def test_broken_mig_block_is_reported(breaker: Callable[[dict[str, Any]], None], needle: str) -> None:
    broken = copy.deepcopy(GOOD)
    breaker(broken)
    problems = check_profile(GOOD_REL, broken, CAPABILITIES)
    assert any(needle in msg for msg in problems), problems


def test_good_mig_blocks_pass() -> None:
    assert check_profile(GOOD_REL, copy.deepcopy(GOOD), CAPABILITIES) == []
    h200 = "hopper/h200-sxm-141gb.yaml"
    assert check_profile(h200, yaml.safe_load((PROFILES_DIR / h200).read_text()), CAPABILITIES) == []


def test_every_filled_mig_board_is_internally_consistent() -> None:
    filled = [p for p in sorted(PROFILES_DIR.glob("*/*.yaml"))
              if "gpu_instance_profiles" in yaml.safe_load(p.read_text())["mig"]]
    assert len(filled) >= 2
    for path in filled:
        rel = str(path.relative_to(PROFILES_DIR))
        assert check_profile(rel, yaml.safe_load(path.read_text()), CAPABILITIES) == [], rel
