"""Issue 20's recipe and LoRA-module rows: the bound reached, pinned so it cannot regress.

Reached when written: recipes, 7 rows from torchtune's README 'Optimization flags' table (each feature on top of the
previous one): median |error| 3.7 %, worst underestimate -5.1 %, worst +9.3 % (activation checkpointing: the plan
sums all gradients with the loss's buffers in backward). lora-modules, 4 rows from torchtune's LoRA tutorial
(max_memory_reserved, batches padded per batch: --varying-lengths): -2.6 to -3.1 %, median 2.8 %. Before the
varying-length terms every row was the same ~1.05 GiB short (-6.4 to -7.2 %); what the rows differ in (targets,
rank) is reproduced: see test_lora_module_rows_differ_as_measured.
"""

from __future__ import annotations

import pytest

from fakegpu.estimate.devset import load_devset, of_kind, run_devset, score
from tests.estimate.conftest import DEVSET

# (rows at least, median bound, worst-underestimate bound, worst-overestimate bound): reached plus margin.
BOUNDS = {"recipes": (7, 0.045, -0.06, 0.10), "lora-modules": (4, 0.045, -0.05, 0.0)}


@pytest.fixture(scope="module")
def results():
    return of_kind(run_devset(DEVSET / "devset.json"), "training")


@pytest.mark.parametrize("category", sorted(BOUNDS))
def test_category_bound(results, category):
    least, median, under, over = BOUNDS[category]
    rows = [r for r in results if r.group == category]
    s = score(rows)
    assert s["rows"] >= least, s
    assert s["median_abs_error"] <= median, s
    assert s["worst_underestimate"] >= under, s
    assert max(r.error for r in rows) <= over, [(r.id, r.error) for r in rows]


def test_recipe_rows_exercise_every_feature():
    rows = [r for r in load_devset(DEVSET / "devset.json") if r.get("category") == "recipes"]
    used = {k for r in rows for k, v in r["workload"].items() if v not in (False, None, "full", 0)}
    assert {"compile", "loss", "grad_checkpointing", "optimizer_in_backward", "activation_offloading",
            "packed"} <= used
    assert {r["workload"]["method"] for r in rows} == {"full", "lora", "qlora"}
    for r in rows:
        assert r["source"].startswith("https://github.com/pytorch/torchtune/") and r["notes"]


def test_lora_module_rows_differ_as_measured(results):
    """Adapting all linears and raising the rank cost what the tutorial measured, within 30 % of each difference
    (qv r8 -> all r8: +0.30 GB, -> qv r64: +0.29 GB, -> all r64: +1.47 GB)."""
    by_id = {r.id: r for r in results if r.group == "lora-modules"}
    base = by_id["torchtune-llama2-7b-lora-qv-r8"]
    for other in ("all-r8", "qv-r64", "all-r64"):
        r = by_id[f"torchtune-llama2-7b-lora-{other}"]
        measured, predicted = r.observed - base.observed, r.predicted - base.predicted
        assert predicted == pytest.approx(measured, rel=0.30), (other, measured, predicted)
