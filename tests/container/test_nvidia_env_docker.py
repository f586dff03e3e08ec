"""Issue 21, point 3, on the machine's real Docker Engine: NVIDIA's container variables, drop-in. The host gets
an inventory (`fakegpu runtime install --devices`), NVIDIA_VISIBLE_DEVICES selects from it as under NVIDIA's
runtime (host UUIDs and bus ids, renumbered from 0), NVIDIA_DRIVER_CAPABILITIES decides the libraries, and an
image built like NVIDIA's CUDA images (ENV NVIDIA_VISIBLE_DEVICES=all) gets the inventory. Expected values come
from `fakegpu.devices`, never from literals here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fakegpu.devices import resolve_devices
from tests.container.conftest import LABEL, NATIVE, RUNTIME, SITE_CONFIG, build_image, docker, need, run

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("fakegpu_runtime")]
STATE_ROOT = Path("/run/fakegpu")
SPEC = "a100:4"
LIB = "/usr/lib/x86_64-linux-gnu"


@pytest.fixture
def inventory(host_inventory):
    return host_inventory(SPEC)


def smi_lines(devices, host: list[int]) -> list[str]:
    """`nvidia-smi -L` in a container given host GPUs `host`: renumbered from 0, the host's UUIDs."""
    return [f"GPU {i}: {devices[h].profile.name} (UUID: {devices[h].uuid})" for i, h in enumerate(host)]


def state_folders() -> set[str]:
    return {e.name for e in STATE_ROOT.iterdir() if e.is_dir()} if STATE_ROOT.exists() else set()


@pytest.mark.parametrize("injection", ["runtime", "hook"])
def test_indices_select_from_the_inventory_keeping_the_hosts_identities(inventory, injection):
    if injection != "runtime":
        from fakegpu_hook.settings import update_config

        update_config(str(SITE_CONFIG), {"injection": injection})
    result = run("-e", "NVIDIA_VISIBLE_DEVICES=0,2", "--", "nvidia-smi", "-L")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == smi_lines(inventory, [0, 2])
    query = run("-e", "NVIDIA_VISIBLE_DEVICES=2,0", "--", "sh", "-c",
                "nvidia-smi --query-gpu=index,uuid,pci.bus_id,serial --format=csv,noheader; ls /dev | grep nvidia")
    assert query.returncode == 0, query.stderr
    lines = query.stdout.splitlines()
    assert lines[:2] == [f"{i}, {inventory[h].uuid}, {inventory[h].pci_bus_id}, {inventory[h].serial}"
                         for i, h in enumerate((0, 2))]
    # The host's device nodes: /dev/nvidia0 and /dev/nvidia2, as NVIDIA's runtime gives them.
    assert sorted(lines[2:]) == ["nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia2", "nvidiactl"]


def test_uuids_and_indices_mixed(inventory):
    result = run("-e", f"NVIDIA_VISIBLE_DEVICES={inventory[3].uuid},1", "--", "nvidia-smi", "-L")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == smi_lines(inventory, [1, 3])


def test_all_without_fakegpu_devices_shows_the_inventory(inventory):
    result = run("-e", "NVIDIA_VISIBLE_DEVICES=all", "--", "nvidia-smi", "-L")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == smi_lines(inventory, [0, 1, 2, 3])


def test_void_injects_nothing(inventory):
    result = run("-e", "NVIDIA_VISIBLE_DEVICES=void", "--", "sh", "-c",
                 f"ls /dev /run {LIB} /usr/bin | grep -E 'nvidia|fakegpu|libcuda'; command -v nvidia-smi; echo end")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["end"]


def test_none_gives_the_driver_files_and_no_gpu(inventory):
    result = run("-e", "NVIDIA_VISIBLE_DEVICES=none", "--", "sh", "-c",
                 "nvidia-smi -L; echo rc=$?; ls /dev | grep nvidia")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["No devices were found", "rc=6"]  # nvidia-smi's words and code with no GPU
    assert sorted(lines[2:]) == ["nvidia-uvm", "nvidia-uvm-tools", "nvidiactl"]


@pytest.mark.parametrize(("value", "named"), [
    ("0,7", "device '7': no GPU has this index (they are 0..3)"),
    ("GPU-00000000-0000-0000-0000-000000000000", "no GPU has this UUID"),
    ("MIG-0c1c0d9c-dd6b-5d85-9d0d-2e3e4b7e7d0e", "no MIG device has this UUID"),
])
def test_an_unknown_entry_fails_the_start_naming_it_and_the_inventory(inventory, value, named):
    before = state_folders()
    result = run("-e", f"NVIDIA_VISIBLE_DEVICES={value}", "--", "true")
    assert result.returncode != 0
    assert "NVIDIA_VISIBLE_DEVICES" in result.stderr and named in result.stderr
    assert f"inventory '{SPEC}' holds 4 GPUs: 0 {inventory[0].uuid}" in result.stderr
    assert state_folders() <= before
    # --rm: docker removed what it had created; nothing of the failed start runs or is mounted.
    assert docker("ps", "-aq", "--filter", f"label={LABEL}").stdout.strip() == ""


