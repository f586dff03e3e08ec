"""fakegpu.testing: fake GPUs in anyone's CI: a testcontainers-python module and a pytest plugin."""

from fakegpu.testing.container import FakeGPUContainer, cleanup

__all__ = ["FakeGPUContainer", "cleanup"]
