"""Validation of the estimator reports against their schemas (fakegpu/reports), by the report's own id."""

from __future__ import annotations

from fakegpu import reports

SCHEMAS = {
    "fakegpu.estimate-llm/v1": "estimate-llm",
    "fakegpu.plan-training/v1": "plan-training",
    "fakegpu.calibrate-compare/v1": "calibrate-compare",
}


def load_schema(report: str) -> dict:
    return reports.schema(SCHEMAS[report])


def validate(doc: dict) -> None:
    """Raise jsonschema.ValidationError when `doc` breaks the schema its `report` field names."""
    reports.validate(doc, SCHEMAS[doc["report"]])
