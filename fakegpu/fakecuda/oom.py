"""PyTorch's out-of-memory text, so scripts and people that parse it see the real message."""

from __future__ import annotations

from collections.abc import Sequence

OOM_DOCS = "https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf"


def format_size(size: int) -> str:
    """PyTorch's format_size: bytes up to 1 KiB, then KiB/MiB/GiB with two decimals."""
    if size <= 1024:
        return f"{size} bytes"
    if size <= 1048576:
        return f"{size / 1024.0:.2f} KiB"
    if size <= 1073741824:
        return f"{size / 1048576.0:.2f} MiB"
    return f"{size / 1073741824.0:.2f} GiB"


def oom_message(*, device: int, alloc_size: int, device_total: int, device_free: int, process_in_use: int,
                allowed: int | None, allocated: int, reserved: int,
                others: Sequence[tuple[int | None, int]] = ()) -> str:
    """The message of torch.cuda.OutOfMemoryError as the native caching allocator (torch 2.15) builds it.

    The "Process N has" parts (each other process on the device, `others`: (pid, bytes) in NVML's order; a pid
    None is memory no process list shows, which PyTorch cannot name) and the "this process has" part are what
    PyTorch adds when NVML lists the processes, as it does on a real board.
    """
    allowed_info = f"{format_size(allowed)} allowed; " if allowed is not None else ""
    processes = "".join(f"Process {pid} has {format_size(used)} memory in use. " for pid, used in others
                        if pid is not None)
    return (
        f"CUDA out of memory. Tried to allocate {format_size(alloc_size)}. GPU {device} has a total capacity of "
        f"{format_size(device_total)} of which {format_size(device_free)} is free. {processes}Including non-PyTorch "
        "memory, "
        f"this process has {format_size(process_in_use)} memory in use. {allowed_info}Of the allocated memory "
        f"{format_size(allocated)} is allocated by PyTorch, and {format_size(reserved - allocated)} is reserved "
        "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
        f"Management  ({OOM_DOCS})"
    )
