"""Imports point down: library code never imports the CLI, and fakegpu's subpackages import each other in one
direction only (no cycle of any length). Parsed from the sources, so a lazy import inside a function counts."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "fakegpu"


def _unit(path: Path) -> str:
    """The top-level part of fakegpu a file belongs to: a subpackage, or a module directly under fakegpu/."""
    rel = path.relative_to(PACKAGE).with_suffix("").parts
    return rel[0]


def _imports(path: Path) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, node.lineno))
    return found


def _graph() -> dict[str, dict[str, list[str]]]:
    """unit -> unit it imports -> where ("file:line")."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in PACKAGE.rglob("*.py"):
        src = _unit(path)
        for name, line in _imports(path):
            parts = name.split(".")
            if parts[0] == "fakegpu" and len(parts) > 1 and parts[1] != src:
                graph[src][parts[1]].append(f"{path.relative_to(PACKAGE.parent)}:{line}")
    return graph


def test_library_code_never_imports_the_cli():
    upward = [where for src, targets in _graph().items() if src not in ("cli", "__main__")
              for where in targets.get("cli", [])]
    assert not upward, f"library modules import fakegpu.cli: {upward}"


def test_no_import_cycle_between_fakegpu_units():
    graph = _graph()
    seen: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(unit: str, path: list[str]) -> list[str] | None:
        seen[unit] = 1
        for nxt in graph.get(unit, {}):
            if seen.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt] if nxt in path else [*path, nxt]
            if nxt not in seen:
                cycle = visit(nxt, [*path, nxt])
                if cycle:
                    return cycle
        seen[unit] = 2
        return None

    for unit in sorted(graph):
        if unit not in seen:
            cycle = visit(unit, [unit])
            assert cycle is None, "import cycle: " + " -> ".join(cycle) + "\n" + "\n".join(
                f"{a} -> {b}: {graph[a][b][:3]}" for a, b in pairwise(cycle))


def test_the_check_sees_a_planted_cycle(tmp_path, monkeypatch):
    # the cycle check is only worth something if it fails on a cycle
    for unit, target in (("alpha", "beta"), ("beta", "alpha")):
        (tmp_path / unit).mkdir()
        (tmp_path / unit / "__init__.py").write_text(f"def f():\n    import fakegpu.{target}\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["PACKAGE"]), "PACKAGE", tmp_path)
    try:
        test_no_import_cycle_between_fakegpu_units()
    except AssertionError as e:
        assert "alpha -> beta -> alpha" in str(e)
    else:
        raise AssertionError("a planted cycle went unnoticed")


# The container integration (hook/, package fakegpu_hook) stands beside fakegpu's rooms: the CLI drives it, and it
# uses this small part of fakegpu only, all of it standard library on import (hook/README.md says the same).
HOOK = PACKAGE.parent / "hook" / "fakegpu_hook"
HOOK_USES = {"fakegpu", "fakegpu.atomic_file", "fakegpu.devices", "fakegpu.devices.table", "fakegpu.driver",
             "fakegpu.errors", "fakegpu.locations", "fakegpu.faults", "fakegpu.faults.board", "fakegpu.faults.plan"}


def test_only_the_cli_drives_the_container_integration():
    users = [f"{path.relative_to(PACKAGE.parent)}:{line}" for path in PACKAGE.rglob("*.py")
             if _unit(path) != "cli" for name, line in _imports(path) if name.split(".")[0] == "fakegpu_hook"]
    assert not users, f"fakegpu library code imports fakegpu_hook: {users}"


def test_the_container_integration_uses_only_its_part_of_fakegpu():
    used = {name for path in HOOK.rglob("*.py") for name, _ in _imports(path) if name.split(".")[0] == "fakegpu"}
    assert used <= HOOK_USES, f"fakegpu_hook imports beyond its documented part of fakegpu: {used - HOOK_USES}"


def test_the_container_integration_imports_the_standard_library_only():
    # What a create, the hook and the install commands import, in an interpreter as isolated as the sh front's.
    code = ("import sys; sys.path[:0] = sys.argv[1:]\n"
            "import fakegpu_hook.runtime, fakegpu_hook.hook, fakegpu_hook.front, fakegpu_hook.cdi, "
            "fakegpu_hook.daemon_json, fakegpu_hook.gpus, fakegpu_hook.inject, fakegpu_hook.settings, "
            "fakegpu.devices.table, fakegpu.driver, fakegpu.faults.plan, fakegpu.faults.board\n"
            "from fakegpu.devices import resolve_devices; resolve_devices('a100:2')\n"
            "names = {m.split('.')[0] for m in sys.modules}\n"
            "print(sorted(names - set(sys.stdlib_module_names) - {'__main__', 'fakegpu', 'fakegpu_hook'}))")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(HOOK.parent), str(PACKAGE.parent)],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
