"""fakegpu/reports: every schema in one folder, each a valid JSON Schema, each reachable by name."""

from __future__ import annotations

import jsonschema
import pytest

from fakegpu import reports


def test_every_schema_is_a_valid_json_schema():
    assert reports.names() == ["calibrate-compare", "cluster-report", "estimate-llm", "native-process",
                               "plan-training", "preflight"]
    for name in reports.names():
        spec = reports.schema(name)
        jsonschema.validators.validator_for(spec).check_schema(spec)


def test_validate_uses_the_named_schema():
    with pytest.raises(jsonschema.ValidationError):
        reports.validate({"report": "preflight"}, "preflight")
    with pytest.raises(KeyError, match="known: calibrate-compare"):
        reports.schema("no-such-report")
