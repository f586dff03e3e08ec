"""fakecuda in a container under FakeGPU's runtime sees the GPUs the container was given (a device plugin's
NVIDIA_VISIBLE_DEVICES, a selection from the host's inventory), as the native shims and nvidia-smi do: it reads
the device table the runtime mounts, not only FAKEGPU_DEVICES (before, it showed one A100 whatever was allocated).
The node image (fakegpu/pytorch) runs fakecuda by default."""

from __future__ import annotations

import json

import pytest

from tests.cluster.conftest import node_image  # noqa: F401  (a fixture)
from tests.container.conftest import LABEL, RUNTIME, docker
from tests.container.test_acceptance_docker import need_native

pytestmark = [pytest.mark.docker, pytest.mark.torch, pytest.mark.usefixtures("fakegpu_runtime")]

PROBE = """
import json, re, subprocess, torch
import fakegpu.fakecuda as fc
smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout
props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
print(json.dumps({"fakecuda": fc.is_active(),
                  "torch": [[p.name, "GPU-" + str(p.uuid), p.total_memory] for p in props],
                  "smi": re.findall(r"UUID: (GPU-[0-9a-f-]+)", smi)}))
"""


def test_fakecuda_sees_the_allocated_gpus_of_the_hosts_inventory(node_image, host_inventory):  # noqa: F811
    need_native()
    host = host_inventory("a100:2,h100:2")
    # Two of four, named as a device plugin names them (UUIDs), out of host order: the container gets them in
    # host order, numbered 0 and 1.
    asked = f"{host[3].uuid},{host[1].uuid}"
    out = docker("run", "--rm", "--label", LABEL, f"--runtime={RUNTIME}", "-e", f"NVIDIA_VISIBLE_DEVICES={asked}",
                 node_image, "python3", "-c", PROBE, timeout=240)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["fakecuda"]
    assert seen["smi"] == [host[1].uuid, host[3].uuid]
    assert [uuid for _, uuid, _ in seen["torch"]] == seen["smi"]
    assert [name for name, _, _ in seen["torch"]] == [host[1].profile.name, host[3].profile.name]
