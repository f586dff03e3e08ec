"""What the CUDA runtime and PyTorch's caching allocator add on top of the tensors a model asks for.

Numbers here are the defaults of PyTorch 2.x on CUDA 12; each is named so a calibration can be traced to it. The
CUDA context and the cuBLAS workspace are the workspace profiles' (fakegpu/profiles/workspace_profiles.py), per
target GPU and software stack.
"""

from __future__ import annotations

from collections.abc import Iterable

from fakegpu.fakecuda.allocator import K_MIN_BLOCK_SIZE, K_ROUND_LARGE, K_SMALL_SIZE, DeviceAllocator

MIB = 1 << 20

# The caching allocator's rules have one home, fakecuda's allocator model.
ALLOC_ROUND = K_MIN_BLOCK_SIZE
LARGE_ROUND = K_ROUND_LARGE
# Room for any one rank's weights when they are replayed through the allocator model (its address space per device).
_REPLAY_TOTAL = 1 << 40


def round_alloc(n: int) -> int:
    return 0 if n <= 0 else -(-n // ALLOC_ROUND) * ALLOC_ROUND


def round_up(n: float, unit: int) -> int:
    return 0 if n <= 0 else int(-(-int(n) // unit) * unit)


def reserved_for_resident(sizes: Iterable[int], expandable: bool = False) -> int:
    """Segments reserved to hold tensors allocated one after another and never freed (model weights).

    Replayed through fakecuda's model of the caching allocator, because packing matters: two 8 MiB projections
    share a 20 MiB segment but a third does not fit the 4 MiB left, so summing sizes per pool undercounts (by 120
    MiB for a 1B Llama's q/k/v/o; tools/reserved_fit checks this against the real allocator's load phase).
    """
    if expandable:
        # expandable_segments: one segment per pool and stream grows in 2 MiB pages, so nothing is left between
        # tensors; each pool ends on a page.
        small = sum(round_alloc(n) for n in sizes if 0 < round_alloc(n) <= K_SMALL_SIZE)
        large = sum(round_alloc(n) for n in sizes if round_alloc(n) > K_SMALL_SIZE)
        return round_up(small, K_ROUND_LARGE) + round_up(large, K_ROUND_LARGE)
    allocator = DeviceAllocator(0, _REPLAY_TOTAL)
    for n in sizes:
        if n > 0:
            allocator.malloc(n)
    return allocator.reserved_bytes


def nccl_bytes(ranks: int) -> int:
    """Device memory one NCCL communicator holds outside PyTorch's allocator once more than one rank talks.

    Measured through PyTorch on 4x A100 with NVLink after a 4 MB all-reduce (NVIDIA/nccl issue 964): 544 MB per
    process for a 2-rank group, 688 MB for 3 or 4 ranks. NCCL's maintainers: the size grows linearly with the number
    of channels, so PCIe-only boards use fewer channels and less; this takes the NVLink figure as the bound.
    """
    if ranks <= 1:
        return 0
    return 544_000_000 if ranks == 2 else 688_000_000
