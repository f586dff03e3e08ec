"""`fakegpu capabilities` against the real build: --strict passes on it and fails on a relinked copy of one library
with an export removed and one added; --from-report lists what a real native-mode process hit (a generated stub,
a refusal of a hand-written function, an NVML function refused on purpose); the README's examples print what the
README shows."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.analyze.capabilities import capabilities
from fakegpu.reports import validate
from tests.native_cuda.conftest import REPO
from tests.readme_examples import examples, printed

pytestmark = pytest.mark.native
README = examples("## What does FakeGPU implement? `capabilities`", "capabilities")


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fakegpu", "capabilities", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def test_strict_passes_on_the_built_tree(cuda_build: Path) -> None:
    proc = cli("--strict", "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    report = json.loads(proc.stdout)["data"]
    validate(report, "capabilities")
    checked = {c["file"] for c in report["strict"]["checked"]}
    # every CUDA library file and NVML's is compared, each with thousands of names in all
    assert {p.name for p in cuda_build.glob("lib*.so.*") if not p.is_symlink()} <= checked | {"libnvidia-ml.so"}
    assert "libnvidia-ml.so.1" in checked and report["strict"]["drift"] == []
    assert sum(c["exports"] for c in report["strict"]["checked"]) > 3000


EXTRA = "cublasLtNotInAnyTable"


def _relinked_lt(tmp: Path, drop: str) -> Path:
    """native/build/lib's files, with libcublasLt.so.13 linked again from its own objects by the Makefile's own
    link command, through a version script without `drop` and with one more export (EXTRA)."""
    native = REPO / "native"
    dry = subprocess.run(["make", "-C", str(native), "-n", "-W", "build/gen/cuda/cublasLt.map",
                          "build/lib/libcublasLt.so.13", f"PYTHON={sys.executable}"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    (link,) = [ln for ln in dry.splitlines() if "-o build/lib/libcublasLt.so.13 " in ln]
    script = (native / "build/gen/cuda/cublasLt.map").read_text()
    assert f"        {drop};\n" in script
    script = script.replace(f"        {drop};\n", f"        {EXTRA};\n")
    (tmp / "lt.map").write_text(script)
    extra = tmp / "extra.c"
    extra.write_text(f'__attribute__((visibility("default"))) long {EXTRA}(void) {{ return 0; }}\n')
    lib = tmp / "build" / "lib"
    lib.mkdir(parents=True)
    (tmp / "build" / "gen").symlink_to(native / "build" / "gen")
    for f in (native / "build" / "lib").iterdir():
        if f.name != "libcublasLt.so.13":
            (lib / f.name).symlink_to(f)
    argv = shlex.split(link)
    argv[argv.index("-o") + 1] = str(lib / "libcublasLt.so.13")
    argv = [str(tmp / "lt.map") if a == "-Wl,--version-script=build/gen/cuda/cublasLt.map" else a for a in argv]
    argv = [f"-Wl,--version-script={tmp / 'lt.map'}" if a == str(tmp / "lt.map") else a for a in argv]
    subprocess.run([*argv, str(extra)], cwd=native, check=True, capture_output=True, timeout=120)
    return lib


def test_strict_fails_on_a_build_with_an_export_removed(cuda_build: Path, tmp_path: Path) -> None:
    lib = _relinked_lt(tmp_path, "cublasLtMatmul")
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib / "libcublasLt.so.13")], capture_output=True,
                         text=True, check=True).stdout
    assert re.search(rf" T {EXTRA}@@", out) and not re.search(r" T cublasLtMatmul@@", out)  # the build is as meant
    report = capabilities(["cublasLt"], strict=True, lib_dir=lib)
    validate(report, "capabilities")
    drift = {(d["file"], d["kind"]): d["names"] for d in report["strict"]["drift"]}
    assert drift == {
        ("libcublasLt.so.13", "exported-not-in-table"): [EXTRA],
        ("libcublasLt.so.13", "in-table-not-exported"): ["cublasLtMatmul"],
    }  # the CUDA 12 build beside it still matches
    proc = cli("--strict", "--library", "cublasLt", env={"FAKEGPU_NATIVE_DIR": str(lib)})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert ("libcublasLt.so.13: in the table or the generated stubs but not exported: cublasLtMatmul"
            in proc.stdout)
    assert f"libcublasLt.so.13: exported but neither in the table nor a generated stub: {EXTRA}" in proc.stdout


HITS = """
import ctypes, os
lib = os.environ["FAKEGPU_LIB"]
rt = ctypes.CDLL(os.path.join(lib, "libcudart.so.13"))
n = ctypes.c_int()
assert rt.cudaGetDeviceCount(ctypes.byref(n)) == 0 and n.value == 2
assert rt.cudaFree(None) == 0
for _ in range(3):
    assert rt.cudaGraphClone(ctypes.byref(ctypes.c_void_p()), None) == 801  # cudaErrorNotSupported
drv = ctypes.CDLL(os.path.join(lib, "libcuda.so.1"))
value = ctypes.c_size_t()
assert drv.cuCtxGetLimit(ctypes.byref(value), 7) == 801  # CU_LIMIT_SHMEM_SIZE: libcuda refuses it, by hand
nvml = ctypes.CDLL(os.path.join(lib, "libnvidia-ml.so.1"))
assert nvml.nvmlInit_v2() == 0
dev = ctypes.c_void_p()
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0
assert nvml.nvmlDeviceSetPersistenceMode(dev, 1) == 3  # NVML_ERROR_NOT_SUPPORTED
"""


def test_from_report_lists_what_a_native_run_hit(cuda_env: dict[str, str], tmp_path: Path) -> None:
    rep = tmp_path / "reports"
    env = {**cuda_env, "FAKEGPU_REPORT_DIR": str(rep)}
    proc = subprocess.run([sys.executable, "-c", HITS], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name.split("-")[0] for p in rep.iterdir()) == ["fakegpu", "nvml"]
    report = capabilities(reports=[rep], only=["cudart"])
    validate(report, "capabilities")
    hits = report["hits"]
    assert (hits["processes"], hits["total_calls"]) == (2, 5)
    got = {lib["library"]: [(f["name"], f["calls"], f["kind"]) for f in lib["functions"]] for lib in hits["libraries"]}
    assert got == {"cuda": [("cuCtxGetLimit/cuCtxSetLimit(CIG limit)", 1, "refused")],
                   "cudart": [("cudaGraphClone", 3, "stub")],
                   "nvml": [("nvmlDeviceSetPersistenceMode", 1, "unsupported-declared")]}
    text = cli("--from-report", str(rep)).stdout
    assert re.search(r"cudart\s+cudaGraphClone\s+3\s+1\s+stub", text), text
    assert re.search(r"nvml\s+nvmlDeviceSetPersistenceMode\s+1\s+1\s+unsupported-declared: setters need root", text)


def test_the_readme_section_has_its_examples() -> None:
    assert [c for c, _ in README] == ["fakegpu capabilities --library cublasLt", "fakegpu capabilities --strict "
                                      "--library nvml --library driver"]


@pytest.mark.parametrize("command,shown", README, ids=[c for c, _ in README])
def test_each_readme_example_prints_what_the_readme_shows(cuda_build: Path, command: str, shown: str) -> None:
    assert printed(command) == shown
