"""What the CUDA runtime and PyTorch's caching allocator add on top of the tensors a model asks for.

Numbers here are the defaults of PyTorch 2.x on CUDA 12; each is named so a calibration can be traced to it. The
CUDA context and the cuBLAS workspace are the workspace profiles' (fakegpu/profiles/workspace_profiles.py), per
target GPU and software stack.
"""

from __future__ import annotations

from collections.abc import Iterable

from fakegpu.fakecuda.allocator import (
    K_LARGE_BUFFER,
    K_MIN_BLOCK_SIZE,
    K_MIN_LARGE_ALLOC,
    K_ROUND_LARGE,
    K_SMALL_BUFFER,
    K_SMALL_SIZE,
)

MIB = 1 << 20

# The caching allocator's rules have one home, fakecuda's allocator model; the estimator sums them up
# instead of replaying them block by block.
ALLOC_ROUND = K_MIN_BLOCK_SIZE
SMALL_REQUEST = K_SMALL_SIZE
SMALL_SEGMENT = K_SMALL_BUFFER
MID_REQUEST = K_MIN_LARGE_ALLOC
MID_SEGMENT = K_LARGE_BUFFER
LARGE_ROUND = K_ROUND_LARGE

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


def nccl_bytes(ranks: int) -> int:
    """Device memory one NCCL communicator holds outside PyTorch's allocator once more than one rank talks.

    Measured through PyTorch on 4x A100 with NVLink after a 4 MB all-reduce (NVIDIA/nccl issue 964): 544 MB per
    process for a 2-rank group, 688 MB for 3 or 4 ranks. NCCL's maintainers: the size grows linearly with the number
    of channels, so PCIe-only boards use fewer channels and less; this takes the NVLink figure as the bound.
    """
    if ranks <= 1:
        return 0
    return 544_000_000 if ranks == 2 else 688_000_000
