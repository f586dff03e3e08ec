"""The differential harness needs what native mode's torch tests need: FakeGPU's CUDA build and a CUDA torch."""

from tests.native_cuda.conftest import cuda_build, cuda_torch  # noqa: F401  (fixtures used here)
