"""A fabric described in a YAML or JSON file (schema fabric.schema.json): read it, check it, and name each
problem by file, line and key, with the closest accepted name for a misspelt key, board or network.

    fabric: ib-ndr400
    rail_optimized: true
    nodes:
      - {name: hgx, profile: h100, gpus: 8, nics: 8, count: 4}
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from fakegpu.errors import FakeGPUError, ProblemList
from fakegpu.perf.fabric_kinds import load as load_kinds
from fakegpu.perf.topology import FabricError, FabricSpec, NodeSpec
from fakegpu.profiles import documents, load_catalog
from fakegpu.profiles.documents import KeyPath

SCHEMA_PATH = Path(__file__).with_name("fabric.schema.json")
SUFFIXES = (".yaml", ".yml", ".json")
MAX_NODES = 16384


class FabricFileError(ProblemList, FabricError):
    """A fabric file that cannot be read or breaks the schema; one line per problem, each starting file:line."""

    code = "invalid-fabric-file"



@cache
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def load(path: str | Path) -> FabricSpec:
    """The fabric of the file at `path`; FabricFileError naming every problem."""
    import jsonschema

    path = Path(path)
    try:
        doc, lines = documents.parse(path, documents.read_text(path, "fabric file", SUFFIXES))
    except documents.DocumentProblems as exc:
        raise FabricFileError(exc.problems) from None
    problems: list[tuple[KeyPath, str]] = [
        p for e in jsonschema.Draft202012Validator(schema()).iter_errors(doc) for p in documents.describe(e, ())]
    if problems:
        raise FabricFileError(documents.located(path, lines, problems))
    kinds = load_kinds()
    network = doc.get("fabric")
    if network is not None and network not in kinds.networks:
        problems.append((("fabric",), documents.not_one_of(network, sorted(kinds.networks))))
    catalog = load_catalog()
    nodes: list[NodeSpec] = []
    total = sum(item.get("count", 1) for item in doc["nodes"])
    if total > MAX_NODES:
        problems.append((("nodes",), f"{total} nodes: the model takes at most {MAX_NODES}"))
    for i, item in enumerate(doc["nodes"]):
        try:
            profile = catalog.get(item["profile"])
        except FakeGPUError as exc:
            problems.append((("nodes", i, "profile"), exc.message))
            continue
        count = item.get("count", 1)
        for k in range(count if total <= MAX_NODES else 0):
            # unnamed nodes are numbered across the file, a named group's nodes within the group
            if "name" not in item:
                name = f"node{len(nodes)}"
            else:
                name = item["name"] if count == 1 else f"{item['name']}{k}"
            nodes.append(NodeSpec(profile, item["gpus"], item.get("nics", item["gpus"]), name, item.get("domain")))
    names = [n.name for n in nodes]
    if not problems and len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})[:3]
        problems.append((("nodes",), f"node names repeat ({', '.join(dup)}): give each group its own name"))
    if problems:
        raise FabricFileError(documents.located(path, lines, problems))
    return FabricSpec(nodes, network, bool(doc.get("rail_optimized", True)), float(doc.get("oversubscription", 1)),
                      {"kind": "file", "path": str(path)})
