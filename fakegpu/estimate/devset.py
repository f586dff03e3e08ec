"""Run the estimator over the dev set of published measurements and score it.

Each row names a config.json; its checkpoint is synthesized header-only with that architecture's exact tensor
shapes, so the dev set needs no download and its parameter counts are the real models'. Rows whose phase is
"training" go through plan-training with the options in their workload; they are scored apart from inference rows.
Rows whose phase is "serving" go through plan-serving on their GPU profile and check vLLM's start-up figures: the
available KV-cache bytes and the number of GPU blocks, each scored as its own metric.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.inference import InferenceOptions
from fakegpu.estimate.llm import estimate_llm
from fakegpu.estimate.model_config import parse_model_config
from fakegpu.estimate.serving import ServingOptions, plan_serving
from fakegpu.estimate.synthetic import synthesize
from fakegpu.estimate.training import TrainingOptions, peak_for

# Which predicted number a row's observation is compared with.
METRICS = {
    ("load", "memory_allocated"): lambda r: r["phases"]["load"]["max_memory_allocated"],
    ("inference", "max_memory_allocated"): lambda r: r["peak"]["max_memory_allocated"],
    ("inference", "max_memory_reserved"): lambda r: r["peak"]["max_memory_reserved"],
    ("inference", "nvidia-smi"): lambda r: r["peak"]["nvidia_smi_used"],
}
TRAINING_METRICS = {"max_memory_allocated": "max_memory_allocated", "max_memory_reserved": "max_memory_reserved",
                    "nvidia-smi": "nvidia_smi_used"}


@dataclass(frozen=True)
class RowResult:
    id: str
    metric: str
    observed: int
    predicted: int
    kind: str = "inference"  # or "training", "serving"
    category: str = ""  # the row's "category" (e.g. "megatron"), else its kind

    @property
    def group(self) -> str:
        return self.category or self.kind

    @property
    def error(self) -> float:
        """Signed relative error; negative is an underestimate."""
        return (self.predicted - self.observed) / self.observed


def load_devset(path: Path) -> list[dict]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise EstimateInputError(path, f"not a readable dev set: {exc}") from exc
    return doc["rows"]


def _model_dir(row: dict, base: Path, scratch: Path) -> Path:
    config_path = base / row["config"]
    config_doc = json.loads(config_path.read_text(encoding="utf-8"))
    cfg = parse_model_config(config_doc, config_path)
    model_dir = scratch / f"{config_path.stem}-{row['checkpoint_dtype']}"
    if not (model_dir / "config.json").exists():
        synthesize(model_dir, config_doc, cfg, row["checkpoint_dtype"])
    return model_dir


def run_serving_row(row: dict, base: Path, scratch: Path) -> list[RowResult]:
    """vLLM's printed start-up figures against plan-serving: KV-cache bytes and GPU blocks, where published."""
    try:
        options = ServingOptions(**row["workload"])
    except TypeError as exc:
        raise EstimateInputError(row["id"], f"workload has an unknown serving option: {exc}") from exc
    report = plan_serving(_model_dir(row, base, scratch), options, target=row["profile"])
    out = []
    if row.get("observed_bytes") is not None:
        out.append(RowResult(row["id"], "kv_cache_bytes", row["observed_bytes"],
                             report["budget"]["available_kv_cache_bytes"], "serving"))
    if row.get("observed_blocks") is not None:
        out.append(RowResult(row["id"], "gpu_blocks", row["observed_blocks"], report["kv_cache"]["num_gpu_blocks"],
                             "serving"))
    if not out:
        raise EstimateInputError(row["id"], "a serving row needs observed_bytes or observed_blocks")
    return out


def run_row(row: dict, base: Path, scratch: Path) -> RowResult:
    model_dir = _model_dir(row, base, scratch)
    w = row["workload"]
    major, minor = (int(x) for x in row["compute_capability"].split("."))
    if row["phase"] == "training":
        if row["metric"] not in TRAINING_METRICS:
            raise EstimateInputError(row["id"], f"no predicted training number for metric {row['metric']!r}")
        try:
            options = TrainingOptions(**w)
        except TypeError as exc:
            raise EstimateInputError(row["id"], f"workload has an unknown training option: {exc}") from exc
        peak = peak_for(model_dir, options, (major, minor))
        return RowResult(row["id"], row["metric"], row["observed_bytes"], peak[TRAINING_METRICS[row["metric"]]],
                         "training", row.get("category", ""))
    opts = InferenceOptions(
        batch_size=w["batch_size"], prompt_tokens=w["prompt_tokens"], generated_tokens=w["generated_tokens"],
        attention=w.get("attention", "sdpa"), logits=w.get("logits", "last"),
    )
    report = estimate_llm(model_dir, opts, dtype=w.get("dtype"), compute_capability=(major, minor))
    key = (row["phase"], row["metric"])
    if key not in METRICS:
        raise EstimateInputError(row["id"], f"no predicted number for phase/metric {key}")
    return RowResult(row["id"], row["metric"], row["observed_bytes"], METRICS[key](report),
                     category=row.get("category", ""))


def run_devset(path: Path) -> list[RowResult]:
    results: list[RowResult] = []
    with tempfile.TemporaryDirectory(prefix="fakegpu-devset-") as tmp:
        for row in load_devset(path):
            if row["phase"] == "serving":
                results += run_serving_row(row, path.parent, Path(tmp))
            else:
                results.append(run_row(row, path.parent, Path(tmp)))
    return results


def of_kind(results: list[RowResult], kind: str) -> list[RowResult]:
    return [r for r in results if r.kind == kind]


def by_category(results: list[RowResult]) -> dict[str, dict]:
    """Scores per category: a row's "category" (the setup it exercises, e.g. megatron), else its kind."""
    groups = sorted({r.group for r in results})
    return {g: score([r for r in results if r.group == g]) for g in groups}


def by_metric(results: list[RowResult]) -> dict[str, dict]:
    """Scores per measured quantity: allocated, reserved and nvidia-smi predictions are validated separately."""
    metrics = sorted({r.metric for r in results})
    return {m: score([r for r in results if r.metric == m]) for m in metrics}


def score(results: list[RowResult]) -> dict:
    errors = [r.error for r in results]
    return {
        "rows": len(results),
        "median_abs_error": statistics.median(abs(e) for e in errors),
        "worst_abs_error": max(abs(e) for e in errors),
        "worst_underestimate": min(0.0, min(errors)),
    }
