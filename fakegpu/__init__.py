"""FakeGPU: configurable fake NVIDIA GPUs for machines that have none.

Importing this package stays cheap (no torch, no docker, no YAML): the OCI hook imports it at every
container start.
"""

from __future__ import annotations

__version__ = "0.1.0"


def init(runtime: str = "fakecuda", devices: str | None = None) -> object:
    """Turn on a fake CUDA runtime in this process, e.g. `fakegpu.init(devices="a100:2")`.

    Imported lazily so `import fakegpu` never pulls in torch.
    """
    from fakegpu.fakecuda import init as _init

    return _init(runtime, devices)
