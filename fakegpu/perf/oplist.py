"""An op list file (YAML or JSON) for estimate-roofline: read it, check it against ops.schema.json and the rules
a schema cannot say (known dtypes, kernel kinds, attention backends), and name each problem by file, line and
key, with the closest accepted name for a misspelt one.

    ops:
      - {op: gemm, m: 8192, n: 8192, k: 8192, dtype: bf16}
      - {op: attention, batch: 4, heads: 32, q_len: 4096, kv_len: 4096, head_dim: 128, causal: true, dtype: bf16}
      - {op: elementwise, kind: gelu, bytes: 256MiB}

Line numbers come from PyYAML's node tree, which reads JSON too (JSON is YAML's flow style).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from fakegpu.errors import UsageError, clip, shorten
from fakegpu.perf.ops import Attention, Custom, Gemm, MemoryOp, Op, dtype_name
from fakegpu.perf.units import parse_quantity
from fakegpu.profiles.efficiency import load as load_efficiency
from fakegpu.profiles.matching import closest

SCHEMA_PATH = Path(__file__).with_name("ops.schema.json")
SUFFIXES = (".yaml", ".yml", ".json")
SHOWN_PROBLEMS = 10

KeyPath = tuple[str | int, ...]


class OpListError(UsageError):
    """An op list that cannot be read or breaks the schema; one line per problem, each starting file:line."""

    code = "invalid-op-list"

    def __init__(self, problems: Sequence[str]) -> None:
        shown = list(problems[:SHOWN_PROBLEMS])
        if len(problems) > SHOWN_PROBLEMS:
            shown.append(f"... and {len(problems) - SHOWN_PROBLEMS} more")
        super().__init__("\n".join(shown))
        self.problems = list(problems)


@cache
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def load(path: str | Path) -> list[Op]:
    """The ops of the file at `path`; OpListError naming every problem."""
    path = Path(path)
    doc, lines = _read(path)
    if isinstance(doc, list):  # a bare list is the `ops` of a mapping
        doc = {"ops": doc}
        lines = {("ops", *k): v for k, v in lines.items()}
    problems = _schema_problems(doc)
    ops: list[Op] = []
    flawed = {p[1] for p, _ in problems if len(p) > 1 and p[0] == "ops"}
    if isinstance(doc, dict) and isinstance(doc.get("ops"), list):
        for i, item in enumerate(doc["ops"]):
            if i in flawed or ("ops",) in {p for p, _ in problems}:
                continue
            built, found = _build(item, i)
            problems.extend((("ops", i, *p.where), p.message) for p in found)
            if built is not None:
                ops.append(built)
    if problems:
        raise OpListError(_located(path, lines, problems))
    return ops


def key_path(path: KeyPath) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _where(file: Path, lines: dict[KeyPath, int], path: KeyPath) -> str:
    for end in range(len(path), -1, -1):
        if path[:end] in lines:
            return f"{file}:{lines[path[:end]]}"
    return str(file)


def _located(file: Path, lines: dict[KeyPath, int], found: list[tuple[KeyPath, str]]) -> list[str]:
    def line_of(p: KeyPath) -> int:
        return next((lines[p[:n]] for n in range(len(p), -1, -1) if p[:n] in lines), 0)

    return [f"{_where(file, lines, p)}: {key_path(p)}: {m}" for p, m in sorted(found, key=lambda f: line_of(f[0]))]


def _read(path: Path) -> tuple[Any, dict[KeyPath, int]]:
    if path.suffix.lower() not in SUFFIXES:
        raise OpListError([f"{path}: an op list is {', '.join(SUFFIXES)}; this one is {path.suffix or 'none'}"])
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise OpListError([f"{path}: no such op list"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise OpListError([f"{path}: cannot read it: {exc}"]) from None
    import yaml

    try:
        doc = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except json.JSONDecodeError as exc:
        ended = " (the file ends early: is it truncated?)" if exc.pos >= len(text.rstrip()) else ""
        raise OpListError([f"{path}:{exc.lineno}: not valid JSON: {exc.msg}{ended}"]) from None
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 0
        raise OpListError([f"{path}:{line}: not valid YAML: {exc.problem or exc}"]) from None
    except yaml.YAMLError as exc:
        raise OpListError([f"{path}: not valid YAML: {exc}"]) from None
    lines: dict[KeyPath, int] = {}
    if node is not None:
        _node_lines(node, (), lines)
    return doc, lines


def _node_lines(node: Any, path: KeyPath, lines: dict[KeyPath, int]) -> None:
    import yaml

    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                lines[(*path, key.value)] = key.start_mark.line + 1
                _node_lines(value, (*path, key.value), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _node_lines(item, (*path, i), lines)


# ---------------------------------------------------------------- the schema, in a person's words


def _schema_problems(doc: Any) -> list[tuple[KeyPath, str]]:
    import jsonschema

    spec = schema()
    out = [p for e in jsonschema.Draft202012Validator(spec).iter_errors(doc) for p in _describe(e, ())]
    ops = doc.get("ops") if isinstance(doc, dict) else None
    for i, item in enumerate(ops if isinstance(ops, list) else []):
        # each op against its own definition, so an unknown key is named against that op type's keys
        sub = spec["$defs"].get(item.get("op")) if isinstance(item, dict) and isinstance(item.get("op"), str) else None
        if sub is not None:
            for error in jsonschema.Draft202012Validator(sub).iter_errors(item):
                out.extend(_describe(error, ("ops", i)))
    return out


def _describe(error: Any, base: KeyPath) -> list[tuple[KeyPath, str]]:
    path: KeyPath = (*base, *error.absolute_path)
    kind, value, sub = error.validator, error.instance, error.schema
    if kind == "additionalProperties" and isinstance(value, dict):
        known = list(sub.get("properties", {}))
        return [((*path, k), _unknown_key(str(k), known)) for k in value if k not in known]
    if kind == "required":
        # A misspelt required key is one mistake: "unknown 'kk', did you mean 'k'" already says it.
        known = list(sub.get("properties", {}))
        meant = {near for k in value if k not in known for near in closest(str(k), known, limit=1)}
        return [(path, f"missing required key {k!r}") for k in error.validator_value
                if k not in value and k not in meant]
    if kind == "enum":
        return [(path, _not_one_of(value, [str(v) for v in sub["enum"]]))]
    if kind == "type":
        return [(path, f"{_shown(value)} is a {_type_name(value)}; expected {_types(sub['type'])}")]
    if kind == "minimum":
        return [(path, f"{_shown(value)} is below the minimum {sub['minimum']}")]
    if kind == "minItems":
        return [(path, "must not be empty")]
    return [(path, clip(error.message))]


def _unknown_key(key: str, known: Sequence[str]) -> str:
    near = closest(key, list(known), limit=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return f"unknown key {shorten(key)}{hint} (accepted: {', '.join(known)})"


def _not_one_of(value: Any, accepted: Sequence[str]) -> str:
    near = closest(str(value), list(accepted), limit=1) if isinstance(value, str) else []
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return f"{_shown(value)} is not accepted{hint} (expected one of: {', '.join(accepted)})"


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return shorten(value)
    text = json.dumps(value)
    return text if len(text) <= 80 else shorten(text)


def _type_name(value: Any) -> str:
    return {dict: "mapping", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def _types(names: str | list[str]) -> str:
    words = {"object": "a mapping", "array": "a list", "string": "a string", "number": "a number",
             "integer": "an integer", "boolean": "true/false"}
    return " or ".join(words.get(n, n) for n in ([names] if isinstance(names, str) else names))


# ---------------------------------------------------------------- what the schema cannot say


class _Problem(Exception):
    def __init__(self, where: KeyPath, message: str) -> None:
        super().__init__(message)
        self.where, self.message = where, message


class _Checks:
    """The rule checks of one op: each records its problem and returns a stand-in, so one pass names them all."""

    def __init__(self, item: dict[str, Any]) -> None:
        self.item = item
        self.problems: list[_Problem] = []

    def dtype(self, default: str | None = None) -> str:
        if "dtype" not in self.item and default is not None:
            return default
        try:
            return dtype_name(str(self.item["dtype"]), "dtype")
        except UsageError as exc:
            self.problems.append(_Problem(("dtype",), exc.message.removeprefix("dtype: ")))
            return "fp32"

    def amount(self, key: str) -> float:
        try:
            return parse_quantity(self.item[key], key)
        except UsageError as exc:
            self.problems.append(_Problem((key,), exc.message.removeprefix(f"{key}: ")))
            return 0.0

    def choice(self, key: str, accepted: Sequence[str], default: str | None = None) -> str | None:
        if key not in self.item:
            return default
        value = str(self.item[key])
        if value not in accepted:
            self.problems.append(_Problem((key,), _not_one_of(value, accepted)))
        return value


def _build(item: dict[str, Any], index: int) -> tuple[Op | None, list[_Problem]]:
    op = item["op"]
    common = {"name": item.get("name", f"{op}[{index}]"), "count": item.get("count", 1)}
    eff = load_efficiency()
    check = _Checks(item)
    built: Op
    if op in ("gemm", "bmm"):
        built = Gemm(m=item["m"], n=item["n"], k=item["k"], dtype=check.dtype(), batch=item.get("batch", 1),
                     batched=op == "bmm", sparse=bool(item.get("sparse", False)),
                     impl=check.choice("impl", eff.impls()), **common)
    elif op == "attention":
        heads, kv_heads = item["heads"], item.get("kv_heads")
        if kv_heads is not None and heads % kv_heads:
            check.problems.append(_Problem(("kv_heads",), f"{kv_heads} does not divide heads={heads}"))
        built = Attention(batch=item["batch"], heads=heads, kv_heads=kv_heads, q_len=item["q_len"],
                          kv_len=item["kv_len"], head_dim=item["head_dim"], causal=bool(item.get("causal", False)),
                          dtype=check.dtype(), backend=check.choice("backend", eff.attention_backends()),
                          backward=bool(item.get("backward", False)), **common)
    elif op in ("elementwise", "reduction"):
        flops = check.amount("flops") if "flops" in item else 0.0
        built = MemoryOp(bytes=check.amount("bytes"), kind=check.choice("kind", eff.memory_kinds(), op) or op,
                         reduction=op == "reduction", flops=flops, dtype=check.dtype("fp32"), **common)
    else:
        built = Custom(flops=check.amount("flops"), bytes=check.amount("bytes"), dtype=check.dtype(), **common)
    return (None if check.problems else built), check.problems
