"""Efficiency factors (efficiency.yaml), facts of the catalog: what share of a datasheet peak each class of operation
reaches per architecture, how long a host takes to issue an operation, and where each number comes from.

The file is the one home of these numbers; this module only reads it and resolves an architecture's missing
factor through its fallback architecture, marking the result assumed and saying why. The roofline (fakegpu/perf)
prices operations with them, and the catalog compiler derives each board's load model from them, so they live
with the catalog, below both.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from fakegpu.errors import CatalogError

DATA = Path(__file__).with_name("efficiency.yaml")
LAUNCH_MODES = ("graph", "eager")


@dataclass(frozen=True)
class Factor:
    """One share of a peak, resolved for an architecture."""

    key: str  # where it lives in efficiency.yaml, e.g. "gemm.compute.bf16"
    expected: float
    pessimistic: float
    source: str
    assumed: bool
    architecture: str  # the architecture whose figure it is (after fallback)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "expected": round(self.expected, 4), "pessimistic": round(self.pessimistic, 4),
                "architecture": self.architecture, "assumed": self.assumed, "source": self.source}


@dataclass(frozen=True)
class LaunchCost:
    """Host seconds to issue one operation of a class."""

    mode: str
    op_class: str
    expected_s: float
    pessimistic_s: float
    source: str
    assumed: bool


class Efficiency:
    """efficiency.yaml, with lookups that follow the architecture fallbacks."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self._archs: dict[str, dict[str, Any]] = doc["architectures"]
        self._pessimistic_share = float(doc["pessimistic_share"]["value"])

    @property
    def architectures(self) -> list[str]:
        return list(self._archs)

    def chain(self, arch: str) -> list[str]:
        """`arch`, then the architectures it falls back to, in order."""
        if arch not in self._archs:
            raise CatalogError(f"efficiency.yaml has no architecture {arch!r}; it knows {', '.join(self._archs)}")
        out = [arch]
        while (nxt := self._archs[out[-1]].get("fallback")) is not None:
            if nxt in out or nxt not in self._archs:
                raise CatalogError(f"efficiency.yaml: fallback chain of {arch!r} is broken at {nxt!r}")
            out.append(nxt)
        return out

    def _entry(self, arch: str, key: str) -> dict[str, Any] | None:
        node: Any = self._archs[arch]
        for part in _split(key):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node if isinstance(node, dict) and "expected" in node else None

    def has(self, arch: str, key: str) -> bool:
        return any(self._entry(a, key) is not None for a in self.chain(arch))

    def factor(self, arch: str, key: str) -> Factor:
        """The factor at `key` for `arch`, borrowed along the fallback chain when `arch` has none."""
        chain = self.chain(arch)
        for depth, lender in enumerate(chain):
            entry = self._entry(lender, key)
            if entry is None:
                continue
            expected = float(entry["expected"])
            pessimistic = float(entry.get("pessimistic", expected * self._pessimistic_share))
            text = entry.get("source") or f"assumed: {entry['assumed']}"
            if depth:
                scale = 1.0
                if entry.get("scales_with") == "copy":
                    scale = self.factor(arch, "memory.copy").expected / float(
                        self._archs[lender]["memory"]["copy"]["expected"])
                expected, pessimistic = min(1.0, expected * scale), min(1.0, pessimistic * scale)
                scaled = f", scaled by {arch}'s copy share ({scale:.3f}x)" if scale != 1.0 else ""
                text = f"assumed: {self._archs[arch]['fallback_reason'].strip()}. {lender}{scaled}: {text}"
            return Factor(key, expected, pessimistic, text, bool(depth) or "assumed" in entry, lender)
        raise CatalogError(f"efficiency.yaml: no factor {key!r} for {arch!r} or its fallbacks {chain[1:]}")

    def kernel_fixed_s(self, arch: str, kind: str | None = None) -> float:
        """Seconds a kernel spends starting and draining, beyond its work (a kind may override it)."""
        if kind is not None:
            for a in self.chain(arch):
                entry = self._entry(a, f"memory.{kind}")
                if entry is not None and "fixed_s" in entry:
                    return float(entry["fixed_s"])
        for a in self.chain(arch):
            fixed = self._archs[a].get("kernel_fixed_s")
            if fixed is not None:
                return float(fixed["value"])
        raise CatalogError(f"efficiency.yaml: no kernel_fixed_s for {arch!r} or its fallbacks")

    def memory_kinds(self) -> list[str]:
        """Every bandwidth-bound kernel kind any architecture has a figure for."""
        return sorted({k for a in self._archs.values() for k in a.get("memory", {})})

    def impls(self) -> list[str]:
        return sorted({k for a in self._archs.values() for k in a.get("gemm", {}).get("impl", {})})

    def launch(self, mode: str, op_class: str) -> LaunchCost:
        launch = self.doc["launch"]
        if mode == "graph":
            g = launch["graph"]
            return LaunchCost(mode, op_class, float(g["seconds"]), float(g["pessimistic_seconds"]), g["source"],
                              False)
        if mode != "eager":
            raise CatalogError(f"unknown launch mode {mode!r}; known: {', '.join(LAUNCH_MODES)}")
        eager = launch["eager"]
        entry = eager["classes"][op_class]
        seconds = float(entry["seconds"])
        text = entry.get("source") or f"assumed: {entry['assumed']}"
        return LaunchCost(mode, op_class, seconds, seconds * float(eager["pessimistic_share"]), text,
                          "assumed" in entry)

    def sparse_speedup(self, arch: str, dtype: str) -> float | None:
        """How much faster the sparse tensor rate is than the dense one, or None where the board has none."""
        sp = self.doc["sparsity"]
        return float(sp["speedup"]) if arch in sp["architectures"] and dtype in sp["dtypes"] else None

    def sparse_realised_share(self) -> tuple[float, str]:
        entry = self.doc["sparsity"]["realised_share"]
        return float(entry["value"]), f"assumed: {entry['assumed']}"

    def attention_order(self) -> list[str]:
        return list(self.doc["attention_backends"]["order"])

    def attention_backends(self) -> list[str]:
        return list(self.doc["attention_backends"]["names"])


def _split(key: str) -> list[str]:
    """gemm.impl.torch._int_mm.int8 -> ['gemm', 'impl', 'torch._int_mm', 'int8']: an impl name may hold a dot."""
    parts = key.split(".")
    if len(parts) > 3 and parts[1] == "impl":
        return [parts[0], "impl", ".".join(parts[2:-1]), parts[-1]]
    return parts


def factor_entries(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(path, entry) for every factor in the document, for checks that each one has its source."""
    out: list[tuple[str, dict[str, Any]]] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            if "expected" in node or "value" in node or "seconds" in node:
                out.append((path, node))
                return
            for k, v in node.items():
                walk(v, f"{path}.{k}" if path else str(k))

    walk(doc, "")
    return out


@cache
def load() -> Efficiency:
    import yaml

    try:
        doc = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CatalogError(f"cannot read {DATA}: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != 1:
        raise CatalogError(f"{DATA}: not an efficiency table of format 1")
    problems = [f"{path}: needs a source or an assumed reason" for path, e in factor_entries(doc)
                if not (e.get("source") or e.get("assumed"))]
    problems += [f"{path}: expected {e['expected']!r} is not a share in (0, 1]" for path, e in factor_entries(doc)
                 if "expected" in e and not 0 < float(e["expected"]) <= 1]
    if problems:
        raise CatalogError(f"{DATA} is inconsistent", problems)
    return Efficiency(doc)
