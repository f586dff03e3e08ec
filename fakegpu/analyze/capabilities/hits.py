"""`capabilities --from-report`: the unsupported calls a native-mode run actually made, per library.

Native mode's processes write them at exit: FakeGPU's CUDA libraries into `fakegpu-native-<pid>.json`
(native-process: `unsupported`, library -> function or refused feature -> calls), its NVML into `nvml-<pid>.json`
(nvml-process), both into `fakegpu run --report-dir DIR`. Each name is classed against the tables: a generated
stub, a function not supported on purpose, or a feature a hand-written function refused (fgc_refuse: a flag or
mode it does not do)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fakegpu.analyze.capabilities.tables import Library
from fakegpu.errors import UsageError, clip
from fakegpu.reports import name_of, validate
from fakegpu.user_files import loads_json

READ = ("native-process", "nvml-process")
PATTERNS = ("fakegpu-native-*.json", "nvml-*.json")
# Reports that describe a run but carry no per-call list: named in the error, with where the list is.
NO_CALLS = {"cluster-report", "preflight", "fakecuda-process", "validate", "cli"}


def _files(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted({f for pattern in PATTERNS for f in path.glob(pattern)})
            if not found:
                raise UsageError(f"{path}: no process report in it (expected {' or '.join(PATTERNS)}, what "
                                 "`fakegpu run --report-dir DIR` writes)")
            out += found
        elif path.is_file():
            out.append(path)
        else:
            raise UsageError(f"{path}: no such file or folder")
    return out


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = loads_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable JSON report: {clip(str(exc))}") from exc
    name = name_of(doc)
    if name not in READ:
        where = ("it carries no per-call list; pass the processes' own reports (`fakegpu run --report-dir DIR`)"
                 if name in NO_CALLS else "not a FakeGPU process report")
        raise UsageError(f"{path}: {name or 'no schema key'}: {where}; accepted: {', '.join(READ)} reports "
                         f"({', '.join(PATTERNS)}) or a folder of them")
    try:
        validate(doc, name)
    except Exception as exc:  # jsonschema.ValidationError, imported lazily by validate
        raise UsageError(f"{path}: breaks the {name} schema: {clip(str(getattr(exc, 'message', exc)))}") from exc
    return doc


def _kind(library: Library | None, name: str) -> tuple[str, str]:
    if "(" in name:  # fgc_refuse's "function(feature)"
        return "refused", "a hand-written function refused a flag or mode FakeGPU does not support"
    row = library.rows.get(name) if library is not None else None
    if row is not None and row.cls == "stub":
        return "unsupported-declared", row.note
    return "stub", ""


def collect(paths: Iterable[Path], libraries: list[Library]) -> dict[str, Any]:
    """The unsupported calls of every process report under `paths` (files or folders), per library."""
    by_name = {lib.name: lib for lib in libraries}
    files = _files(paths)
    calls: dict[str, dict[str, list[int]]] = {}  # library -> name -> [calls, processes]
    for path in files:
        doc = _read(path)
        per_library = ({"nvml": doc["unsupported"]} if name_of(doc) == "nvml-process"
                       else doc.get("unsupported", {}))
        for lib, names in per_library.items():
            for name, n in names.items():
                entry = calls.setdefault(lib, {}).setdefault(name, [0, 0])
                entry[0] += n
                entry[1] += 1
    libraries_out = []
    for lib in sorted(calls, key=str.lower):
        functions = []
        for name, (n, processes) in sorted(calls[lib].items(), key=lambda kv: (-kv[1][0], kv[0])):
            kind, reason = _kind(by_name.get(lib), name)
            functions.append({"name": name, "calls": n, "processes": processes, "kind": kind, "reason": reason})
        libraries_out.append({"library": lib, "calls": sum(f["calls"] for f in functions), "functions": functions})
    return {"reports": [str(p) for p in files], "processes": len(files),
            "total_calls": sum(lib["calls"] for lib in libraries_out), "libraries": libraries_out}
