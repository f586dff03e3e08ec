"""The reserved-memory fit: the native-mode tool's records are PyTorch's allocator's, its file is the one the
estimators read, and the estimators apply its terms."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fakegpu.estimate import reserved, runtime
from fakegpu.estimate.errors import EstimateInputError
from fakegpu.locations import native_lib_dir

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "reserved_fit" / "run.py"
MIB = 1 << 20
SEGMENT = 2 * MIB  # every segment of the caching allocator is a multiple of this (small: exactly; large: rounded)


def _native_ready() -> None:
    lib = Path(native_lib_dir())
    if not (lib / "libcudart.so.13").exists():
        pytest.skip(f"native CUDA build absent in {lib}; run `make native`")
    torch = pytest.importorskip("torch")
    if not (torch.version.cuda or "").startswith("13"):
        pytest.skip(f"torch {torch.__version__} is not a CUDA 13 build")
    pytest.importorskip("transformers")


@pytest.mark.native
@pytest.mark.torch
def test_quick_run_records_the_allocator_and_writes_a_loadable_fit(tmp_path: Path) -> None:
    _native_ready()
    out, runs = tmp_path / "fit.json", tmp_path / "runs"
    proc = subprocess.run([sys.executable, str(TOOL), "--quick", "--out", str(out), "--runs-dir", str(runs)],
                          capture_output=True, text=True, timeout=240, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for conf in ("default", "expandable_segments"):
        doc = json.loads((runs / f"runs-{conf}.json").read_text())
        assert doc["device"].startswith("NVIDIA A100") and doc["torch"].split("+")[0].count(".") == 2
        assert {r["spec"]["kind"] for r in doc["runs"]} == {"training", "inference"}
        for run in doc["runs"]:
            # each workload starts from no segments, as in a fresh process (cuBLAS workspaces freed too)
            assert run["reserved_at_start"] == run["allocated_at_start"] == 0
            for p in run["phases"]:
                assert p["reserved"] % SEGMENT == 0 and p["peak_reserved"] % SEGMENT == 0, p
                assert p["small_reserved"] == p["small_segments"] * SEGMENT or conf != "default", p
                assert p["peak_allocated"] >= p["allocated"] and p["peak_reserved"] >= p["reserved"], p
                assert p["reserved"] >= p["allocated"] and p["peak_reserved"] >= p["peak_allocated"], p
            assert run["run_peak_reserved"] > run["run_peak_allocated"] > sum(run["frozen_param_sizes"])
        if conf == "default":
            # The weights' segments as the tool measured them are what the estimators' replay gives.
            infer = next(r for r in doc["runs"] if r["spec"]["kind"] == "inference")
            load = infer["phases"][0]
            assert load["phase"] == "load"
            assert runtime.reserved_for_resident(infer["frozen_param_sizes"]) == load["reserved"]
    fit = reserved.load_fit(out)
    assert set(fit.terms) == {"default", "expandable_segments"}
    written = json.loads(out.read_text())
    assert fit.torch == written["torch"]
    for kind in reserved.KINDS:
        t = written["alloc_confs"]["default"]["terms"][kind]
        assert fit.for_kind(kind) == reserved.Terms(t["a"], t["c"], t["b"], t["v"])
        assert fit.for_kind(kind).a >= 1.0  # the allocator never holds less than a step's own peak
        assert written["alloc_confs"]["default"]["scores"][kind]["runs"] >= 1


def test_the_tool_writes_the_file_the_estimators_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # the tool puts its own folder first; undone afterwards
    sys.path.insert(0, str(TOOL.parent))
    import run as tool

    assert tool.DEFAULT_FIT_PATH is reserved.DEFAULT_FIT_PATH  # --out's default
    shipped = json.loads(reserved.DEFAULT_FIT_PATH.read_text())
    assert shipped["tool"] == "tools/reserved_fit/run.py"
    fit = reserved.load_fit()
    for kind in reserved.KINDS:
        assert vars(fit.for_kind(kind)) == {k: float(v) for k, v in
                                            shipped["alloc_confs"]["default"]["terms"][kind].items()}
    # Every shipped workload's residual is what the shipped terms give for it.
    for row in shipped["alloc_confs"]["default"]["workloads"]:
        t = fit.for_kind(row["kind"])
        held = t.held(row["transient_bytes"], row["optimizer_state_bytes"], row["loss_buffer_bytes"])
        assert runtime.round_up(row["resident_bytes"] + held, runtime.LARGE_ROUND) == row["predicted_reserved"]


def test_bad_fit_files_say_what_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "fit.json"
    bad.write_text(json.dumps({"schema": "something/v1"}))
    with pytest.raises(EstimateInputError, match="not a reserved-memory fit"):
        reserved.load_fit(bad)
    doc = json.loads(reserved.DEFAULT_FIT_PATH.read_text())
    del doc["alloc_confs"]["default"]["terms"]["inference"]
    with pytest.raises(EstimateInputError, match="needs terms for exactly"):
        reserved.parse_fit(doc, bad)
    # v came later: a file without it reads as v = 0; a v that is not a number is refused.
    doc = json.loads(reserved.DEFAULT_FIT_PATH.read_text())
    for t in doc["alloc_confs"]["default"]["terms"].values():
        t.pop("v")
    assert all(t.v == 0 for t in reserved.parse_fit(doc, bad).terms["default"].values())
    doc["alloc_confs"]["default"]["terms"]["training"]["v"] = "2"
    with pytest.raises(EstimateInputError, match="v must be numbers"):
        reserved.parse_fit(doc, bad)


def test_estimators_apply_the_fitted_terms(monkeypatch: pytest.MonkeyPatch, models: dict[str, Path]) -> None:
    from fakegpu.estimate import inference, training
    from fakegpu.estimate.inference import InferenceOptions
    from fakegpu.estimate.llm import estimate_llm
    from fakegpu.estimate.training import TrainingOptions, plan_training

    model = models["qwen3-8b"]
    shipped = reserved.load_fit()
    inf_opts = InferenceOptions(batch_size=2, prompt_tokens=512, generated_tokens=16)
    base = estimate_llm(model, inf_opts)
    tr_opts = TrainingOptions(method="full", micro_batch=2, seq_len=512)
    tr_base = plan_training(model, tr_opts)
    assert base["runtime"]["reserved_fit"]["terms"]["inference"] == vars(shipped.for_kind("inference"))

    # Doubling a doubles what is held above the weights in every non-load phase, to the 2 MiB segment.
    doubled = {alloc: {k: replace(t, a=2 * t.a) for k, t in kinds.items()} for alloc, kinds in shipped.terms.items()}
    monkeypatch.setattr(inference, "load_fit", lambda: replace(shipped, terms=doubled))
    monkeypatch.setattr(training, "load_fit", lambda: replace(shipped, terms=doubled))
    after = estimate_llm(model, inf_opts)
    for phase, p in base["phases"].items():
        q = after["phases"][phase]
        assert q["max_memory_allocated"] == p["max_memory_allocated"]
        transient = p["max_memory_allocated"] - p["components"]["weights"]
        if phase == "load":
            assert q["max_memory_reserved"] == p["max_memory_reserved"]
        else:
            t = shipped.for_kind("inference")
            assert q["max_memory_reserved"] - p["max_memory_reserved"] == pytest.approx(t.a * transient,
                                                                                        abs=2 * SEGMENT)
    tr_after = plan_training(model, tr_opts)
    assert tr_after["peak"]["max_memory_reserved"] > tr_base["peak"]["max_memory_reserved"]
    assert tr_after["peak"]["max_memory_allocated"] == tr_base["peak"]["max_memory_allocated"]


def test_varying_batch_lengths_reserve_more_not_allocate_more(models: dict[str, Path]) -> None:
    from fakegpu.estimate.training import TrainingOptions, plan_training

    shipped = reserved.load_fit()
    # Measured in native mode: batches of varying length leave more cached than the same step at one length, in
    # proportion to the loss's buffers; the rest of the step is held as at a fixed length.
    fixed_t, varying_t = shipped.for_kind("training"), shipped.for_kind("training_varying")
    assert varying_t.v > 0 == fixed_t.v and (varying_t.a, varying_t.c) == (fixed_t.a, fixed_t.c)
    model = models["qwen3-8b"]
    fixed = plan_training(model, TrainingOptions(method="lora", micro_batch=2, seq_len=512))
    varying = plan_training(model, TrainingOptions(method="lora", micro_batch=2, seq_len=512, varying_lengths=True))
    assert varying["peak"]["max_memory_allocated"] == fixed["peak"]["max_memory_allocated"]
    assert varying["peak"]["max_memory_reserved"] > fixed["peak"]["max_memory_reserved"]
    assert varying["runtime"]["reserved_fit"]["kind"] == "training_varying"
    assert fixed["runtime"]["reserved_fit"]["kind"] == "training"
    assert "vary step to step" in varying["assumptions"]["recipe"]["batch_lengths"]
    with pytest.raises(EstimateInputError, match="use --packed or --varying-lengths"):
        TrainingOptions(packed=True, varying_lengths=True).validate()
