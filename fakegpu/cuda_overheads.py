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
    """cuBLAS workspace PyTorch takes from its caching allocator for a GEMM.

    Default (CUBLAS_WORKSPACE_CONFIG unset): 4096 KiB x 2 + 16 KiB x 8, and 32 MiB on sm_90 and sm_100. PyTorch
    2.15's CublasHandlePool.cpp also gives 32 MiB to 11.x and 12.x, but the dev set's Qwen3-8B row (torch 2.9.1
    on an RTX PRO 5000, sm_120) grew by only 13 MB over its load during inference, so 12.x keeps the small
    workspace here until a 2.15 measurement says otherwise. With workspace caching off (2.15's default) it is
    allocated and freed around each call: it raises the peak and keeps a segment reserved.
    """
    if compute_capability in ((9, 0), (10, 0)):
        return 32 * MIB
    return 4096 * 1024 * 2 + 16 * 1024 * 8
