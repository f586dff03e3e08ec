"""The device plugin's Allocate answer, applied as the kubelet applies it (the container's environment), on the
machine's real Docker Engine with FakeGPU's runtime: the container sees exactly the GPUs, or the MIG device, the
plugin handed out. The plugin reads the node's inventory from the runtime's settings, as on a node."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.container.conftest import run
from tests.k8s.fake_kubelet import FakeKubelet, Plugin

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("fakegpu_runtime")]


@pytest.fixture
def node(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dp")
    kubelet = FakeKubelet(folder).start()
    plugins: list[Plugin] = []

    def start(*args: str) -> tuple[FakeKubelet, Plugin]:
        board = folder / "board"
        process = subprocess.Popen([sys.executable, "-m", "fakegpu", "device-plugin", "--plugin-dir", str(folder),
                                    "--state-dir", str(board), *args],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        plugins.append(Plugin(process, board, ""))
        return kubelet, plugins[-1]

    yield start
    for p in plugins:
        code, err = p.stop()
        assert code == 0, err
    kubelet.stop()


def _uuids(listing: str) -> list[str]:
    return re.findall(r"UUID: ((?:GPU|MIG)-[0-9a-f-]+)\)", listing)


def test_allocated_gpus_are_the_containers_gpus(host_inventory, node):
    inventory = host_inventory("t4:4,h100:4")
    kubelet, _ = node()
    (request,) = kubelet.registrations(1).values()
    stub, pb2 = kubelet.plugin(request.endpoint), kubelet.pb2
    ids = [g.uuid for g in inventory]
    (pref,) = stub.GetPreferredAllocation(pb2.PreferredAllocationRequest(container_requests=[
        pb2.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=2)]),
        timeout=10).container_responses
    assert list(pref.deviceIDs) == ids[4:6]  # two H100s of one NVLink domain
    (edits,) = stub.Allocate(pb2.AllocateRequest(container_requests=[
        pb2.ContainerAllocateRequest(devices_ids=pref.deviceIDs)]), timeout=10).container_responses
    env = [a for k, v in edits.envs.items() for a in ("-e", f"{k}={v}")]
    result = run(*env, "--", "nvidia-smi", "-L")
    assert result.returncode == 0, result.stderr
    assert _uuids(result.stdout) == ids[4:6]
    assert result.stdout.count("H100") == 2


def test_an_allocated_mig_device_is_the_containers_only_slice(host_inventory, node):
    inventory = host_inventory("a100:1:mig=3g.40gb+2g.20gb+1g.10gb")
    kubelet, _ = node("--mig-strategy", "mixed")
    got = kubelet.registrations(3)
    request = got["nvidia.com/mig-2g.20gb"]
    stub, pb2 = kubelet.plugin(request.endpoint), kubelet.pb2
    (slice_id,) = [m.uuid for m in inventory[0].mig if m.profile.name == "2g.20gb"]
    (edits,) = stub.Allocate(pb2.AllocateRequest(container_requests=[
        pb2.ContainerAllocateRequest(devices_ids=[slice_id])]), timeout=10).container_responses
    assert dict(edits.envs) == {"NVIDIA_VISIBLE_DEVICES": slice_id}
    result = run("-e", f"NVIDIA_VISIBLE_DEVICES={slice_id}", "--", "nvidia-smi", "-L")
    assert result.returncode == 0, result.stderr
    assert _uuids(result.stdout) == [inventory[0].uuid, slice_id]
    assert "MIG 2g.20gb" in result.stdout and "3g.40gb" not in result.stdout
