"""Helpers for the roofline tests: the CLI through typer's runner, its JSON checked against the shipped schemas."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from fakegpu.cli.main import app
from fakegpu.reports import validate

REPO = Path(__file__).resolve().parents[2]
LLAMA_7B = REPO / "tests" / "data" / "devset" / "configs" / "llama-2-7b.json"
runner = CliRunner()


def roofline(*args: str):
    return runner.invoke(app, ["estimate-roofline", *args])


def roofline_json(*args: str) -> dict:
    """The report of a successful --json run, validated (envelope and report)."""
    result = roofline(*args, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    validate(doc)
    validate(doc["data"])
    return doc["data"]


def roofline_error(*args: str) -> tuple[int, str]:
    """Exit code and message of a failing --json run."""
    result = roofline(*args, "--json")
    doc = json.loads(result.stdout)
    validate(doc)
    assert doc["status"] == "error" and doc["data"] is None
    return result.exit_code, doc["errors"][0]["message"]
