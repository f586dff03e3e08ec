"""`fakegpu analyze-repo`: what in a repository needs a GPU, and which FakeGPU path runs each entry point.

    walk.py         the tree as git sees it (.gitignore honoured), every skip counted with its reason
    python_scan.py  one Python file's GPU-facing sites, imports and __main__ block (ast)
    python_imports.py  the imports of a file not worth parsing, by pattern (for the import graph)
    deps.py         requirements, pyproject, setup.py, setup.cfg, conda, entry_points.txt
    infra.py        Dockerfiles, compose GPU reservations, CI GPU runners, commands named in them
    scan.py         one pass reading every kept file once
    modules.py      the repository's modules by name and the bounded import graph
    verdict.py      the FakeGPU paths, their order and their commands
    report.py       entry points, verdicts with their evidence, the summary (schema analyze-repo)
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

from fakegpu.analyze.repo.report import SCHEMA, build
from fakegpu.analyze.repo.scan import scan
from fakegpu.analyze.repo.walk import MAX_TEXT_BYTES
from fakegpu.errors import UsageError

__all__ = ["MAX_TEXT_BYTES", "SCHEMA", "analyze_repo"]


def _close(name: str, candidates: list[str]) -> str:
    by_base = {c.rsplit("/", 1)[-1]: c for c in candidates}
    found = difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)
    found += [by_base[b] for b in difflib.get_close_matches(name.rsplit("/", 1)[-1], list(by_base), n=3, cutoff=0.7)
              if by_base[b] not in found]
    return f" Did you mean: {', '.join(found[:3])}?" if found else ""


def _root(path: Path) -> tuple[Path, str | None]:
    """The folder to scan and, when PATH is one file, that file as the only entry point."""
    if path.is_dir():
        return path.resolve(), None
    if path.is_file():
        return path.resolve().parent, path.name
    if path.exists():
        raise UsageError(f"{path}: not a folder or a regular file (a repository folder, or one Python file or "
                         "notebook in it)")
    parent = path.parent if str(path.parent) else Path(".")
    hint = ""
    if parent.is_dir():
        try:
            hint = _close(path.name, sorted(e.name for e in os.scandir(parent) if not e.name.startswith(".")))
        except OSError:
            pass
    raise UsageError(f"{path}: no such file or folder.{hint}")


def _entry(root: Path, given: str, files: list[str], skipped_ignored: set[str]) -> str:
    candidate = Path(given)
    rel = None
    for base in (Path.cwd(), root):
        full = (base / candidate).resolve() if not candidate.is_absolute() else candidate.resolve()
        try:
            rel = full.relative_to(root).as_posix()
        except ValueError:
            continue
        if rel in files:
            return rel
    if rel in skipped_ignored:
        raise UsageError(f"--entry {given}: the file is ignored by .gitignore in {root}")
    if candidate.exists() and candidate.is_file() and rel is None:
        raise UsageError(f"--entry {given}: the file is outside {root}")
    python = [f for f in files if f.endswith((".py", ".ipynb"))]
    raise UsageError(f"--entry {given}: no such Python file or notebook in {root}.{_close(given, python)}")


def analyze_repo(path: str | os.PathLike[str], entries: list[str] | None = None,
                 max_file_bytes: int = MAX_TEXT_BYTES) -> dict[str, Any]:
    """The analyze-repo report (schema analyze-repo) of the folder `path`, or of the folder holding the file
    `path` with that file as its entry point. `entries` restricts the verdicts to those files (paths relative to
    the current folder or to the root); UsageError for a path or an entry that is not there."""
    root, single = _root(Path(path))
    found = scan(root, max_file_bytes)
    wanted = list(entries or []) + ([single] if single else [])
    given = None
    if wanted:
        ignored = {e["path"] for e in found.skips.examples.get("ignored", [])}
        given = []
        for item in wanted:
            rel = _entry(root, item, found.all_files, ignored)
            if rel not in found.python:
                raise UsageError(f"--entry {item}: {rel} is not a Python file or notebook the scan could read "
                                 "(see the report's skipped files)")
            given.append(rel)
    return build(found, given)
