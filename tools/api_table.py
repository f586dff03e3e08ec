"""Reader of the declarative API tables the stub generators share.

A table lists, one function a line, `name<TAB>impl|stub<TAB>file<TAB>note`: `impl` rows are hand-written in
the named file, `stub` rows document a deliberate not-supported answer. Every other function of the header
gets a generated stub.
"""

from __future__ import annotations

from pathlib import Path

CLASSES = {"impl", "stub"}


def parse_rows(path: Path) -> dict[str, tuple[str, str, str]]:
    """{name: (class, domain file, note)} of an API table (native/nvml/api.tsv, native/cuda/api/*.tsv); raises
    ValueError naming the bad line. `fakegpu capabilities` reads the notes (why a `stub` row is not supported)."""
    rows: dict[str, tuple[str, str, str]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split("\t")
        if len(cells) < 2 or cells[1] not in CLASSES:
            raise ValueError(f"{path}:{number}: expected 'name<TAB>impl|stub<TAB>file<TAB>note', got {line!r}")
        name = cells[0].strip()
        if name in rows:
            raise ValueError(f"{path}:{number}: {name} is listed twice")
        rows[name] = (cells[1], cells[2].strip() if len(cells) > 2 else "", cells[3].strip() if len(cells) > 3 else "")
    return rows


def parse_table(path: Path) -> dict[str, tuple[str, str]]:
    """{name: (class, domain file)} of an API table; raises ValueError naming the bad line."""
    return {name: (cls, file) for name, (cls, file, _note) in parse_rows(path).items()}
