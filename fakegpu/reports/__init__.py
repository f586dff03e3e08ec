"""The one home of FakeGPU's reports: the envelope of every --json output, every JSON Schema
(reports/schemas/<name>.schema.json) and one validate().

A report is named by its schema file: `preflight`, `cluster-report`, `estimate-llm`, `plan-training`,
`calibrate-compare`, `native-process` (what native mode's libraries write per process). Later reports add their
schema here. Validation needs jsonschema, imported only when asked, so writers stay light.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from fakegpu.errors import EXIT_OK

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"

# Every command's --json output (stable; pinned by tests):
#     {"schema": "fakegpu.cli/v1", "command": "devices", "status": "ok"|"error", "exit_code": 0,
#      "data": ..., "errors": [{"code": "...", "message": "..."}]}
ENVELOPE_SCHEMA = "fakegpu.cli/v1"


def envelope(command: str, data: Any, exit_code: int = EXIT_OK,
             errors: Sequence[dict[str, str]] = ()) -> dict[str, Any]:
    return {
        "schema": ENVELOPE_SCHEMA,
        "command": command,
        "status": "ok" if exit_code == EXIT_OK else "error",
        "exit_code": exit_code,
        "data": data,
        "errors": list(errors),
    }


def names() -> list[str]:
    """Every report that has a schema."""
    return sorted(p.name.removesuffix(".schema.json") for p in SCHEMA_DIR.glob("*.schema.json"))


@cache
def schema(name: str) -> dict[str, Any]:
    path = SCHEMA_DIR / f"{name}.schema.json"
    if not path.exists():
        raise KeyError(f"no report schema {name!r}; known: {', '.join(names())}")
    return json.loads(path.read_text(encoding="utf-8"))


def validate(doc: Any, name: str) -> None:
    """Raise jsonschema.ValidationError when `doc` breaks report `name`'s schema."""
    import jsonschema

    spec = schema(name)
    jsonschema.validators.validator_for(spec)(spec).validate(doc)  # the dialect the schema declares