def test_a_failed_start_leaves_no_running_container_and_no_state(inventory):
    name = f"fakegpu-test-bad-entry-{os.getpid()}"
    result = docker("run", "--name", name, "--label", LABEL, f"--runtime={RUNTIME}", "-e",
                    "NVIDIA_VISIBLE_DEVICES=9", "fakegpu/debian-base:bookworm", "true")
    try:
        assert result.returncode != 0 and "device '9'" in result.stderr
        state = docker("inspect", "-f", "{{.State.Status}} {{.State.Pid}} {{.Id}}", name, check=True).stdout.split()
        assert state[:2] == ["created", "0"]  # docker keeps its record; no process was ever started
        assert not (STATE_ROOT / state[2]).exists() and state[2] not in Path("/proc/self/mountinfo").read_text()
    finally:
        docker("rm", "-f", name)


@pytest.mark.parametrize(("capabilities", "smi", "cuda", "uvm"), [
    ("utility", True, False, False),
    ("compute", False, True, True),
    ("compute,utility", True, True, True),
    ("", True, True, True),  # empty: the default, utility and compute
])
def test_driver_capabilities_decide_the_libraries(inventory, capabilities, smi, cuda, uvm):
    script = (f"command -v nvidia-smi; ls {LIB}/libnvidia-ml.so.1 {LIB}/libcuda.so.1 {LIB}/libcudart.so.13 "
              "/dev/nvidia-uvm /dev/nvidia0 2>/dev/null; true")
    result = run("-e", "NVIDIA_VISIBLE_DEVICES=0", "-e", f"NVIDIA_DRIVER_CAPABILITIES={capabilities}", "--",
                 "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    found = set(result.stdout.split())
    assert ("/usr/bin/nvidia-smi" in found) == smi and (f"{LIB}/libnvidia-ml.so.1" in found) == smi
    assert (f"{LIB}/libcuda.so.1" in found) == cuda and (f"{LIB}/libcudart.so.13" in found) == cuda
    assert ("/dev/nvidia-uvm" in found) == uvm and "/dev/nvidia0" in found


def test_an_unknown_capability_fails_the_start(inventory):
    result = run("-e", "NVIDIA_VISIBLE_DEVICES=all", "-e", "NVIDIA_DRIVER_CAPABILITIES=compute,gpu", "--", "true")
    assert result.returncode != 0 and "unknown capability 'gpu'" in result.stderr


def test_an_image_built_like_nvidias_cuda_images_gets_the_inventory(inventory):
    # nvidia/cuda's Dockerfiles set these two; under NVIDIA's runtime such an image gets every GPU.
    image = build_image("cuda-like", "ARG BASE\nFROM $BASE\nENV NVIDIA_VISIBLE_DEVICES=all "
                                     "NVIDIA_DRIVER_CAPABILITIES=compute,utility\n")
    result = run("--", "nvidia-smi", "-L", image=image)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == smi_lines(inventory, [0, 1, 2, 3])
    # `docker run -e` comes after the image's ENV: the last one wins, as runc gives it to the process.
    one = run("-e", "NVIDIA_VISIBLE_DEVICES=3", "--", "nvidia-smi", "-L", image=image)
    assert one.returncode == 0, one.stderr
    assert one.stdout.splitlines() == smi_lines(inventory, [3])
    # FAKEGPU_DEVICES stays the explicit override.
    own = run("-e", "FAKEGPU_DEVICES=h100:2", "--", "nvidia-smi", "-L", image=image)
    assert own.stdout.splitlines() == [f"GPU {d.index}: {d.profile.name} (UUID: {d.uuid})"
                                       for d in resolve_devices("h100:2", seed="0")]


def test_without_an_inventory_all_gives_one_gpu(fakegpu_runtime):
    need(not SITE_CONFIG.exists(), f"{SITE_CONFIG} exists; not relying on its inventory")
    need((NATIVE / "bin" / "nvidia-smi").exists(), f"native build missing in {NATIVE}")
    result = run("-e", "NVIDIA_VISIBLE_DEVICES=all", "--", "nvidia-smi", "-L")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == smi_lines(resolve_devices("a100:1", seed="0"), [0])
