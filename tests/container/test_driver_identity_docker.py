"""One driver per host (issue 21, point 1): in a container and under `fakegpu run`, by default and with a chosen
CUDA 12 driver, NVML's driver and CUDA versions, cuDriverGetVersion, the nvidia-smi banner and
/proc/driver/nvidia/version agree, the container's driver libraries are named after it, and PyPI's CUDA 13 torch
refuses a 550 driver as on a real host."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.cluster.conftest import node_image  # noqa: F401  (a fixture)
from tests.conftest import REPO
from tests.container.conftest import BASE_IMAGE, LABEL, RUNTIME, docker
from tests.container.test_acceptance_docker import need_native

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("fakegpu_runtime")]

PROBE = REPO / "tests" / "data" / "probes" / "driver_identity.py"
DEFAULT = json.loads((REPO / "fakegpu" / "data" / "native_versions.json").read_text())["driver_version"]
# The driver branch's CUDA version, as cuDriverGetVersion and NVML give it and as the banner prints it.
CUDA = {"580": (13000, "13.0"), "550": (12040, "12.4"), "535": (12020, "12.2")}


def agree(seen: dict, driver: str, container: bool) -> None:
    number, text = CUDA[driver.split(".")[0]]
    assert seen["nvml_driver"] == seen["smi_driver"] == seen["proc_driver"] == driver, seen
    assert seen["nvml_cuda"] == seen["cuda_driver"] == number and seen["smi_cuda"] == text, seen
    assert seen["proc_gpus"] == ["0000:18:00.0", "0000:2a:00.0"], seen
    if container:  # as a real driver installs them; on the host the checkout's build keeps its sonames
        assert {f"libcuda.so.{driver}", f"libnvidia-ml.so.{driver}"} <= set(seen["library_names"]), seen


def in_container(*env: str) -> dict:
    need_native()
    opts = [x for e in ("FAKEGPU_DEVICES=a100:2", *env) for x in ("-e", e)]
    out = docker("run", "--rm", "--label", LABEL, f"--runtime={RUNTIME}", *opts, "-v", f"{PROBE}:/probe.py:ro",
                 BASE_IMAGE, "python3", "/probe.py", timeout=180)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def under_run(*args: str) -> dict:
    need_native()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    out = subprocess.run([sys.executable, "-m", "fakegpu", "run", "--devices", "a100:2", *args, "--",
                          sys.executable, str(PROBE)], capture_output=True, text=True, env=env, timeout=180)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("driver", [None, "550.127.08"])
def test_one_driver_in_a_container_and_under_run(driver: str | None) -> None:
    agree(in_container(*([f"FAKEGPU_DRIVER_VERSION={driver}"] if driver else [])), driver or DEFAULT, True)
    agree(under_run(*(["--driver", driver] if driver else [])), driver or DEFAULT, False)


def test_the_host_setting_chooses_the_driver_and_a_container_may_override_it(site_config) -> None:
    site_config({"driver_version": "535.104.05"})
    agree(in_container(), "535.104.05", True)
    agree(in_container("FAKEGPU_DRIVER_VERSION=550.127.08"), "550.127.08", True)


def test_docker_exec_processes_see_the_same_driver() -> None:
    # docker exec starts processes with the image's environment, not the one the runtime spliced into
    # config.json: the device table tells them.
    need_native()
    started = docker("run", "-d", "--rm", "--label", LABEL, f"--runtime={RUNTIME}", "-e", "FAKEGPU_DEVICES=a100:2",
                     "-v", f"{PROBE}:/probe.py:ro", BASE_IMAGE, "sleep", "120", check=True)
    container = started.stdout.strip()
    try:
        seen = json.loads(docker("exec", "-e", "FAKEGPU_DEVICE_TABLE=", container, "python3", "/probe.py",
                                 check=True).stdout)
        agree(seen, DEFAULT, True)
    finally:
        docker("rm", "-f", container)


def test_a_cuda_13_torch_refuses_a_550_driver_in_a_container(node_image: str) -> None:  # noqa: F811
    # Native mode (FAKEGPU_RUNTIME unset): the image's CUDA 13 build of PyPI's torch on FakeGPU's libcuda.
    need_native()
    code = "import torch; print(torch.version.cuda); torch.zeros(1, device='cuda')"
    out = docker("run", "--rm", "--label", LABEL, f"--runtime={RUNTIME}", "-e", "FAKEGPU_RUNTIME=", "-e",
                 "FAKEGPU_DEVICES=a100:1", "-e", "FAKEGPU_DRIVER_VERSION=550.127.08", node_image, "python3", "-c",
                 code, timeout=180)
    assert out.returncode != 0 and out.stdout.startswith("13."), out.stdout + out.stderr
    assert "The NVIDIA driver on your system is too old (found version 12040)" in out.stderr, out.stderr
    ok = docker("run", "--rm", "--label", LABEL, f"--runtime={RUNTIME}", "-e", "FAKEGPU_RUNTIME=", "-e",
                "FAKEGPU_DEVICES=a100:1", node_image, "python3", "-c", code, timeout=180)
    assert ok.returncode == 0, ok.stderr
