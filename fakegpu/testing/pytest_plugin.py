"""pytest plugin: the `fakegpu_container` fixture, a factory of started FakeGPUContainers removed after the
test; at the session's end anything left with this session's label is removed too (no Ryuk).

    def test_two_gpus(fakegpu_container):
        c = fakegpu_container(devices="h100:2")
        assert c.python("import torch; print(torch.cuda.device_count())").output.strip() == "2"

Enabled by the `pytest11` entry point `fakegpu = "fakegpu.testing.pytest_plugin"`,
or `-p fakegpu.testing.pytest_plugin`.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def fakegpu_container():
    from fakegpu.testing.container import FakeGPUContainer

    started: list[FakeGPUContainer] = []

    def make(image: str = "fakegpu/pytorch:latest", devices: str = "a100:2", **kwargs) -> FakeGPUContainer:
        container = FakeGPUContainer(image, devices=devices, **kwargs)
        started.append(container)
        return container.start()

    yield make
    for container in started:
        container.stop()


def pytest_sessionfinish(session, exitstatus) -> None:
    import sys

    module = sys.modules.get("fakegpu.testing.container")
    if module is not None:  # only when a test used it: no Docker contact otherwise
        module.cleanup()
