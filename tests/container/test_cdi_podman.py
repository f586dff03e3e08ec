"""FakeGPU's CDI spec applied by a CDI implementation nobody here wrote: podman 4.3 (Debian's), which resolves
`--device fakegpu.dev/gpu=NAME` with its embedded CDI library, as containerd 1.7+ and CRI-O do for the device
plugin's cdi-cri names. The container gets exactly the named GPUs or MIG device; one that names none gets nothing.
podman runs with storage of its own under a temporary folder; the spec goes where podman 4.3 reads specs
(/var/run/cdi; the version has no option for another folder) and is removed afterwards."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fakegpu.devices import resolve_devices
from tests.conftest import mounts_under, run_cli
from tests.container.conftest import need

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("fakegpu_runtime")]

SPEC_PATH = Path("/var/run/cdi/fakegpu.dev-gpu.json")
INVENTORY = "a100:3,a100:1:mig=3g.40gb+2g.20gb"
# This machine's root lacks CAP_SYS_RESOURCE: podman's default rlimits cannot be set.
LIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]


@pytest.fixture(scope="module")
def podman(base_image):
    need(shutil.which("podman") is not None, "podman is needed (Debian's podman; .ci/run installs it)")
    need(not SPEC_PATH.exists(), f"{SPEC_PATH} exists already; not replacing a CDI spec of this machine")
    folder = Path(f"/tmp/fg-podman-{os.getpid()}")
    storage = ["--root", str(folder / "root"), "--runroot", str(folder / "run")]

    def podman(*args: str, timeout: int = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["podman", *storage, *args], capture_output=True, text=True, timeout=timeout)

    try:
        save = subprocess.Popen(["docker", "save", base_image], stdout=subprocess.PIPE)
        loaded = subprocess.run(["podman", *storage, "load", "-q"], stdin=save.stdout, capture_output=True,
                                text=True, timeout=300)
        save.stdout.close()
        assert save.wait(timeout=60) == 0 and loaded.returncode == 0, loaded.stderr
        result = run_cli("cdi", "generate", "--devices", INVENTORY, "--output", str(SPEC_PATH))
        assert result.returncode == 0, result.stderr
        yield podman
    finally:
        SPEC_PATH.unlink(missing_ok=True)
        subprocess.run(["podman", *storage, "rm", "-a", "-f"], capture_output=True, timeout=120)
        for point in mounts_under(folder):
            subprocess.run(["umount", "-l", point], check=False)
        shutil.rmtree(folder, ignore_errors=True)


def _listed(podman, base_image, *devices: str) -> list[str]:
    flags = [a for d in devices for a in ("--device", f"fakegpu.dev/gpu={d}")]
    result = podman("run", "--rm", *LIMITS, *flags, base_image, "nvidia-smi", "-L")
    assert result.returncode == 0, result.stderr
    return re.findall(r"UUID: ((?:GPU|MIG)-[0-9a-f-]+)\)", result.stdout)


def test_cdi_devices_by_uuid_and_index_are_the_containers_gpus(podman, base_image):
    gpus = resolve_devices(INVENTORY, seed="0")
    assert _listed(podman, base_image, gpus[2].uuid, "0") == [gpus[0].uuid, gpus[2].uuid]
    # a GPU named twice, by index and by UUID, comes once
    assert _listed(podman, base_image, "1", gpus[1].uuid) == [gpus[1].uuid]
    assert _listed(podman, base_image, "all") == [u for g in gpus for u in (g.uuid, *(m.uuid for m in g.mig or ()))]


def test_a_cdi_mig_device_is_the_containers_only_slice(podman, base_image):
    board = resolve_devices(INVENTORY, seed="0")[3]
    assert _listed(podman, base_image, "3:1") == [board.uuid, board.mig[1].uuid]
    assert _listed(podman, base_image, board.mig[0].uuid) == [board.uuid, board.mig[0].uuid]


def test_a_container_naming_no_cdi_device_gets_nothing(podman, base_image):
    result = podman("run", "--rm", *LIMITS, base_image, "sh", "-c", "command -v nvidia-smi; ls /dev | grep -c nvidia")
    assert result.stdout.split() == ["0"], (result.stdout, result.stderr)
