"""`calibrate compare`: how far a prediction was from a measurement of the same workload.

An observation file (fakegpu.observation/v1) lists measured numbers by phase and metric:
    {"schema": "fakegpu.observation/v1", "workload": {"batch_size": 1, ...},
     "measurements": [{"phase": "decode", "metric": "max_memory_allocated", "bytes": 16396630528}]}
"peak" as a phase means the prediction's overall peak.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from fakegpu.estimate.errors import EstimateInputError
from fakegpu.reports import ENVELOPE_SCHEMA, schema_id
from fakegpu.user_files import CONFIG_BYTES, UnreadableFile, loads_json, read_text

SCHEMA = schema_id("calibrate-compare")
OBSERVATION = "fakegpu.observation/v1"
METRICS = ("max_memory_allocated", "max_memory_reserved", "nvidia_smi_used")
PREDICTIONS = (schema_id("estimate-llm"), schema_id("plan-training"))
# Kept on top of the worst underestimate seen, for run-to-run noise of the allocator.
BASE_MARGIN = 0.02


def _read(path: Path) -> dict:
    try:
        doc = loads_json(read_text(path, CONFIG_BYTES))
    except UnreadableFile as exc:
        what = "not JSON" if isinstance(exc.__cause__, UnicodeDecodeError) else "cannot read"
        raise EstimateInputError(path, f"{what}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise EstimateInputError(path, f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise EstimateInputError(path, "is JSON but not an object")
    return doc


def _prediction(path: Path) -> dict:
    doc = _read(path)
    if doc.get("schema") == ENVELOPE_SCHEMA:
        doc = doc.get("data") or {}
    if doc.get("schema") not in PREDICTIONS:
        found = doc.get("schema")
        raise EstimateInputError(path, f"not an estimate-llm or plan-training --json report (schema={found!r})",
                                 field="schema")
    return doc


def _measurements(path: Path, doc: dict) -> list[dict]:
    if doc.get("schema") != OBSERVATION:
        raise EstimateInputError(path, f"expected {OBSERVATION!r}, found {doc.get('schema')!r}", field="schema")
    rows = doc.get("measurements")
    if not isinstance(rows, list) or not rows:
        raise EstimateInputError(path, "needs a non-empty list of {phase, metric, bytes}", field="measurements")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or row.get("metric") not in METRICS:
            raise EstimateInputError(path, f"metric must be one of {', '.join(METRICS)}", field=f"measurements[{i}]")
        if not isinstance(row.get("bytes"), int) or row["bytes"] <= 0 or not isinstance(row.get("phase"), str):
            raise EstimateInputError(path, "needs a phase name and positive integer bytes", field=f"measurements[{i}]")
    return rows


def _check_workload(pred: dict, obs: dict, obs_path: Path) -> None:
    ours = pred.get("workload") or pred.get("options") or {}
    for key, value in (obs.get("workload") or {}).items():
        if key in ours and ours[key] != value:
            raise EstimateInputError(
                obs_path, f"not the workload that was predicted: prediction has {ours[key]!r}, observation {value!r}",
                field=f"workload.{key}",
            )


def compare(prediction_path: Path, observation_path: Path) -> dict:
    pred = _prediction(prediction_path)
    obs = _read(observation_path)
    rows = _measurements(observation_path, obs)
    _check_workload(pred, obs, observation_path)
    out = []
    for row in rows:
        phase = pred["peak"] if row["phase"] == "peak" else pred["phases"].get(row["phase"])
        if phase is None:
            raise EstimateInputError(
                observation_path, f"phase {row['phase']!r} is not in the prediction (has: peak, "
                f"{', '.join(pred['phases'])})", field="measurements",
            )
        predicted = phase[row["metric"]]
        signed = (predicted - row["bytes"]) / row["bytes"]
        out.append({"phase": row["phase"], "metric": row["metric"], "predicted_bytes": predicted,
                    "observed_bytes": row["bytes"], "signed_error": signed, "abs_error": abs(signed)})
    shortfall = max(0.0, *((r["observed_bytes"] - r["predicted_bytes"]) / r["predicted_bytes"] for r in out))
    return {
        "schema": SCHEMA,
        "prediction": str(prediction_path),
        "observation": str(observation_path),
        "rows": out,
        "median_abs_error": statistics.median(r["abs_error"] for r in out),
        "worst_underestimate": min(0.0, *(r["signed_error"] for r in out)),
        "recommended_safety_margin": round(shortfall + BASE_MARGIN, 4),
    }
