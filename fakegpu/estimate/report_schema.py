"""The JSON Schema of each estimator report (fakegpu/estimate/schemas/), and validation against it."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import jsonschema

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
SCHEMAS = {
    "fakegpu.estimate-llm/v1": "estimate-llm.schema.json",
    "fakegpu.plan-training/v1": "plan-training.schema.json",
    "fakegpu.calibrate-compare/v1": "calibrate-compare.schema.json",
}


@cache
def load_schema(report: str) -> dict:
    return json.loads((SCHEMA_DIR / SCHEMAS[report]).read_text(encoding="utf-8"))


def validate(doc: dict) -> None:
    """Raise jsonschema.ValidationError when `doc` breaks the schema its `report` field names."""
    jsonschema.validate(doc, load_schema(doc["report"]))
