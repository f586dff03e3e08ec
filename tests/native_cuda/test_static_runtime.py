"""Programs FakeGPU cannot serve say so: a CUDA runtime linked statically (nvcc's default) is refused by
`fakegpu run` with what was found and the fix, before it runs and prints zero devices. The programs are compiled
here by NVIDIA's nvcc (PyPI's nvidia-cuda-nvcc), both ways."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.analyze.linkage import static_cuda_runtime
from tests.native_cuda.conftest import REPO, _require

pytestmark = pytest.mark.native
SOURCES = REPO / "tests" / "data" / "cuda"
CUDA = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / \
    "nvidia" / "cu13"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, cuda_build: Path) -> Path:
    nvcc = CUDA / "bin" / "nvcc"
    _require(f"no nvcc at {nvcc}: `make install` installs nvidia-cuda-nvcc", nvcc.is_file())
    out = tmp_path_factory.mktemp("nvcc")
    devlib = out / "devlib"  # the link-time name the wheel does not ship
    devlib.mkdir()
    (devlib / "libcudart.so").symlink_to(CUDA / "lib" / "libcudart.so.13")
    env = {**os.environ, "PATH": f"{nvcc.parent}:{os.environ['PATH']}"}

    def run(*cmd: str) -> None:
        proc = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr[-3000:]}"

    run("nvcc", "-cudart", "static", "-o", "count_static", str(SOURCES / "count.cu"))
    run("nvcc", "-cudart", "shared", "-L", str(devlib), "-o", "count_shared", str(SOURCES / "count.cu"))
    shutil.copy(out / "count_static", out / "count_stripped")
    run("strip", "count_stripped")
    run("nvcc", "-shared", "-Xcompiler", "-fPIC", "-cudart", "static", "-o", "libscale.so",
        str(SOURCES / "scale_lib.cu"))
    run("cc", "-o", "uses_lib", str(SOURCES / "uses_lib.c"), "-L.", "-lscale", "-Wl,-rpath,$ORIGIN")
    return out


def _run(program: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    proc = subprocess.run([sys.executable, "-m", "fakegpu", "run", "--devices", "a100:2", "--", str(program)],
                          env={**env, "TMPDIR": str(tmp)}, capture_output=True, text=True, timeout=120)
    assert list(tmp.iterdir()) == [], "fakegpu run left its folder behind"
    return proc


@pytest.mark.parametrize("name, evidence", [
    ("count_static", "it defines __cudaRegisterFatBinary, cudaGetDeviceCount, cudaLaunchKernel, cudaMalloc"),
    ("count_stripped", "it is stripped, holds the static runtime's shared-memory names"),
])
def test_a_static_runtime_is_refused_with_the_fix(built: Path, tmp_path: Path, name: str, evidence: str) -> None:
    proc = _run(built / name, tmp_path)
    assert proc.returncode == 1 and proc.stdout == ""  # refused before it ran
    assert f"{built / name} links the CUDA runtime statically: {evidence}" in proc.stderr
    assert "nvcc -cudart shared" in proc.stderr and "CMAKE_CUDA_RUNTIME_LIBRARY Shared" in proc.stderr


def test_a_static_runtime_in_a_library_the_program_loads_is_refused(built: Path, tmp_path: Path) -> None:
    proc = _run(built / "uses_lib", tmp_path)
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"(in {built / 'libscale.so'}, which it loads)" in proc.stderr


def test_the_same_program_with_the_shared_runtime_runs(built: Path, tmp_path: Path) -> None:
    proc = _run(built / "count_shared", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["count 2 rc 0 name NVIDIA A100-SXM4-80GB", "launch 0"]


def test_what_is_not_a_static_runtime(built: Path, tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    for path in (Path(sys.executable).resolve(), built / "count_shared", REPO / "native" / "build" / "lib" /
                 "libcudart.so.13", script, tmp_path / "absent"):
        assert static_cuda_runtime(path) is None, path
