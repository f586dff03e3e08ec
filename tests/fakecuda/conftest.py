"""fakecuda tests that import torch are marked `torch`; each active-fakecuda test gets a fresh runtime."""

from __future__ import annotations

import pytest


@pytest.fixture
def fakecuda():
    torch = pytest.importorskip("torch")
    import fakegpu.fakecuda as fc

    def start(devices: str = "a100:2"):
        return fc.activate(devices)

    yield start
    fc.deactivate()
    # torch's own functions are back (ours are bound methods of FakeCudaApi)
    assert torch.cuda.is_available.__module__ == "torch.cuda" and not fc.is_active()
