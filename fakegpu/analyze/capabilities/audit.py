"""`capabilities --strict`: the built libraries' dynamic exports against the tables and the generated stubs.

What the tables promise and what a program can bind to must be the same set of names: an export missing from the
tables is a function nobody decided about (a program gets behaviour no list admits), a table or stub name the
library does not export is a function the capability list claims and the loader will not find. Each build is
checked on its own: the generator's list of it (impl and stub names) against .dynsym (fakegpu/analyze/elf.py),
and its impl names against the hand-written table; every impl row of a table must be in some build of its
library (a per-CUDA-major library may leave a row out of the set whose header lacks it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fakegpu.analyze.capabilities.tables import Library
from fakegpu.analyze.elf import NotELF, read_elf

# drift kinds, as the report names them
EXPORTED_NOT_IN_TABLE = "exported-not-in-table"
IN_TABLE_NOT_EXPORTED = "in-table-not-exported"
IMPL_NOT_IN_TABLE = "generated-impl-not-in-table"
ROW_IN_NO_BUILD = "table-row-in-no-build"
NOT_BUILT = "not-built"
NOT_GENERATED = "no-generated-list"
UNREADABLE = "unreadable"
MEANING = {
    EXPORTED_NOT_IN_TABLE: "exported but neither in the table nor a generated stub",
    IN_TABLE_NOT_EXPORTED: "in the table or the generated stubs but not exported",
    IMPL_NOT_IN_TABLE: "generated as implemented but not an impl row of the table (stale generated list)",
    ROW_IN_NO_BUILD: "an impl row of the table that no build of the library exports as implemented",
    NOT_BUILT: "not built (`make native` builds it)",
    NOT_GENERATED: "a built library file with no generated list",
    UNREADABLE: "not a readable ELF file",
}


@dataclass
class Drift:
    library: str
    file: str
    kind: str
    names: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"library": self.library, "file": self.file, "kind": self.kind, "meaning": MEANING[self.kind],
                "count": len(self.names), "names": self.names}


def audit(libraries: list[Library]) -> dict[str, Any]:
    """The strict audit's part of the report: what was compared and every drift found (none: ok)."""
    drift: list[Drift] = []
    checked: list[dict[str, Any]] = []
    for lib in libraries:
        impl_rows = {r.name for r in lib.implemented}
        implemented_somewhere: set[str] = set()
        if not lib.builds:
            drift.append(Drift(lib.name, "", NOT_BUILT, []))
        for build in lib.builds:
            if build.path is None:
                drift.append(Drift(lib.name, build.file, NOT_BUILT, []))
                continue
            if build.generated is None:
                drift.append(Drift(lib.name, build.file, NOT_GENERATED, []))
                continue
            try:
                exported = read_elf(build.path).exported
            except (NotELF, OSError) as exc:
                drift.append(Drift(lib.name, build.file, UNREADABLE, [str(exc)]))
                continue
            listed = set(build.listed)
            impl = {n for n, c in build.listed.items() if c == "impl"}
            implemented_somewhere |= impl & exported
            for kind, names in ((EXPORTED_NOT_IN_TABLE, exported - listed), (IN_TABLE_NOT_EXPORTED,
                                listed - exported), (IMPL_NOT_IN_TABLE, impl - impl_rows)):
                if names:
                    drift.append(Drift(lib.name, build.file, kind, sorted(names)))
            checked.append({"library": lib.name, "file": build.file, "path": str(build.path),
                            "generated": str(build.generated), "exports": len(exported),
                            "implemented": len(impl), "stubs": len(listed - impl)})
        missing = impl_rows - implemented_somewhere
        if missing and any(b.path is not None and b.generated is not None for b in lib.builds):
            drift.append(Drift(lib.name, str(lib.table.name), ROW_IN_NO_BUILD, sorted(missing)))
    return {"ok": not drift, "checked": checked, "drift": [d.to_dict() for d in drift]}


def describe(drift: dict[str, Any]) -> str:
    """One line per drift for a person: library, file, what, and the names (first ten)."""
    names = drift["names"]
    shown = ", ".join(names[:10]) + (f", ... ({len(names)} in all)" if len(names) > 10 else "")
    where = f"{drift['library']} {drift['file']}".strip()
    return f"{where}: {drift['meaning']}" + (f": {shown}" if shown else "")

