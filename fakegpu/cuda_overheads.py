"""Device memory a CUDA process holds besides its tensors: the context and cuBLAS's workspace.

One model for every part of FakeGPU that accounts for it: the estimators predict it, fakecuda charges it to the
fake device on first use, so `fakegpu estimate-llm` and a fakecuda run agree on the same overhead.
"""

from __future__ import annotations

MIB = 1 << 20


def cuda_context_bytes(compute_capability: tuple[int, int]) -> int:
    """Device memory a PyTorch process's CUDA context (module images, lazy loading on) costs, outside torch.

    Typical nvidia-smi readings of an idle `torch.cuda.init()` process with CUDA 12: 300-600 MiB, growing with
    architecture generation because the fat binaries carry more kernels per SM version.
    """
    major, _ = compute_capability
    if major < 7:
        return 250 * MIB
    if major == 7:
        return 300 * MIB
    if major == 8:
        return 420 * MIB
    if major == 9:
        return 520 * MIB
    return 560 * MIB


def cublas_workspace_bytes(compute_capability: tuple[int, int]) -> int:
    """cuBLAS workspace, allocated through the caching allocator, so it counts in memory_allocated.

    PyTorch's default (CUBLAS_WORKSPACE_CONFIG unset) is 4096 KiB x 2 + 16 KiB x 8, and 32 MiB on sm_90/sm_100.
    """
    if compute_capability in ((9, 0), (10, 0)):
        return 4096 * 8 * 1024
    return 4096 * 1024 * 2 + 16 * 1024 * 8
