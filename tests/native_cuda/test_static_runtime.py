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
from tests.container.conftest import base_image  # noqa: F401  (a fixture: the offline base image, made if missing)
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


def _doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fakegpu", "doctor", "--json", *args], capture_output=True,
                          text=True, timeout=180)


def _program_check(proc: subprocess.CompletedProcess[str]) -> dict:
    import json

    return next(r for r in json.loads(proc.stdout)["data"] if r["name"] == "program")


@pytest.mark.parametrize("name, status", [("count_static", "fail"), ("count_stripped", "fail"),
                                          ("uses_lib", "fail"), ("count_shared", "pass")])
def test_doctor_says_which_programs_fakegpu_can_serve(built: Path, name: str, status: str) -> None:
    proc = _doctor("--program", str(built / name))
    check = _program_check(proc)
    assert check["status"] == status, check
    if status == "fail":
        assert proc.returncode != 0
        assert "links the CUDA runtime statically" in check["detail"] and "nvcc -cudart shared" in check["fix"]


@pytest.mark.docker
def test_doctor_checks_a_program_inside_an_image(built: Path, tmp_path: Path, base_image: str) -> None:  # noqa: F811
    # The container runtime cannot serve such a program either: doctor looks inside the image before a run.
    from tests.container.conftest import LABEL

    context = tmp_path / "context"
    context.mkdir()
    for name in ("count_static", "count_shared"):
        shutil.copy(built / name, context / name)
    (context / "Dockerfile").write_text(f"FROM {base_image}\nCOPY count_static count_shared /opt/app/\n"
                                        "RUN ln -s /opt/app/count_static /usr/local/bin/app\n")
    tag = f"fakegpu-test/static-runtime:{os.getpid()}"
    build = subprocess.run(["docker", "build", "--label", LABEL, "-t", tag, str(context)], capture_output=True,
                           text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    try:
        before = subprocess.run(["docker", "ps", "-aq"], capture_output=True, text=True).stdout
        found = _program_check(_doctor("--program", "app", "--image", tag))  # on the image's PATH, via a link
        assert found["status"] == "fail" and found["detail"].startswith(
            "/usr/local/bin/app links the CUDA runtime statically"), found
        assert _program_check(_doctor("--program", "/opt/app/count_shared", "--image", tag))["status"] == "pass"
        missing = _program_check(_doctor("--program", "/opt/app/nothing", "--image", tag))
        assert missing["status"] == "fail" and "not found in the image" in missing["detail"]
        assert subprocess.run(["docker", "ps", "-aq"], capture_output=True, text=True).stdout == before
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
