"""The load model's numbers and where they come from: the H200's are what tools/gpu_capture/fit_telemetry.py reads
off the real board's capture, other boards' are derived by load_model.yaml's rules and say so; and the shared
state's Python writer turns spans of work into the ring's per-slot microseconds (fakegpu/shared_state.py)."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import pytest
import yaml

from fakegpu import shared_state as ss
from fakegpu.profiles import load_catalog

REPO = Path(__file__).resolve().parents[2]


def fit_module():
    spec = importlib.util.spec_from_file_location("fit_telemetry", REPO / "tools" / "gpu_capture" / "fit_telemetry.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fitted() -> dict:
    return fit_module().fit(REPO / "tests" / "data" / "gpu" / "h200")


def test_the_h200_profile_holds_what_the_capture_fits(fitted: dict) -> None:
    h200 = load_catalog().get("h200").data
    for key, value in fitted["board"].items():
        section, field = key.split(".")
        assert h200[section][field] == value, key
    assert h200["telemetry"]["derived"] == [] and h200["telemetry"]["defaulted"] == []


def test_the_model_file_holds_what_the_capture_fits(fitted: dict) -> None:
    model = yaml.safe_load((REPO / "profiles" / "load_model.yaml").read_text())["model"]
    got = fitted["model"]
    assert model["cap_fraction"] == got["cap_fraction"] and model["clock_exponent"] == got["clock_exponent"]
    assert model["memory_util"] == {"compute": got["memory_util.compute"],
                                    "memory": min(100, got["memory_util.memory"])}
    assert model["util_period_s"] == got["util_period_s"] and model["power_window_s"] == got["power_window_s"]
    assert model["thermal"] == {"fast_tau_s": got["thermal.fast_tau_s"], "slow_tau_s": got["thermal.slow_tau_s"],
                                "fast_share": got["thermal.fast_share"]}
    assert fitted["thermal_fit_rms_c"] < 1.0


def test_other_boards_are_derived_from_the_h200_ratios_and_flagged(fitted: dict) -> None:
    rules = yaml.safe_load((REPO / "profiles" / "load_model.yaml").read_text())["derive"]
    assert rules["compute_w_per_limit_w"] == fitted["ratios_to_limit"]["compute_w"]
    assert rules["memory_w_per_limit_w"] == fitted["ratios_to_limit"]["memory_w"]
    a100 = load_catalog().get("a100").data
    t, limit = a100["telemetry"], a100["power"]["default_limit_w"]
    assert {"active_idle_w", "compute_w", "memory_w", "compute_c_per_w", "memory_c_per_w"} <= set(t["derived"])
    assert "idle_w" not in t["derived"] and t["idle_w"] == a100["power"]["idle_w"]
    assert t["active_idle_w"] == pytest.approx(t["idle_w"] + limit * rules["active_idle_w_above_idle_per_limit_w"],
                                               abs=0.05)
    assert t["compute_w"] == pytest.approx(limit * rules["compute_w_per_limit_w"], abs=0.05)
    assert t["idle_w"] < t["active_idle_w"] < t["memory_w"] < t["cap_w"] < t["compute_w"]


SLOT = ss.SLOT_NS
BASE = 1_000_000 * SLOT  # a slot boundary far from zero


def ring(f: ss.StateFile, device: int) -> dict[int, tuple[int, int]]:
    """slot -> (compute us, memory us) of every slot the ring holds for the device."""
    out = {}
    for i in range(ss.BUSY_SLOTS):
        (word,) = struct.unpack_from("Q", f._map, ss.OFF_BUSY + 8 * (device * ss.BUSY_SLOTS + i))
        if word:
            k = word >> (2 * ss.US_BITS)
            out[k] = ss.busy_word(word, k)
    return out


def test_spans_fill_their_slots_by_kind(tmp_path: Path) -> None:
    f = ss.StateFile(str(tmp_path), 4242, "writer")
    k = BASE // SLOT
    # 20 ms of compute from the start of slot k: all of k, 4.375 ms of k + 1.
    f.busy(3, ss.WORK_COMPUTE, BASE, BASE + 20_000_000)
    # 1 ms later (under BUSY_GAP_NS: the gap counts as more compute), 3 ms of memory work.
    f.busy(3, ss.WORK_MEMORY, BASE + 21_000_000, BASE + 24_000_000)
    # 10 ms later (a real pause): a launch with no span of its own counts KERNEL_NS.
    f.busy(3, ss.WORK_MEMORY, end_ns=BASE + 34_000_000)
    got = ring(f, 3)
    assert got[k] == (ss.SLOT_US, 0)
    assert got[k + 1] == (20_000 + 1_000 - ss.SLOT_US, 3_000)
    assert got[k + 2] == (0, ss.KERNEL_NS // 1000)
    assert ring(f, 2) == {}
    f.close()


def test_many_short_spans_add_up_to_the_microsecond(tmp_path: Path) -> None:
    f = ss.StateFile(str(tmp_path), 4243, "writer")
    for i in range(1000):  # 1000 spans of 1.5 us, 2 us apart: 2 ms of back-to-back work in all
        f.busy(0, ss.WORK_MEMORY, BASE + 2000 * i, BASE + 2000 * i + 1500)
    assert ring(f, 0)[BASE // SLOT] == (0, 1999)  # 1 999 500 ns, the gaps between them included
    f.close()
