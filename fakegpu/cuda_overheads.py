"""Device memory a CUDA process holds besides its tensors: the context (and what lazy loading adds to it) and
cuBLAS's workspace.

One model for every part of FakeGPU that accounts for it: the estimators predict it, fakecuda charges it to the
fake device on first use, so `fakegpu estimate-llm` and a fakecuda run agree on the same overhead.
"""

from __future__ import annotations

MIB = 1 << 20


# What a PyTorch process holds on the device outside its tensors, measured on a real H200 (sm_90, driver 580.159.04,
# torch 2.11.0+cu130, CUDA_MODULE_LOADING lazy by default; NVML's per-process figure in tests/data/gpu/h200/torch.json):
#   518 MiB once the context exists (torch.cuda.init(), and a bare cuDevicePrimaryCtxRetain alike);
#   + 92 MiB at the first kernel launch (torch.ones(1): 94 MiB, of which its 2 MiB segment; later kernels add none);
#   + 66 MiB when cuBLAS first runs a GEMM (fp32 matmul: 98 MiB, of which the 32 MiB workspace; bf16 after: none);
#   + 8 MiB when cuDNN first runs (conv2d: 28 MiB, of which a 20 MiB segment; SDPA after: none).
# 684 MiB in all, where PyTorch's OOM message says "non-PyTorch memory". Other architectures have no measurement of
# the lazy parts: they are taken in proportion to each architecture's context (92/518, 66/518, 8/518 of it).
_MEASURED_CONTEXT_MIB = 518
LAZY_PARTS_MIB = {"first_launch": 92, "cublas": 66, "cudnn": 8}


def cuda_context_bytes(compute_capability: tuple[int, int]) -> int:
    """Device memory a CUDA context holds once it exists, before any kernel runs (lazy module loading on).

    sm_90 is measured (518 MiB on an H200 with CUDA 13.0); the other figures are typical nvidia-smi readings of an
    idle `torch.cuda.init()` process with CUDA 12: 300-600 MiB, growing with architecture generation because the
    fat binaries carry more kernels per SM version.
    """
    major, _ = compute_capability
    if major < 7:
        return 250 * MIB
    if major == 7:
        return 300 * MIB
    if major == 8:
        return 420 * MIB
    if major == 9:
        return _MEASURED_CONTEXT_MIB * MIB
    return 560 * MIB


def lazy_context_bytes(compute_capability: tuple[int, int], part: str) -> int:
    """What the context grows by at its first kernel launch (`first_launch`) or when a library's kernels first run
    (`cublas`, `cudnn`): measured on sm_90, in proportion to the context elsewhere, whole MiB."""
    mib = LAZY_PARTS_MIB[part]
    if compute_capability[0] == 9:
        return mib * MIB
    return cuda_context_bytes(compute_capability) * mib // _MEASURED_CONTEXT_MIB // MIB * MIB


def non_pytorch_bytes(compute_capability: tuple[int, int], *, cudnn: bool = False) -> int:
    """The context of a PyTorch process that has launched kernels and run cuBLAS (every model does), and cuDNN if it
    ran convolutions: what nvidia-smi shows for the process beyond `memory_reserved()`."""
    parts = ["first_launch", "cublas"] + (["cudnn"] if cudnn else [])
    return cuda_context_bytes(compute_capability) + sum(lazy_context_bytes(compute_capability, p) for p in parts)


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
