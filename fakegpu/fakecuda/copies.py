"""Device memory a copy between the host and a CUDA device takes for the call, beyond its destination.

ATen's CUDA copy (aten/src/ATen/native/cuda/Copy.cu) hands a host<->device copy to cudaMemcpyAsync only when the
two sides have the same dtype and lie in memory alike; otherwise it first makes contiguous temporaries and converts
on one side: on the device when the destination is the device or the copy is non-blocking, on the host otherwise.
What lands on the device is what the caching allocator sees:

- host to device: the destination when it is not contiguous (channels-last, a permuted layout) is written through
  a contiguous device buffer of its size;
- device to host, non-blocking: the source converted to the destination's dtype on the device (its layout kept
  where dense), then made contiguous if it is not;
- device to host, blocking: the source made contiguous on the device if it is not.

The H200 (torch 2.11, op database `to`: float32 to float64 host copies, non-blocking, in the default and in
channels-last format, and their gradients back) shows these buffers: 5120 bytes for 625 float64s, the
destination's 2560 bytes for a channels-last gradient. Device-to-device copies take none (peer access assumed).
Not seen here: copies ATen makes inside C++ with a fake tensor's options (autograd's backward of a move to the
device asks for the input's device, which a fake tensor names as the CPU).
"""

from __future__ import annotations

import torch


def dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense: some order of the dims makes the strides those of a contiguous tensor."""
    expected = 1
    for stride, size in sorted((st, s) for s, st in zip(t.shape, t.stride(), strict=True) if s != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _direct(src: torch.Tensor, dst: torch.Tensor) -> bool:
    """cudaMemcpy can take it as is: one dtype, and both sides contiguous or dense with the same strides."""
    if src.dtype != dst.dtype or src.shape != dst.shape:
        return False
    if src.is_contiguous() and dst.is_contiguous():
        return True
    return src.stride() == dst.stride() and dense(src)


def _nbytes(t: torch.Tensor, dtype: torch.dtype | None = None) -> int:
    return t.numel() * (dtype or t.dtype).itemsize


def to_device(src: torch.Tensor, dst: torch.Tensor) -> list[int]:
    """Device buffers (bytes, taken in order, freed after the copy) of a host-to-device copy into `dst`."""
    if _direct(src, dst) or dst.is_contiguous():
        return []
    return [_nbytes(dst)]


def to_host(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool) -> list[int]:
    """Device buffers of a device-to-host copy of `src` into `dst`."""
    if _direct(src, dst):
        return []
    if not non_blocking:
        return [] if src.is_contiguous() else [_nbytes(src)]
    if src.dtype == dst.dtype:
        return [] if src.is_contiguous() else [_nbytes(src)]
    converted_contiguous = src.is_contiguous() or not dense(src)
    sizes = [_nbytes(src, dst.dtype)]
    if not converted_contiguous:
        sizes.append(_nbytes(src, dst.dtype))
    return sizes
