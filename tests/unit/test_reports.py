"""fakegpu/reports: every schema in one folder, each a valid JSON Schema that pins its own id, one validate()."""

from __future__ import annotations

import jsonschema
import pytest

from fakegpu import reports


def test_every_schema_is_a_valid_json_schema():
    assert reports.names() == ["analyze-kernel", "analyze-repo", "bandwidth", "calibrate-compare", "capabilities",
                               "cli", "cluster-report", "estimate-llm", "estimate-roofline", "fakecuda-activity",
                               "fakecuda-process", "native-process", "nvml-process", "plan-serving", "plan-training",
                               "preflight", "replay-trace", "simulate-topology", "validate", "workspace-profile"]
    for name in reports.names():
        spec = reports.schema(name)
        jsonschema.validators.validator_for(spec).check_schema(spec)


def test_every_schema_pins_its_own_id():
    for name in reports.names():
        spec = reports.schema(name)
        assert spec["$id"] == f"{reports.BASE_URI}{name}.schema.json"
        assert spec["properties"]["schema"] == {"const": reports.schema_id(name)}
        assert "schema" in spec["required"]


def test_the_id_names_the_report():
    assert reports.schema_id("preflight") == "fakegpu.preflight/v1"
    assert reports.name_of({"schema": "fakegpu.cluster-report/v2"}) == "cluster-report"
    assert reports.name_of({"schema": "fakegpu-native-report/1"}) is None
    assert reports.name_of({"report": "preflight"}) is None and reports.name_of([]) is None


def test_validate_uses_the_named_schema_or_the_documents_own():
    with pytest.raises(jsonschema.ValidationError):
        reports.validate({"schema": "fakegpu.preflight/v1"})  # the id alone is not a report
    with pytest.raises(jsonschema.ValidationError):
        reports.validate({"schema": "fakegpu.preflight/v1"}, "nvml-process")
    with pytest.raises(KeyError, match="not a FakeGPU report"):
        reports.validate({"report": "preflight"})
    with pytest.raises(KeyError, match="known: analyze-kernel, analyze-repo, bandwidth"):
        reports.schema("no-such-report")


def test_schemas_refer_to_each_other_by_file():
    process = {"schema": "fakegpu.fakecuda-process/v1", "mode": "fakecuda", "pid": 1, "name": "python",
               "devices_spec": "a100:1", "torch_version": "2.15.0", "uncaught_exception": None, "devices": [],
               "oom": {"occurred": False, "device": None, "requested_bytes": None, "message": None}}
    reports.validate(process)
    with pytest.raises(jsonschema.ValidationError, match="'report' was unexpected"):
        reports.validate({**process, "report": "fakecuda-process"})
