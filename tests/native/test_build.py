"""Guards on the generated NVML surface: every nvml.h function is exported, hand-written rows are real."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import BUILD, LIB_DIR, REPO

pytestmark = pytest.mark.native


def exported(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}


def capabilities() -> dict[str, str]:
    rows = (BUILD / "gen" / "capabilities.tsv").read_text().splitlines()
    return dict(row.split("\t") for row in rows)


def test_exports_equal_header_functions(native_build: Path) -> None:
    caps = capabilities()
    assert len(caps) > 350
    assert exported(LIB_DIR / "libnvidia-ml.so.1") == set(caps)


def test_base_and_versioned_names_both_exported(native_build: Path) -> None:
    names = exported(LIB_DIR / "libnvidia-ml.so.1")
    for base in ("nvmlInit", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetPciInfo",
                 "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        assert base in names and f"{base}_v2" in names


def test_impl_rows_are_hand_written_and_not_stubbed(native_build: Path) -> None:
    table = [line.split("\t") for line in (REPO / "native" / "nvml" / "api.tsv").read_text().splitlines()
             if line and not line.startswith("#")]
    impl = {row[0] for row in table if row[1] == "impl"}
    caps = capabilities()
    assert {n for n, kind in caps.items() if kind == "impl"} == impl
    stubs = (BUILD / "gen" / "stubs_generated.c").read_text()
    for name in impl:
        assert f" {name}(" not in stubs


def test_generator_is_deterministic(native_build: Path, tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(REPO / "tools" / "gen_nvml.py"), "--header", str(BUILD / "gen" / "nvml.i"),
                    "--table", str(REPO / "native" / "nvml" / "api.tsv"), "--out-dir", str(tmp_path)], check=True,
                   capture_output=True)
    for name in ("stubs_generated.c", "exports.map", "capabilities.tsv"):
        assert (tmp_path / name).read_text() == (BUILD / "gen" / name).read_text()


def test_only_nvml_symbols_leak(native_build: Path) -> None:
    assert all(name.startswith("nvml") for name in exported(LIB_DIR / "libnvidia-ml.so.1"))


def test_soname(native_build: Path) -> None:
    out = subprocess.run(["objdump", "-p", str(LIB_DIR / "libnvidia-ml.so.1")], capture_output=True, text=True)
    assert "SONAME               libnvidia-ml.so.1" in out.stdout
