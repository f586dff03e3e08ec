"""fakegpu.testing in a user's CI: a few lines with the pytest fixture; reports read back; cleanup by label."""

from __future__ import annotations

import pytest

from fakegpu.devices import resolve_devices
from fakegpu.testing import container as tc

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_fixture_gives_a_container_whose_torch_sees_the_fake_gpus(docker_client, node_image, fakegpu_container):
    c = fakegpu_container(node_image, devices="h100:2")
    assert c.nvidia_smi("-L").splitlines()[1].endswith(f"(UUID: {resolve_devices('h100:2', seed='0')[1].uuid})")
    result = c.python("import torch; x = torch.ones(1024, 1024, device='cuda:1'); "
                      "print(torch.cuda.device_count(), torch.cuda.get_device_name(1), torch.cuda.memory_allocated(1))")
    assert result.exit_code == 0, result.output
    assert result.output.split()[:2] == ["2", "NVIDIA"] and result.output.split()[-1] == str(4 << 20)
    reports = c.reports()
    assert len(reports) == 1 and reports[0]["devices"][1]["peak_allocated_bytes"] == 4 << 20
    container_id = c.get_wrapped_container().id
    assert docker_client.containers.get(container_id).labels[tc.LABEL] == tc.SESSION


def test_the_node_image_charges_through_fakecudas_cxx_extension(node_image, fakegpu_container):
    """The image has no compiler: it carries the extension its host built for the same torch wheel
    (images/build-pytorch.sh), so a node runs the C++ hook and allocator model, not the slower Python path."""
    c = fakegpu_container(node_image, devices="a100")
    result = c.python("import torch, fakegpu.fakecuda as fc; x = torch.ones(8, device='cuda'); "
                      "print(type(fc._active['charges']).__name__, "
                      "type(fc.active_runtime().devices[0].allocator).__name__, torch.cuda.memory_allocated())")
    assert result.exit_code == 0, result.output
    assert result.output.split()[-3:] == ["ChargeHook", "CxxDeviceAllocator", "512"]


def test_context_manager_and_cleanup_by_label(docker_client, node_image):
    with tc.FakeGPUContainer(node_image, devices="t4") as c:
        assert "Tesla T4" in c.nvidia_smi("-L")
    tc.cleanup()
    assert docker_client.containers.list(all=True, filters={"label": f"{tc.LABEL}={tc.SESSION}"}) == []


def test_a_bad_spec_fails_before_any_container_exists():
    with pytest.raises(Exception, match="Did you mean"):
        tc.FakeGPUContainer(devices="a10O:2")
