"""Helpers for the analyze-repo tests: small repositories written into tmp_path, the CLI through typer's runner
with its JSON checked against the shipped schema, and a minimal ELF shared object writer."""

from __future__ import annotations

import json
import struct
import textwrap
from pathlib import Path

from typer.testing import CliRunner

from fakegpu.cli.main import app
from fakegpu.reports import validate

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def write_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    """Each relative path with its content (text is dedented); folders are made as needed."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content).lstrip("\n"), encoding="utf-8")
    return root


def analyze(*args: str) -> dict:
    """The report of a successful `analyze-repo ... --json`, validated (envelope and report)."""
    result = runner.invoke(app, ["analyze-repo", *args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    validate(doc)
    validate(doc["data"])
    return doc["data"]


def analyze_error(*args: str) -> tuple[int, str]:
    """Exit code and message of a failing `analyze-repo ... --json`."""
    result = runner.invoke(app, ["analyze-repo", *args, "--json"])
    doc = json.loads(result.stdout)
    validate(doc)
    assert doc["status"] == "error" and doc["data"] is None
    return result.exit_code, doc["errors"][0]["message"]


def entry(report: dict, path: str) -> dict:
    found = [e for e in report["entries"] if e["path"] == path]
    assert found, f"no entry {path}; entries: {[e['path'] for e in report['entries']]}"
    return found[0]


def sites(report: dict, kind: str | None = None) -> list[tuple[str, int, str]]:
    return [(s["path"], s["line"], s["detail"]) for s in report["sites"] if kind is None or s["kind"] == kind]


def shared_object(needed: list[str], sections: list[str] = ()) -> bytes:
    """A minimal ELF64 shared object: a .dynamic section with these DT_NEEDED names and empty extra sections
    (".nv_fatbin" makes it carry CUDA device code, as far as a section table tells)."""
    names = [".shstrtab", ".dynstr", ".dynamic", *sections]
    shstrtab = b"\0" + b"".join(n.encode() + b"\0" for n in names)
    dynstr = b"\0" + b"".join(n.encode() + b"\0" for n in needed)
    offsets, at = [], 1
    for n in needed:
        offsets.append(at)
        at += len(n) + 1
    dynamic = b"".join(struct.pack("<qQ", 1, o) for o in offsets) + struct.pack("<qQ", 0, 0)
    blobs = [shstrtab, dynstr, dynamic, *[b"\0" * 16 for _ in sections]]
    body, positions = b"", []
    for blob in blobs:
        positions.append(64 + len(body))
        body += blob
    shoff = 64 + len(body)
    name_at = [shstrtab.index(b"\0" + n.encode() + b"\0") + 1 for n in names]
    headers = struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    kinds = [3, 3, 6, *[1] * len(sections)]  # STRTAB, STRTAB, DYNAMIC, PROGBITS
    for i, blob in enumerate(blobs):
        link = 2 if kinds[i] == 6 else 0  # .dynamic's strings are section 2 (.dynstr)
        headers += struct.pack("<IIQQQQIIQQ", name_at[i], kinds[i], 0, 0, positions[i], len(blob), link, 0, 1,
                               16 if kinds[i] == 6 else 0)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(blobs) + 1, 1)
    return header + body + headers
