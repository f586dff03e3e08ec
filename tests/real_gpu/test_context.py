"""What a PyTorch process holds outside its tensors, against a real H200 (tests/data/gpu/h200/torch.json "points").

On the GPU NVML's per-process figure went 518 MiB at init, +92 at the first kernel, +66 with cuBLAS, +8 with cuDNN,
beyond the caching allocator's segments (the built-in workspace profiles, fakegpu/profiles/workspace_profiles.yaml).
Both modes must follow it checkpoint by checkpoint; cuMemGetInfo's free must follow it too, less one device-level
part FakeGPU does not model: the real driver's free memory is 9240576 bytes (8.8 MiB) lower than its per-process
figure explains, at every checkpoint.
"""

from __future__ import annotations

import pytest

from fakegpu.profiles.workspace_profiles import (
    LAZY_PARTS,
    cuda_context_bytes,
    lazy_context_bytes,
    non_pytorch_bytes,
)
from tests.real_gpu.conftest import TOOLS, fake_json, real

pytestmark = [pytest.mark.native, pytest.mark.torch, pytest.mark.slow]

MIB = 1 << 20
UNMODELED_DEVICE_BYTES = 9240576  # real free = CUDA total - (process figure + this), every checkpoint


def test_the_overhead_model_is_the_h200_measurement() -> None:
    points = real("torch.json")["points"]
    used = {k: p["nvml"]["process_used"] - p["reserved"] for k, p in points.items()}
    assert used["init"] == cuda_context_bytes((9, 0))
    assert used["first_tensor"] - used["init"] == lazy_context_bytes((9, 0), "first_launch")
    assert used["matmul_fp32"] - used["first_tensor"] == lazy_context_bytes((9, 0), "cublas")
    assert used["conv2d"] - used["matmul_fp32"] == lazy_context_bytes((9, 0), "cudnn")
    assert used["emptied"] == non_pytorch_bytes((9, 0), cudnn=True)
    assert LAZY_PARTS == ("first_launch", "cublas", "cudnn")


@pytest.mark.parametrize("mode", ["native", "fakecuda"])
def test_each_checkpoint_holds_what_the_gpu_held(mode: str, native_libs, torch211: str) -> None:
    fake = fake_json([torch211, str(TOOLS / "torch_memory.py"), "--points"], mode=mode)
    gpu = real("torch.json")["points"]
    assert list(fake) == list(gpu)
    for name, want in gpu.items():
        got = fake[name]
        # peaks within a step are the memory-fidelity tests' (test_native_memory.py, test_fakecuda_memory.py)
        for key in ("allocated", "reserved", "total"):
            assert got[key] == want[key], (name, key)
        assert got["free"] == want["free"] + UNMODELED_DEVICE_BYTES, name
        assert got["nvml"]["process_used"] == want["nvml"]["process_used"], name


def test_native_modes_derived_figures_are_the_python_models(native_libs, torch211: str) -> None:
    """Off sm_90 the lazy parts are derived (workspace_profiles.yaml); libcuda's table, generated from the same file
    (tools/gen_contract.py), must give the same figures (A100)."""
    fake = fake_json([torch211, str(TOOLS / "torch_memory.py"), "--points"], devices="a100")
    outside = {k: p["nvml"]["process_used"] - p["reserved"] for k, p in fake.items()}
    assert outside["init"] == cuda_context_bytes((8, 0))
    assert outside["first_tensor"] == cuda_context_bytes((8, 0)) + lazy_context_bytes((8, 0), "first_launch")
    assert outside["matmul_fp32"] == non_pytorch_bytes((8, 0))
    assert outside["emptied"] == non_pytorch_bytes((8, 0), cudnn=True)
