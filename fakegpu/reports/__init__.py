"""The one home of FakeGPU's reports: the envelope of every --json output, every JSON Schema
(reports/schemas/<name>.schema.json) and one validate().

Every report names itself in one key, `"schema": "fakegpu.<name>/v<N>"`, where <name> is its schema file's name:
`bandwidth` (a `fakegpu bandwidth` sweep), `preflight`,
`fakecuda-process` and `fakecuda-activity` (what each torch process writes at exit), `cluster-report`,
`estimate-llm`, `plan-training`, `calibrate-compare`, `estimate-roofline`, `simulate-topology`, `replay-trace` (a
profiler trace's replay), `analyze-repo` (what in a repository needs a GPU), `analyze-kernel` (what CUDA
kernels need, and whether they run on a board), `capabilities` (what native mode's libraries and fakecuda
implement), `native-process` and `nvml-process` (what native mode's C libraries write per process), `validate` (a
`fakegpu validate` run), `workspace-profile`
(the context and workspace figures for one software stack, alone from `workspace-profiles show` and inside the
estimates), and `cli`, the envelope around every --json output. Later reports add their schema here. Validation
needs jsonschema and referencing, imported only when asked, so writers stay light.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from fakegpu.errors import EXIT_OK

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
# Schemas name each other by file: {"$ref": "fakecuda-process.schema.json"} resolves against this base.
BASE_URI = "https://fakegpu.dev/schemas/"

# Every command's --json output (stable; pinned by tests):
#     {"schema": "fakegpu.cli/v1", "command": "devices", "status": "ok"|"error", "exit_code": 0,
#      "data": ..., "errors": [{"code": "...", "message": "..."}]}
_ID = re.compile(r"^fakegpu\.(?P<name>[a-z][a-z0-9-]*)/v(?P<version>[1-9][0-9]*)$")


def schema_id(name: str, version: int = 1) -> str:
    """The value of a report's "schema" key: schema_id("preflight") == "fakegpu.preflight/v1"."""
    return f"fakegpu.{name}/v{version}"


ENVELOPE_SCHEMA = schema_id("cli")


def name_of(doc: Any) -> str | None:
    """The report name `doc` declares in its "schema" key, or None when it declares none."""
    found = _ID.match(doc.get("schema", "")) if isinstance(doc, dict) and isinstance(doc.get("schema"), str) else None
    return found["name"] if found else None


def is_report(doc: Any, name: str) -> bool:
    return name_of(doc) == name


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


@cache
def _registry():
    from referencing import Registry, Resource

    return Registry().with_resources(
        (BASE_URI + f"{n}.schema.json", Resource.from_contents(schema(n))) for n in names())


def validate(doc: Any, name: str | None = None) -> None:
    """Raise jsonschema.ValidationError when `doc` breaks report `name`'s schema (by default the one its own
    "schema" key names); KeyError when there is no such schema."""
    import jsonschema

    if name is None:
        name = name_of(doc)
        if name is None:
            raise KeyError(f"not a FakeGPU report: no \"schema\": \"fakegpu.<name>/v<N>\" key; known: "
                           f"{', '.join(names())}")
    spec = schema(name)
    jsonschema.validators.validator_for(spec)(spec, registry=_registry()).validate(doc)
