"""fakecuda on a CPU-only build of torch: Debian sid's python3-torch in fakegpu/torch-cpu:sid.

PyPI serves this machine CUDA builds only (2.10 and 2.15 are tested from there, test_torch_releases.py); a CPU
build has no CUDA compiled in at all (torch.version.cuda is None, no torch._C._cuda_* functions, no NCCL), so it is
the other kind of build fakecuda has to run on. images/build-torch-cpu.sh makes the image once (debootstrap and
Debian's archive, no registry) and reuses it; release_check.py and then fakecuda's unit tests (Debian's
python3-pytest) run in throwaway containers with this checkout mounted read-only and no network.
"""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from tests.conftest import REPO
from tests.fakecuda.test_torch_releases import assert_accepted

SCRIPT = REPO / "images" / "build-torch-cpu.sh"
IMAGE = "fakegpu/torch-cpu:sid"
BUILD_TIMEOUT_S = 900  # debootstrap + about 1.2 GB of packages; seconds when the image exists
CHECK_TIMEOUT_S = 420  # each of the two runs: about 10 s and 20 s here
SUPPORTED = ((2, 10), (2, 15))  # pyproject.toml's torch extra, both ends included


def build_image() -> dict[str, str]:
    """Build (or reuse) the image; its labels (torch, python3-torch and Python versions)."""
    build = subprocess.run([str(SCRIPT), IMAGE], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-4000:]
    labels = json.loads(subprocess.run(["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", IMAGE],
                                       capture_output=True, text=True, check=True, timeout=60).stdout)
    return labels


def run_in_image(docker_client, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """argv in a throwaway container: this checkout read-only at /src, no network, nothing written back."""
    name = f"fakegpu-torch-cpu-check-{uuid.uuid4().hex[:12]}"
    env = {"PYTHONDONTWRITEBYTECODE": "1", **env}
    cmd = ["docker", "run", "--rm", "--name", name, "--network", "none", "-v", f"{REPO}:/src:ro", "-w", "/src"]
    cmd += [arg for k, v in env.items() for arg in ("-e", f"{k}={v}")]
    try:
        proc = subprocess.run([*cmd, IMAGE, *argv], capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
    finally:
        # --rm removes it when it exits; a timeout kills only the client, so the container goes here.
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
    assert not docker_client.containers.list(all=True, filters={"name": name})
    return proc


@pytest.mark.docker
@pytest.mark.torch
@pytest.mark.slow
def test_fakecuda_acceptance_on_debian_cpu_build(docker_client):
    labels = build_image()
    proc = run_in_image(docker_client, ["python3", "tests/fakecuda/release_check.py"], {})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])

    assert res["torch_cuda"] is None, "not a CPU-only build"
    assert res["torch"] == labels["org.fakegpu.torch"]
    version = tuple(int(p) for p in res["torch"].split(".")[:2])
    assert SUPPORTED[0] <= version <= SUPPORTED[1]
    assert_accepted(res)


@pytest.mark.docker
@pytest.mark.torch
@pytest.mark.slow
def test_fakecuda_unit_tests_on_debian_cpu_build(docker_client):
    build_image()
    # Left out: the CLI tests (they run the installed `fakegpu` console script, which the image does not have),
    # this file and the release test (they drive docker / other interpreters from the host). The pytest plugin
    # fakegpu registers needs testcontainers, so it stays off. USE_LIBUV=0: this torch has no libuv
    # (fakegpu/fakecuda/README.md, "CPU-only builds"); torchrun's tests skip for that reason. The image has no C++
    # compiler, so fakecuda charges through its Python dispatch mode and Python allocator model here: this run is
    # that path's whole-suite check (the host's runs take the C++ ones); test_charge_hook.py, test_allocator_cxx.py
    # and test_storage_watch.py, which build the extension, stay out, as do the C++ hook's cases of test_threads.py
    # (their parameter is "cxx"; no other test's name holds it).
    left_out = ["test_entrypoints.py", "test_preflight.py", "test_torch_cpu_build.py", "test_torch_releases.py",
                "test_charge_hook.py", "test_allocator_cxx.py", "test_storage_watch.py"]
    argv = ["python3", "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:fakegpu", "-q", "-rfEs", "-k", "not cxx",
            "tests/fakecuda"]
    argv += [arg for f in left_out for arg in ("--deselect", f"tests/fakecuda/{f}")]
    env = {"PYTHONPATH": "/src", "USE_LIBUV": "0", "FAKEGPU_FAKECUDA_HOOK": "python"}
    proc = run_in_image(docker_client, argv, env)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    summary = proc.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
