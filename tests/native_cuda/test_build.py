"""The built libraries: names, versions and exports are what CUDA-built PyTorch links against."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.native_cuda.conftest import LIBS, REPO

pytestmark = pytest.mark.native

IMPORTS = REPO / "native" / "cuda" / "imports"
# import list -> (library file, version node torch's imports name; "" when torch imports unversioned). The
# CUDA 12 set's lists (torch 2.10.0+cu128) are in imports/cu12/.
LIBRARY_OF = {
    "cuda": ("libcuda.so.1", ""),
    "cudart": ("libcudart.so.13", "libcudart.so.13"),
    "cublas": ("libcublas.so.13", "libcublas.so.13"),
    "cublasLt": ("libcublasLt.so.13", "libcublasLt.so.13"),
    "nccl": ("libnccl.so.2", ""),
    "cudnn": ("libcudnn.so.9", "libcudnn.so.9"),
    "cusparse": ("libcusparse.so.12", "libcusparse.so.12"),
    "cusolver": ("libcusolver.so.12", "libcusolver.so.12"),
    "cufft": ("libcufft.so.12", "libcufft.so.12"),
    "cufile": ("libcufile.so.0", ""),
    "cusparseLt": ("libcusparseLt.so.0", ""),
    "nvrtc": ("libnvrtc.so.13", "libnvrtc.so.13"),
    "nvshmem_host": ("libnvshmem_host.so.3", "NVSHMEM"),
    "cupti": ("libcupti.so.13", "libcupti.so.13"),
    "curand": ("libcurand.so.10", "libcurand.so.10"),
    "cu12/cudart": ("libcudart.so.12", "libcudart.so.12"),
    "cu12/cublas": ("libcublas.so.12", "libcublas.so.12"),
    "cu12/cublasLt": ("libcublasLt.so.12", "libcublasLt.so.12"),
    "cu12/cusolver": ("libcusolver.so.11", "libcusolver.so.11"),
    "cu12/cufft": ("libcufft.so.11", "libcufft.so.11"),
    "cu12/nvrtc": ("libnvrtc.so.12", "libnvrtc.so.12"),
    "cu12/cupti": ("libcupti.so.12", "libcupti.so.12"),
}


def exports(lib: Path) -> dict[str, str]:
    """{symbol: version node or ''} of a library's defined dynamic symbols."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    syms: dict[str, str] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TWiDB":
            name, _, node = parts[2].partition("@@")
            name = name.split("@")[0]
            syms[name] = node
    return syms


def test_every_library_is_built_with_its_soname(cuda_build: Path) -> None:
    assert set(LIBRARY_OF.values()) and {f for f, _ in LIBRARY_OF.values()} == set(LIBS)
    for name in LIBS:
        dyn = subprocess.run(["readelf", "-d", str(cuda_build / name)], capture_output=True, text=True).stdout
        assert f"Library soname: [{name}]" in dyn


@pytest.mark.parametrize("short", sorted(LIBRARY_OF))
def test_torch_imports_are_exported_under_the_right_version(cuda_build: Path, short: str) -> None:
    file, node = LIBRARY_OF[short]
    syms = exports(cuda_build / file)
    lines = (IMPORTS / f"{short}.txt").read_text().splitlines()
    wanted = [n.strip() for n in lines if n.strip() and not n.startswith("#")]
    missing = [n for n in wanted if n not in syms]
    assert not missing, f"{file} lacks {missing[:10]}"
    if node:
        wrong = [n for n in wanted if syms[n] != node]
        assert not wrong, f"{file}: not under {node}: {wrong[:10]}"


def test_only_api_names_leave_the_libraries(cuda_build: Path) -> None:
    prefix = re.compile(r"^(cu|__cuda|nccl|pnccl|nvrtc|nvshmem|cupti|cublas|cudnn|cusparse|cusolver|cufft|cuFile)")
    for name in LIBS:
        leaked = [
            s
            for s, node in exports(cuda_build / name).items()
            if not prefix.match(s) and not s.startswith("lib") and s not in {"NVSHMEM"} and node != s
        ]
        assert not leaked, f"{name} exports {leaked[:10]}"


# The libraries built once per CUDA major from one table: a row may name a function only one major declares.
PER_MAJOR = {"cudart", "cublas", "cublasLt"}


@pytest.mark.parametrize("gen", ["cuda", "cuda12"])
def test_hand_written_rows_match_definitions(cuda_build: Path, gen: str) -> None:
    shorts = ("cudart", "cublas", "cublasLt") if gen == "cuda12" else ("cuda", "cudart", "cublas", "cublasLt", "nccl")
    for short in shorts:
        caps = REPO / "native" / "build" / "gen" / gen / f"{short}_capabilities.tsv"
        rows = dict(line.split("\t") for line in caps.read_text().splitlines())
        table = REPO / "native" / "cuda" / "api" / f"{short}.tsv"
        impl = [ln.split("\t")[0] for ln in table.read_text().splitlines() if ln and not ln.startswith("#")]
        present = [n for n in impl if n in rows] if short in PER_MAJOR else impl
        assert all(rows[n] == "impl" for n in present)
        assert {n for n, c in rows.items() if c == "impl"} == set(present)
        assert len(rows) > len(impl), "the header's other functions are exported as stubs"


def test_cuda12_runtime_exports_the_12_abi_names(cuda_build: Path) -> None:
    # CUDA 12 renamed these by macro; torch 2.10 imports the _v2 names, CUDA 13 dropped the suffix.
    cu12, cu13 = exports(cuda_build / "libcudart.so.12"), exports(cuda_build / "libcudart.so.13")
    for name in ("cudaGetDeviceProperties_v2", "cudaStreamGetCaptureInfo_v2", "cudaStreamGetCaptureInfo_v3"):
        assert cu12.get(name) == "libcudart.so.12" and name not in cu13
    for name in ("cudaGetDeviceProperties", "cudaStreamGetCaptureInfo"):
        assert cu13.get(name) == "libcudart.so.13" and name not in cu12
