"""write_atomic: the one way FakeGPU replaces a file others read (config.json, daemon.json, device tables)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fakegpu.atomic_file import write_atomic


def test_replaces_and_keeps_the_existing_mode(tmp_path: Path) -> None:
    target = tmp_path / "daemon.json"
    target.write_text("old")
    target.chmod(0o600)
    write_atomic(target, '{"new": 1}')
    assert target.read_text() == '{"new": 1}'
    assert target.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["daemon.json"]


def test_explicit_mode_and_bytes(tmp_path: Path) -> None:
    target = tmp_path / "front"
    write_atomic(target, b"#!/bin/sh\n", mode=0o755)
    assert os.access(target, os.X_OK) and target.read_bytes() == b"#!/bin/sh\n"


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "config.json"
    target.write_text("old")
    with pytest.raises(TypeError):
        write_atomic(target, 42)  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("untouched")
    folder = tmp_path / "dir"
    folder.mkdir()
    target = folder / "devices.tbl"
    for attempt in range(3):  # a link planted at the first temporary names is skipped, not followed
        (folder / f".devices.tbl.{os.getpid()}.{attempt}.tmp").symlink_to(outside)
    write_atomic(target, "table")
    assert target.read_text() == "table" and outside.read_text() == "untouched"


def test_an_error_names_the_file_asked_for_not_the_temporary(tmp_path: Path) -> None:
    folder = tmp_path / "report.xml"
    folder.mkdir()  # a folder where the file should go: the rename fails
    with pytest.raises(IsADirectoryError) as caught:
        write_atomic(folder, "x")
    assert caught.value.filename == str(folder) and ".tmp" not in str(caught.value)
    missing = tmp_path / "no" / "such" / "report.xml"  # the temporary cannot even be made
    with pytest.raises(FileNotFoundError) as caught:
        write_atomic(missing, "x")
    assert caught.value.filename == str(missing)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.xml"]
