"""fakecuda's own errors. Errors a PyTorch program sees (OOM, invalid ordinal) are raised as torch's types
by the mode; these are the model's, usable without torch."""

from __future__ import annotations

from fakegpu.errors import FakeGPUError


class AllocatorConfigError(FakeGPUError):
    """PYTORCH_CUDA_ALLOC_CONF does not parse, or asks for a backend the model does not have."""

    code = "alloc-conf-invalid"


class ModelOutOfMemory(FakeGPUError):
    """The allocator model ran out of device memory; carries PyTorch's message text exactly.

    The torch layer re-raises it as torch.cuda.OutOfMemoryError; the model stays importable without torch.
    """

    code = "cuda-out-of-memory"

    def __init__(self, message: str, device: int, requested: int) -> None:
        super().__init__(message)
        self.device = device
        self.requested = requested


class FakeCudaNotActive(FakeGPUError):
    """A fakecuda API was used before fakegpu.init(runtime="fakecuda") (or the auto hook) activated it."""

    code = "fakecuda-inactive"


# PyTorch's text for cudaErrorUnknown, what the driver answers on a GPU that fell off the bus (torch 2.15's
# c10 CUDA check; the first line is the same in every release fakecuda supports).
GPU_LOST_MESSAGE = ("CUDA error: unknown error\nSearch for `cudaErrorUnknown' in "
                    "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\n")


class ModelGPULost(FakeGPUError):
    """The run's fault board says the device's GPU fell off the bus; the torch layer raises torch's error."""

    code = "cuda-gpu-lost"

    def __init__(self, device: int) -> None:
        super().__init__(GPU_LOST_MESSAGE)
        self.device = device
