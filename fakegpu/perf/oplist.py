"""An op list file (YAML or JSON) for estimate-roofline: read it, check it against ops.schema.json and the rules
a schema cannot say (known dtypes, kernel kinds, attention backends), and name each problem by file, line and
key, with the closest accepted name for a misspelt one (fakegpu/profiles/documents.py, as for manifests and
workspace profiles).

    ops:
      - {op: gemm, m: 8192, n: 8192, k: 8192, dtype: bf16}
      - {op: attention, batch: 4, heads: 32, q_len: 4096, kv_len: 4096, head_dim: 128, causal: true, dtype: bf16}
      - {op: elementwise, kind: gelu, bytes: 256MiB}
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from fakegpu.errors import ProblemList, UsageError
from fakegpu.perf.ops import Attention, Custom, Gemm, MemoryOp, Op, dtype_name
from fakegpu.perf.units import parse_quantity
from fakegpu.profiles import documents
from fakegpu.profiles.documents import KeyPath, Lines
from fakegpu.profiles.efficiency import load as load_efficiency

SCHEMA_PATH = Path(__file__).with_name("ops.schema.json")
SUFFIXES = (".yaml", ".yml", ".json")


class OpListError(ProblemList, UsageError):
    """An op list that cannot be read or breaks the schema; one line per problem, each starting file:line."""

    code = "invalid-op-list"



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
        raise OpListError(documents.located(path, lines, problems))
    return ops


def _read(path: Path) -> tuple[Any, Lines]:
    try:
        return documents.parse(path, documents.read_text(path, "op list", SUFFIXES))
    except documents.DocumentProblems as exc:
        raise OpListError(exc.problems) from None


# ---------------------------------------------------------------- the schema, in a person's words


def _schema_problems(doc: Any) -> list[tuple[KeyPath, str]]:
    import jsonschema

    spec = schema()
    out = [p for e in jsonschema.Draft202012Validator(spec).iter_errors(doc) for p in documents.describe(e, ())]
    ops = doc.get("ops") if isinstance(doc, dict) else None
    for i, item in enumerate(ops if isinstance(ops, list) else []):
        # each op against its own definition, so an unknown key is named against that op type's keys
        sub = spec["$defs"].get(item.get("op")) if isinstance(item, dict) and isinstance(item.get("op"), str) else None
        if sub is not None:
            for error in jsonschema.Draft202012Validator(sub).iter_errors(item):
                out.extend(documents.describe(error, ("ops", i)))
    return out


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
            self.problems.append(_Problem((key,), documents.not_one_of(value, accepted)))
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
