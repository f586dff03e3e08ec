"""The Kubernetes path end to end, with a real containerd (1.6, Debian's) driven over the CRI API as a kubelet
drives it: the device plugin (against a fake kubelet) allocates 2 of the node's 8 A100s; a pod sandbox with the
`fakegpu` runtime handler (what a RuntimeClass names; its containerd entry from fakegpu.k8s.node_config) runs a
container with Allocate's environment; nvidia-smi there lists exactly those 2 GPUs. A sandbox on the default
handler, given the same environment, sees no GPU."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.container.conftest import LABEL, RUN_ID, need
from tests.k8s.containerd import PAUSE_C, Pod, PrivateContainerd
from tests.k8s.fake_kubelet import FakeKubelet, Plugin

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.usefixtures("fakegpu_runtime")]


@pytest.fixture(scope="module")
def pause_image(tmp_path_factory):
    need(shutil.which("containerd") is not None and shutil.which("ctr") is not None,
         "containerd and ctr (Debian's containerd, with docker.io) are needed")
    folder = tmp_path_factory.mktemp("pause")
    (folder / "pause.c").write_text(PAUSE_C)
    subprocess.run(["cc", "-static", "-O2", "-o", str(folder / "pause"), str(folder / "pause.c")], check=True)
    (folder / "Dockerfile").write_text('FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n')
    tag = f"fakegpu-test/pause:{RUN_ID}"
    subprocess.run(["docker", "build", "-q", "--label", LABEL, "-t", tag, str(folder)], check=True,
                   capture_output=True, timeout=300)
    return tag


@pytest.fixture
def containerd(pause_image, base_image):
    from fakegpu_hook import front

    folder = Path(f"/tmp/fg-cri-{os.getpid()}")  # short: containerd's sockets live here
    cri = PrivateContainerd(folder)
    try:
        cri.start(f"docker.io/{pause_image}", os.path.join(front.default_front_dir(), front.RUNTIME_FRONT))
        cri.import_image(pause_image)
        cri.import_image(base_image)
        yield cri
    finally:
        cri.stop()


@pytest.fixture
def allocated(host_inventory, tmp_path_factory):
    """2 of the node's 8 A100s, as the device plugin allocates them to a container."""
    inventory = host_inventory("a100:8")
    folder = tmp_path_factory.mktemp("plugin")
    kubelet = FakeKubelet(folder).start()
    process = subprocess.Popen([sys.executable, "-m", "fakegpu", "device-plugin", "--plugin-dir", str(folder),
                                "--state-dir", str(folder / "board")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    plugin = Plugin(process, folder / "board", "a100:8")
    try:
        (request,) = kubelet.registrations(1).values()
        stub, pb2 = kubelet.plugin(request.endpoint), kubelet.pb2
        ids = [g.uuid for g in inventory]
        (edits,) = stub.Allocate(pb2.AllocateRequest(container_requests=[
            pb2.ContainerAllocateRequest(devices_ids=[ids[3], ids[6]])]), timeout=10).container_responses
        yield [ids[3], ids[6]], dict(edits.envs)
    finally:
        code, err = plugin.stop()
        kubelet.stop()
        assert code == 0, err


def test_a_pod_on_the_fakegpu_handler_sees_the_allocated_gpus(containerd, allocated, base_image):
    from fakegpu_hook.settings import load_settings

    state_root = load_settings().state_root
    want, envs = allocated
    pods, containers = [], []
    try:
        pods = [Pod(containerd, "gpu-pod", "fakegpu"), Pod(containerd, "plain-pod", "")]
        containers = [p.run("main", f"docker.io/{base_image}", ["sleep", "600"], envs) for p in pods]
        code, out, err = pods[0].exec(containers[0], ["nvidia-smi", "-L"])
        assert code == 0, (out, err, containerd.logs())
        assert re.findall(r"UUID: (GPU-[0-9a-f-]+)\)", out) == want
        assert out.count("A100") == 2
        # the runtime keeps the container's device table and state on the host while it runs
        assert os.path.isdir(f"{state_root}/{containers[0]}")
        code, out, err = pods[1].exec(containers[1], ["sh", "-c", "command -v nvidia-smi; ls /dev | grep -c nvidia"])
        assert out.split() == ["0"], (code, out, err)  # no nvidia-smi, no device nodes
        assert not os.path.exists(f"{state_root}/{containers[1]}")
    finally:
        for p in pods:
            p.remove()
    # and removes them with the sandbox
    assert [c for c in containers if os.path.exists(f"{state_root}/{c}")] == []
