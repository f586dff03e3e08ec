"""A user's YAML or JSON file read with the line of every key, and its problems said the one way FakeGPU says them:
`file:line: key.path: message`, with the closest accepted name for a misspelt key or value.

`fakegpu validate` manifests (fakegpu/validate/manifest.py), estimate-roofline op lists (fakegpu/perf/oplist.py) and
workspace profiles (fakegpu/profiles/workspace_profiles.py) read their files through here; each keeps its own
error class and whatever wording is its own. Line numbers come from PyYAML's node tree, which reads JSON too (JSON
is YAML's flow style).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fakegpu.errors import clip, shorten
from fakegpu.profiles.matching import closest, did_you_mean
from fakegpu.user_files import CONFIG_BYTES, TOO_DEEP, UnreadableFile, loads_json
from fakegpu.user_files import read_text as read_text_bounded

KeyPath = tuple[str | int, ...]
Lines = dict[KeyPath, int]


class DocumentProblems(Exception):
    """Problems with a file, one line each (`file:line: ...`); callers re-raise them as their own error."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


def key_path(path: KeyPath) -> str:
    """cases[0].expect.exit_code, as a person names a key."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def where(file: Path, lines: Lines, path: KeyPath) -> str:
    """file:line of a key (the nearest enclosing key that has a line)."""
    for end in range(len(path), -1, -1):
        if path[:end] in lines:
            return f"{file}:{lines[path[:end]]}"
    return str(file)


def located(file: Path, lines: Lines, found: Sequence[tuple[KeyPath, str]]) -> list[str]:
    """file:line: key.path: problem, in the order of the file."""
    def line_of(p: KeyPath) -> int:
        return next((lines[p[:n]] for n in range(len(p), -1, -1) if p[:n] in lines), 0)

    return [f"{where(file, lines, p)}: {key_path(p)}: {m}" for p, m in sorted(found, key=lambda f: line_of(f[0]))]


def read_text(path: Path, noun: str, suffixes: Sequence[str]) -> str:
    """The file's text; DocumentProblems when its suffix is not one of `suffixes` or it cannot be read. `noun`
    names the kind of file in messages ("manifest", "op list")."""
    article = "an" if noun[:1].lower() in "aeiou" else "a"
    if path.suffix.lower() not in suffixes:
        raise DocumentProblems([f"{path}: {article} {noun} is {', '.join(suffixes)}; this one is "
                                f"{path.suffix or 'none'}"])
    try:
        return read_text_bounded(path, CONFIG_BYTES)
    except UnreadableFile as exc:
        if isinstance(exc.__cause__, FileNotFoundError):
            raise DocumentProblems([f"{path}: no such {noun}"]) from None
        raise DocumentProblems([f"{path}: cannot read it: {exc}"]) from None


def parse(path: Path, text: str, *, truncation_hint: bool = True) -> tuple[Any, Lines]:
    """The document (JSON by a .json suffix, else YAML) and the line of every key in it. `truncation_hint`: say
    when JSON broke because the file ends early."""
    try:
        import yaml
    except ImportError:  # an interpreter of the user's (fakecuda): JSON still reads, without key lines
        if path.suffix.lower() != ".json":
            raise DocumentProblems([f"{path}: reading YAML needs PyYAML, which this Python lacks; give the file "
                                    f"as JSON"]) from None
        try:
            return loads_json(text), {}
        except json.JSONDecodeError as exc:
            raise DocumentProblems([f"{path}:{exc.lineno}: not valid JSON: {exc.msg}"]) from None
    try:
        doc = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        lines: Lines = {}
        if node is not None:
            node_lines(node, (), lines)
    except RecursionError:
        raise DocumentProblems([f"{path}: {TOO_DEEP}"]) from None
    except json.JSONDecodeError as exc:
        ended = " (the file ends early: is it truncated?)" if truncation_hint and exc.pos >= len(text.rstrip()) else ""
        raise DocumentProblems([f"{path}:{exc.lineno}: not valid JSON: {exc.msg}{ended}"]) from None
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 0
        raise DocumentProblems([f"{path}:{line}: not valid YAML: {exc.problem or exc}"]) from None
    except yaml.YAMLError as exc:
        raise DocumentProblems([f"{path}: not valid YAML: {exc}"]) from None
    return doc, lines


def node_lines(node: Any, path: KeyPath, lines: Lines) -> None:
    """Record the line of `node` and of every key below it (1-based)."""
    import yaml

    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                lines[(*path, key.value)] = key.start_mark.line + 1
                node_lines(value, (*path, key.value), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            node_lines(item, (*path, i), lines)


# ---------------------------------------------------------------- schema errors in a person's words


def describe(error: Any, base: KeyPath = ()) -> list[tuple[KeyPath, str]]:
    """One jsonschema error as (key path, message) pairs: an unknown key names the closest accepted one, a missing
    required key is not reported when a misspelling of it already was."""
    path: KeyPath = (*base, *error.absolute_path)
    kind, value, sub = error.validator, error.instance, error.schema
    if kind == "additionalProperties" and isinstance(value, dict):
        known = list(sub.get("properties", {}))
        return [((*path, k), unknown_key(str(k), known)) for k in value if k not in known]
    if kind == "required":
        known = list(sub.get("properties", {}))
        meant = {near for k in value if k not in known for near in closest(str(k), known, limit=1)}
        return [(path, f"missing required key {k!r}") for k in error.validator_value
                if k not in value and k not in meant]
    if kind == "enum":
        return [(path, not_one_of(value, [str(v) for v in sub["enum"]]))]
    if kind == "type":
        return [(path, f"{shown(value)} is a {type_name(value)}; expected {types(sub['type'])}")]
    if kind == "minimum":
        return [(path, f"{shown(value)} is below the minimum {sub['minimum']}")]
    if kind == "minItems":
        return [(path, "must not be empty")]
    return [(path, clip(error.message))]


def unknown_key(key: str, known: Sequence[str]) -> str:
    hint = did_you_mean(key, known, paren=False)
    return f"unknown key {shorten(str(key))}{hint} (accepted: {', '.join(known)})"


def not_one_of(value: Any, accepted: Sequence[str]) -> str:
    hint = did_you_mean(value, accepted, paren=False) if isinstance(value, str) else ""
    return f"{shown(value)} is not accepted{hint} (expected one of: {', '.join(accepted)})"


def shown(value: Any) -> str:
    """A value as a message quotes it, cut short when long."""
    if isinstance(value, str):
        return shorten(value)
    text = json.dumps(value)
    return text if len(text) <= 80 else shorten(text)


def type_name(value: Any) -> str:
    return {dict: "mapping", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def types(names: str | list[str]) -> str:
    words = {"object": "a mapping", "array": "a list", "string": "a string", "number": "a number",
             "integer": "an integer", "boolean": "true/false"}
    return " or ".join(words.get(n, n) for n in ([names] if isinstance(names, str) else names))
