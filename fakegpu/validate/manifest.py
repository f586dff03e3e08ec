"""A `fakegpu validate` manifest: read it (YAML, JSON, or TOML on Python 3.11+), check it against
manifest.schema.json and the rules a schema cannot say (device specs parse, durations, exclude keys are axes),
and name every problem by file, line and key path, with the closest accepted key for a misspelt one.

Line numbers come from PyYAML's node tree, which also reads JSON (JSON is YAML's flow style); TOML has no
parser here that keeps positions, so its lines are found by searching the text for the key.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from fakegpu.errors import EXIT_USAGE, FakeGPUError, InvalidDeviceSpec, ProblemList, clip, shorten
from fakegpu.profiles import documents
from fakegpu.profiles.documents import KeyPath
from fakegpu.profiles.documents import key_path as key_path  # matrix.py names keys with it
from fakegpu.profiles.matching import closest, did_you_mean
from fakegpu.user_files import TOO_DEEP

SCHEMA_PATH = Path(__file__).resolve().parent / "manifest.schema.json"
SUFFIXES = (".yaml", ".yml", ".json", ".toml")
# Problems shown at most: a manifest broken everywhere still gives a readable message.
DEFAULT_TIMEOUT_S = 600.0
# fakegpu run's two, and a container of an image started with --runtime=fakegpu (container.py)
MODES = ("fakecuda", "native", "container")


class ManifestError(ProblemList, FakeGPUError):
    """A manifest that cannot be read or breaks the schema; one line per problem, each starting file:line."""

    exit_code = EXIT_USAGE
    code = "invalid-manifest"



@dataclass(frozen=True)
class Settings:
    """What `defaults` sets and a case may override."""

    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    mode: str | None = None
    image: str | None = None  # mode container


@dataclass(frozen=True)
class CaseSpec:
    name: str
    command: str | list[str]
    settings: Settings
    expect: dict[str, Any]
    index: int
    requires: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Manifest:
    path: Path
    defaults: Settings
    axes: dict[str, list[Any]]
    include: list[dict[str, Any]]
    exclude: list[dict[str, Any]]
    cases: list[CaseSpec]
    lines: dict[KeyPath, int] = field(default_factory=dict, repr=False)

    @property
    def folder(self) -> Path:
        """What relative paths in the manifest (cwd) are relative to."""
        return self.path.resolve().parent

    def where(self, path: KeyPath) -> str:
        """file:line of a key (the nearest enclosing key that has a line), for messages."""
        return documents.where(self.path, self.lines, path)


@cache
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def load(path: str | Path) -> Manifest:
    """Read and check the manifest at `path`; ManifestError naming each problem."""
    path = Path(path)
    doc, lines = _read(path)
    for check in (_schema_problems, _rule_problems):  # the rules assume a document the schema accepts
        found = check(doc)
        if found:
            raise ManifestError(documents.located(path, lines, found))
    return _build(path, doc, lines)


def _read(path: Path) -> tuple[Any, dict[KeyPath, int]]:
    try:
        text = documents.read_text(path, "manifest", SUFFIXES)
        if path.suffix.lower() == ".toml":
            return _read_toml(path, text)
        return documents.parse(path, text, truncation_hint=False)
    except documents.DocumentProblems as exc:
        raise ManifestError(exc.problems) from None


def _read_toml(path: Path, text: str) -> tuple[Any, dict[KeyPath, int]]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        raise ManifestError([f"{path}: TOML manifests need Python 3.11 or later; use YAML or JSON"]) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"line (\d+)", str(exc))
        raise ManifestError([f"{path}:{found[1] if found else 0}: not valid TOML: {exc}"]) from None
    except RecursionError:
        raise ManifestError([f"{path}: {TOO_DEEP}"]) from None
    lines: dict[KeyPath, int] = {}
    source = text.splitlines()

    def find(pattern: re.Pattern[str], start: int) -> int | None:
        # From where the enclosing table began, else anywhere: TOML lets keys and tables come in any order.
        for first in (start, 1):
            found = next((n for n, s in enumerate(source[first - 1:], first) if pattern.search(s)), None)
            if found is not None:
                return found
        return None

    def walk(value: Any, path: KeyPath, start: int) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                pattern = re.compile(rf"^\s*(\[+\s*)?([\w.\"' -]*\.)?[\"']?{re.escape(key)}[\"']?\s*(=|\])")
                line = find(pattern, start)
                if line is not None:
                    lines[(*path, key)] = line
                walk(item, (*path, key), line or start)
        elif isinstance(value, list):
            # An array of tables: item i starts at the i-th [[name]] header.
            header = re.compile(rf"^\s*\[\[\s*([\w.\"' -]*\.)?{re.escape(str(path[-1]))}\s*\]\]") if path else None
            at = start
            for i, item in enumerate(value):
                if header is not None and isinstance(item, dict):
                    at = find(header, at + (i > 0)) or at
                    lines[(*path, i)] = at
                walk(item, (*path, i), at)

    walk(doc, (), 1)
    return doc, lines


# ---------------------------------------------------------------- the schema, in a person's words


def _schema_problems(doc: Any) -> list[tuple[KeyPath, str]]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    # A misspelt required key is one mistake, not two: "unknown 'comand', did you mean 'command'" says it all,
    # so the "missing 'command'" of the same mapping is not repeated.
    meant = {(tuple(e.absolute_path), near) for e in errors if e.validator == "additionalProperties"
             for k in e.instance if k not in e.schema.get("properties", {})
             for near in closest(str(k), list(e.schema.get("properties", {})), limit=1)}
    out: list[tuple[KeyPath, str]] = []
    for error in errors:
        if error.validator == "required" and all(
                (tuple(error.absolute_path), k) in meant for k in error.validator_value if k not in error.instance):
            continue
        # "one of these keys at least" (an operator, a bound), given misspelt: the misspelling says it all, too
        if error.validator == "anyOf" and any((tuple(error.absolute_path), k) in meant
                                              for option in error.validator_value for k in option.get("required", [])):
            continue
        out.extend(_describe(error))
    return out


def _describe(error: Any) -> list[tuple[KeyPath, str]]:
    path: KeyPath = tuple(error.absolute_path)
    kind, value, sub = error.validator, error.instance, error.schema
    if kind == "additionalProperties" and isinstance(value, dict):
        known = sorted(sub.get("properties", {}))
        extra = [k for k in value if k not in known]
        return [((*path, k), documents.unknown_key(k, known)) for k in extra]
    if kind == "required":
        missing = [k for k in error.validator_value if k not in value]
        return [(path, f"missing required key {k!r}") for k in missing]
    if kind == "enum":
        return [(path, f"{_shown(value)} is not accepted; expected one of: {', '.join(map(str, sub['enum']))}")]
    if kind == "const":
        return [(path, f"{_shown(value)} is not accepted; expected {sub['const']!r}")]
    if kind == "type":
        return [(path, f"{_shown(value)} is a {documents.type_name(value)}; expected {documents.types(sub['type'])}")]
    if kind == "anyOf":  # "one of these keys at least": a JSON check's operators, memory's bounds
        keys = [k for option in error.validator_value for k in option.get("required", [])]
        return [(path, f"no {sub.get('title', 'key')} given; expected one of {', '.join(keys)}")]
    if kind == "oneOf":
        described = sub.get("description") or _alternatives(sub[kind])
        return [(path, f"{_shown(value)} is not accepted; expected {described}")]
    if kind == "pattern":
        expected = sub.get("description") or f"a text matching {sub['pattern']}"
        if "propertyNames" in error.relative_schema_path:  # the key itself is wrong: point at it
            return [((*path, value), f"key {_shown(value)} is not accepted; expected {expected}")]
        return [(path, f"{_shown(value)} is not accepted; expected {expected}")]
    if kind in ("minItems", "minLength", "minProperties"):
        return [(path, "must not be empty")]
    return [(path, clip(error.message))]


def _shown(value: Any) -> str:
    return shorten(value) if isinstance(value, str) else shorten(json.dumps(value))


def _alternatives(options: list[dict[str, Any]]) -> str:
    return " or ".join(documents.types(o["type"]) if "type" in o else "a valid value" for o in options)


# ---------------------------------------------------------------- what the schema cannot say


def _rule_problems(doc: dict[str, Any]) -> list[tuple[KeyPath, str]]:
    from fakegpu.devices import parse_spec

    out: list[tuple[KeyPath, str]] = []
    matrix = doc["matrix"]
    axes = [k for k in matrix if k not in ("include", "exclude")]
    specs: list[tuple[KeyPath, Any]] = [(("matrix", "profile", i), v) for i, v in enumerate(matrix["profile"])]
    for list_name in ("include", "exclude"):
        for i, combo in enumerate(matrix.get(list_name, [])):
            if "profile" in combo:
                specs.append((("matrix", list_name, i, "profile"), combo["profile"]))
            if list_name == "exclude":
                out.extend((("matrix", "exclude", i, k),
                            f"not an axis of the matrix{did_you_mean(k, axes, paren=False)} (axes: {', '.join(axes)})")
                           for k in combo if k not in axes)
            if "mode" in combo and combo["mode"] not in MODES:
                out.append((("matrix", list_name, i, "mode"), f"{_shown(combo['mode'])} is not accepted; expected "
                            f"one of: {', '.join(MODES)}"))
    for where, spec in specs:
        try:
            parse_spec(str(spec))
        except InvalidDeviceSpec as exc:
            out.append((where, exc.message))
    for where, settings in [(("defaults",), doc.get("defaults", {}))] + [
            (("cases", i), c) for i, c in enumerate(doc["cases"])]:
        if "timeout" in settings:
            try:
                _seconds(settings["timeout"])
            except ValueError as exc:
                out.append(((*where, "timeout"), str(exc)))
    seen: dict[str, int] = {}
    for i, case in enumerate(doc["cases"]):
        name = case["name"]
        if name in seen:
            out.append((("cases", i, "name"), f"case {name!r} is named twice (also cases[{seen[name]}])"))
        seen.setdefault(name, i)
    return out


def _seconds(value: float | str) -> float:
    from fakegpu.launcher import LaunchUsageError, parse_timeout

    try:
        return parse_timeout(str(value))
    except LaunchUsageError as exc:
        raise ValueError(exc.message.removeprefix("--timeout ")) from None


def _settings(raw: dict[str, Any]) -> Settings:
    return Settings(
        cwd=raw.get("cwd"),
        env={k: _env_text(v) for k, v in raw.get("env", {}).items()},
        timeout_s=_seconds(raw["timeout"]) if "timeout" in raw else None,
        mode=raw.get("mode"),
        image=raw.get("image"),
    )


def _env_text(value: Any) -> str:
    if isinstance(value, bool):  # YAML's true is the environment's "1", as in docker compose's env files
        return "1" if value else "0"
    return str(value)


def _build(path: Path, doc: dict[str, Any], lines: dict[KeyPath, int]) -> Manifest:
    matrix = doc["matrix"]
    cases = [CaseSpec(name=c["name"], command=c["command"] if isinstance(c["command"], str) else
                      [str(a) for a in c["command"]], settings=_settings(c), expect=c.get("expect", {}), index=i,
                      requires=c.get("requires", {}))
             for i, c in enumerate(doc["cases"])]
    return Manifest(
        path=path,
        defaults=_settings(doc.get("defaults", {})),
        axes={k: list(v) for k, v in matrix.items() if k not in ("include", "exclude")},
        include=[dict(c) for c in matrix.get("include", [])],
        exclude=[dict(c) for c in matrix.get("exclude", [])],
        cases=cases,
        lines=dict(lines),
    )
