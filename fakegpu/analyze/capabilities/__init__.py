"""`fakegpu capabilities`: what FakeGPU does for real, what it only records, and what fails loudly, per library.

Native mode's libraries are described by their API tables and their build (tables.py): the hand-written functions
(`impl` rows), those not supported on purpose (`stub` rows, with why), and the generated not-supported stubs (every
other function of the header or of PyTorch's imports). fakecuda's torch.cuda surface is read from fakecuda
(fakegpu/fakecuda/surface.py, handed in by the caller). `--strict` audits the built exports (audit.py); `--from-report`
lists the unsupported calls a run made (hits.py)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fakegpu.analyze.capabilities import descriptions
from fakegpu.analyze.capabilities.tables import Library, TablesMissing, load
from fakegpu.errors import UsageError
from fakegpu.profiles.matching import did_you_mean
from fakegpu.reports import schema_id

SCHEMA = schema_id("capabilities")


def library_names(libraries: list[Library]) -> list[str]:
    return [lib.name for lib in libraries] + [descriptions.FAKECUDA]


def resolve(names: Sequence[str], libraries: list[Library]) -> list[str]:
    """The libraries `--library` names (case-insensitive, with the aliases driver, runtime, ...); a name that is
    none of them is a UsageError listing the accepted ones and the closest."""
    accepted = library_names(libraries)
    by_lower = {n.lower(): n for n in accepted} | {a: n for a, n in descriptions.ALIASES.items()}
    out: list[str] = []
    for raw in names:
        key = raw.strip().lower().removeprefix("lib")
        found = by_lower.get(key) or by_lower.get(raw.strip().lower())
        if found is None:
            hint = did_you_mean(raw, by_lower, quote=False, shown=by_lower)
            raise UsageError(f"--library {raw!r}: no such library{hint}; accepted: {', '.join(accepted)} "
                             f"(also {', '.join(sorted(descriptions.ALIASES))})")
        if found not in out:
            out.append(found)
    return out


def _library_entry(lib: Library) -> dict[str, Any]:
    title, behaviour = descriptions.LIBRARIES.get(lib.name, (lib.name, "not described"))
    recorded = descriptions.RECORDED.get(lib.name)
    builds = []
    declared = {r.name for r in lib.declared_unsupported}  # the generator lists them as stubs too
    for b in lib.builds:
        stubs = sorted(n for n, c in b.listed.items() if c == "stub" and n not in declared)
        builds.append({
            "file": b.file,
            "built": b.path is not None,
            "generated": str(b.generated) if b.generated else None,
            "version_node": b.node or None,
            "implemented": sum(1 for c in b.listed.values() if c == "impl") if b.generated else None,
            # impl rows this build leaves out (a per-CUDA-major library whose header lacks them)
            "implemented_elsewhere": sorted(r.name for r in lib.implemented if b.generated and r.name not in
                                            b.listed),
            "stub_count": len(stubs) if b.generated else None,
            "stubs": stubs,
        })
    return {
        "library": lib.name,
        "title": title,
        "native_behaviour": behaviour,
        "table": str(lib.table),
        "implemented": [{"name": r.name, "file": r.file, "recorded": bool(recorded and re.match(recorded, r.name)),
                         **({"note": r.note} if r.note else {})}
                        for r in sorted(lib.implemented, key=lambda r: r.name)],
        "unsupported_declared": [{"name": r.name, "reason": r.note}
                                 for r in sorted(lib.declared_unsupported, key=lambda r: r.name)],
        "builds": builds,
    }


def capabilities(only: Sequence[str] = (), *, strict: bool = False, reports: Sequence[Path] = (),
                 lib_dir: Path | None = None,
                 fakecuda_surface: Callable[[], dict[str, Any]] | None = None) -> dict[str, Any]:
    """The capabilities report (schema capabilities). `only`: library names (resolve()), default all (with
    `reports`, all native ones); strict: audit the built exports; reports: native-mode process reports (files or
    folders) whose unsupported calls to list; fakecuda_surface: what answers for fakecuda's torch.cuda surface
    (fakegpu.fakecuda.surface.surface; without it that section says it was not read)."""
    from fakegpu.analyze.capabilities import audit, hits

    def surface() -> dict[str, Any]:
        if fakecuda_surface is None:
            return {"available": False, "reason": "fakecuda's surface was not read (no reader given)",
                    "torch_version": None, "entry_points": []}
        return fakecuda_surface()

    try:
        libraries = load(lib_dir)
    except TablesMissing as exc:
        raise UsageError(str(exc)) from exc
    # A run's reports are native mode's: without --library they ask about the native libraries only, and the
    # fakecuda section (an import of torch) is left out.
    default = [lib.name for lib in libraries] if reports else library_names(libraries)
    chosen = resolve(only, libraries) if only else default
    native = [lib for lib in libraries if lib.name in chosen]
    built = [b for lib in libraries for b in lib.builds if b.path is not None]
    return {
        "schema": SCHEMA,
        "lib_dir": str(lib_dir) if lib_dir is not None else str(_default_lib_dir()),
        "built": bool(built),
        "selected": chosen,
        "classes": descriptions.CLASSES,
        "libraries": [_library_entry(lib) for lib in native],
        "fakecuda": ({"title": descriptions.FAKECUDA_TITLE, "behaviour": descriptions.FAKECUDA_BEHAVIOUR,
                      **surface()} if descriptions.FAKECUDA in chosen else None),
        "strict": audit.audit(native) if strict else None,
        "hits": hits.collect(reports, libraries) if reports else None,
    }


def _default_lib_dir() -> Path:
    from fakegpu.locations import native_lib_dir

    return Path(native_lib_dir())
