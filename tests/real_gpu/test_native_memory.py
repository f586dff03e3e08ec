"""Native mode's memory against a real H200's: the oracle of tests/memory_fidelity, itself held to the GPU.

tests/memory_fidelity scores fakecuda against native mode on the assumption that PyTorch's real CUDA path on
FakeGPU's simulated memory allocates what a GPU would. The capture tests that assumption: `probe.py workloads
--trace` and `probe.py opdb --samples 3` ran on the H200 under torch 2.11.0+cu130 (mem_workloads.json,
mem_opdb.json); here the same probe runs under native mode with the same torch (.venv-torch211) and must give
the same figures, checkpoint by checkpoint. What cannot match yet is listed below with its reason, as an exact
difference, so that a change for better or worse shows. The full op-database comparison is `make native-memory`
(tests/real_gpu/native_memory.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.memory_fidelity import harness
from tests.real_gpu import native_memory
from tests.real_gpu.conftest import real

pytestmark = [pytest.mark.native, pytest.mark.torch, pytest.mark.slow]

REAL_WORKLOADS = real("mem_workloads.json")
REAL_OPDB = real("mem_opdb.json")

# Workload checkpoints native mode does not match, as (checkpoint, metric) -> native minus GPU, with the reason.
KNOWN = {
    "conv1d_layernorm": ({("backward", "peak_allocated"): -3146240},
                         "cuDNN's filter-gradient workspace also holds split partial sums of dw (3146240 bytes here, "
                         "2064896 in cnn_step) whose size no rule fits to two measurements (native/cuda/dnn/graph.c)"),
}
# Workloads whose allocator events differ from the GPU's although every checkpoint above matches.
OTHER_SEQUENCE = {
    "cnn_step": "the filter-gradient workspace, as conv1d_layernorm's (it fits in a free segment: no figure moves)",
    "conv1d_layernorm": "the filter-gradient workspace (KNOWN)",
    "amp_autocast_gradscaler": "autocast's exit frees its cached casts in the order of a hash map keyed by address",
    **dict.fromkeys(
        ["activation_checkpointing", "adamw_step", "gpt2_causal_lm", "rmsnorm_silu_dropout", "transformer_encoder"],
        "of equal free blocks the caching allocator takes the one at the lowest address, so placement follows the "
        "order of segment addresses: native mode's are Linux's top-down mmap order, the driver's are neither that "
        "nor simply ascending (rmsnorm_silu_dropout's later 16 MiB segment lies above, embedding_cross_entropy's "
        "later 126 MiB one below)"),
}


@pytest.fixture(scope="module")
def workloads(native_libs, torch211, tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("native-memory") / "workloads.json"
    return native_memory.probe(torch211, ["workloads", "--trace"], out)


def differences(real_points: dict, fake_points: dict) -> dict[tuple[str, str], int]:
    return {(point, metric): fake_points.get(point, {}).get(metric, 0) - value
            for point, metrics in real_points.items() for metric, value in metrics.items()
            if fake_points.get(point, {}).get(metric) != value}


@pytest.mark.parametrize("name", list(REAL_WORKLOADS["cases"]))
def test_workload_equals_the_gpu_at_every_checkpoint(workloads: dict, name: str) -> None:
    fake = workloads["cases"][name]
    assert "error" not in fake, fake["error"]
    expected, why = KNOWN.get(name, ({}, ""))
    assert differences(REAL_WORKLOADS["cases"][name]["points"], fake["points"]) == expected, why


@pytest.mark.parametrize("name", [n for n in REAL_WORKLOADS["cases"] if n not in OTHER_SEQUENCE])
def test_allocator_events_equal_the_gpu(workloads: dict, name: str) -> None:
    """Every allocation, free and segment (bytes and place) in the GPU's order: stricter than the figures, since
    an extra temporary that lands in a free hole moves no peak."""
    real_events, fake_events = REAL_WORKLOADS["cases"][name]["trace"], workloads["cases"][name]["trace"]
    assert harness.sequence(fake_events) == harness.sequence(real_events), harness.diverge(real_events, fake_events)


def test_op_database_subset_within_tolerance(native_libs, torch211, tmp_path: Path) -> None:
    fake = native_memory.probe(torch211, ["opdb", "--samples", "3", "--ops", ",".join(native_memory.SUBSET)],
                               tmp_path / "opdb.json")
    rows = harness.compare(REAL_OPDB, fake)
    assert set(native_memory.SUBSET) <= {k.rsplit("#", 1)[0] for k in rows}, sorted(rows)  # (and their variants)
    off = native_memory.outside_tolerance(rows)
    assert set(off) == set(native_memory.KNOWN_OPDB) & set(rows), json.dumps(off, indent=1)
