"""The repository's own modules by dotted name, and the bounded import graph between them, so that an entry
point's verdict covers the code it reaches and not only its own file."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

MAX_REACHED = 4000  # modules followed from one entry point; past it the entry is marked bounded


def module_name(rel: str, packages: set[str], root_name: str) -> tuple[str, str]:
    """(dotted name, import root) of the file at `rel`: the chain of folders holding an __init__.py above it
    names its package, as Python would import it from the folder where that chain starts. `packages` holds the
    relative folders with an __init__.py ("" for the root itself, whose own name `root_name` then leads)."""
    folder, _, filename = rel.rpartition("/")
    stem = filename.split(".", 1)[0]
    chain = [] if stem == "__init__" else [stem]
    while folder in packages:
        if folder == "":
            chain.append(root_name)
            break
        folder, _, name = folder.rpartition("/")
        chain.append(name)
    return ".".join(reversed(chain)), folder if folder not in packages else ".."  # the root is a package: its parent


@dataclass
class ModuleIndex:
    by_name: dict[str, str] = field(default_factory=dict)  # dotted name -> file
    by_root: dict[tuple[str, str], str] = field(default_factory=dict)  # (import root, name) -> file
    name_of: dict[str, str] = field(default_factory=dict)  # file -> dotted name
    root_of: dict[str, str] = field(default_factory=dict)  # file -> its import root

    def add(self, rel: str, name: str, root: str) -> None:
        if not name:
            return
        self.by_name.setdefault(name, rel)
        self.by_root.setdefault((root, name), rel)
        self.name_of[rel] = name
        self.root_of[rel] = root

    def resolve(self, module: str, importer: str | None = None) -> str | None:
        """The file a dotted name imports, looked for first beside the importer (a script's folder is on sys.path)."""
        if importer is not None:
            found = self.by_root.get((self.root_of.get(importer, ""), module))
            if found:
                return found
        return self.by_name.get(module)

    def targets(self, module: str, names: Iterable[str], importer: str) -> list[str]:
        """Every file an import runs: the packages on the way (their __init__), the module, and for `from m import
        x` the submodule m.x where there is one."""
        out = []
        parts = module.split(".")
        for i in range(1, len(parts) + 1):
            found = self.resolve(".".join(parts[:i]), importer)
            if found:
                out.append(found)
        for name in names:
            if name != "*":
                found = self.resolve(f"{module}.{name}", importer)
                if found:
                    out.append(found)
        return out


def reach(start: str, edges: Mapping[str, Iterable[str]], limit: int = MAX_REACHED
          ) -> tuple[dict[str, str | None], bool]:
    """Breadth-first from `start`: each reached file with the file it was first reached from (None for start),
    and whether the limit stopped the walk."""
    parent: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        here = queue.popleft()
        for there in edges.get(here, ()):
            if there not in parent:
                if len(parent) >= limit:
                    return parent, True
                parent[there] = here
                queue.append(there)
    return parent, False


def chain(parent: dict[str, str | None], end: str) -> list[str]:
    """start -> ... -> end, by the first-reached links."""
    out = [end]
    while parent.get(out[-1]) is not None:
        out.append(parent[out[-1]])  # type: ignore[arg-type]
    return list(reversed(out))
