"""What the CUDA runtime and PyTorch's caching allocator add on top of the tensors a model asks for.

Numbers here are the defaults of PyTorch 2.x on CUDA 12; each is named so a calibration can be traced to it.
"""

from __future__ import annotations

from collections.abc import Iterable

MIB = 1 << 20

# The caching allocator rounds every request up to 512 bytes (kMinBlockSize) ...
ALLOC_ROUND = 512
# ... serves requests up to 1 MiB from 2 MiB "small" segments, requests below 10 MiB from 20 MiB segments,
# and larger ones from segments rounded up to 2 MiB (kSmallSize, kSmallBuffer, kMinLargeAlloc, kLargeBuffer,
# kRoundLarge in c10/cuda/CUDACachingAllocator.cpp).
SMALL_REQUEST = 1 * MIB
SMALL_SEGMENT = 2 * MIB
MID_REQUEST = 10 * MIB
MID_SEGMENT = 20 * MIB
LARGE_ROUND = 2 * MIB

# Freed blocks of a growing KV cache and of per-layer temporaries rarely coalesce perfectly; this share of the
# non-weight peak is what the caching allocator is expected to hold on top (see `fakegpu calibrate compare`).
FRAGMENTATION = 0.15


def round_alloc(n: int) -> int:
    return 0 if n <= 0 else -(-n // ALLOC_ROUND) * ALLOC_ROUND


def round_up(n: float, unit: int) -> int:
    return 0 if n <= 0 else int(-(-int(n) // unit) * unit)


def reserved_for_resident(sizes: Iterable[int]) -> int:
    """Segments reserved to hold tensors allocated one after another and never freed (model weights)."""
    small = mid = large = 0
    for n in sizes:
        n = round_alloc(n)
        if n <= SMALL_REQUEST:
            small += n
        elif n < MID_REQUEST:
            mid += n
        else:
            large += round_up(n, LARGE_ROUND)
    return round_up(small, SMALL_SEGMENT) + round_up(mid, MID_SEGMENT) + large


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


def nccl_bytes(tensor_parallel: int) -> int:
    """NCCL communicator buffers (outside the allocator) once more than one rank talks."""
    return 0 if tensor_parallel <= 1 else 256 * MIB
