"""What a GPU activity is, from its name and category: the class the replay reports and re-times it by, and the
category HolisticTraceAnalysis (HTA) gives it in its temporal breakdown.

Two partitions on purpose. HTA's is by name only (its hta/utils/utils.py): communication is a name starting with
`nccl` and containing `Kernel`; memory starts with `Memcpy`, `Memset` or `dma`; compute is any name that is none of
those and contains neither `Memcpy` nor `Sync`; everything else is other. Following it exactly is what lets our
compute / communication / idle shares be compared with HTA's number for number. The class is finer (GEMM,
attention, elementwise, reduction, ...) because re-timing for another board needs to know what bounds a kernel.
"""

from __future__ import annotations

import re
from functools import lru_cache

COMPUTE, COMMUNICATION, MEMORY, OTHER = "compute", "communication", "memory", "other"
CATEGORIES = (COMPUTE, COMMUNICATION, MEMORY, OTHER)
CLASSES = ("gemm", "attention", "elementwise", "reduction", "nccl", "memcpy", "memset", "sync", "other")

_COMM = re.compile(r"nccl.*Kernel")
_MEMORY = re.compile(r"Memcpy|Memset|dma")
_NOT_COMPUTE = re.compile(r"nccl.*Kernel|.*Memcpy|Memset|.*Sync")

# Kernel names of the libraries PyTorch calls, matched in this order (first wins). Attention before GEMM: flash
# and memory-efficient attention kernels are CUTLASS kernels too. Memory-bound kernels whose names hold a GEMM
# library's name (FBGEMM's embedding lookups, cub's sorts) before GEMM.
_CLASS_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("nccl", re.compile(r"^nccl", re.I)),
    ("memcpy", re.compile(r"^(Memcpy|dma)", re.I)),
    ("memset", re.compile(r"^Memset", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|attn|sdpa|mem_eff|cutlassF|cutlassB|cudnn.*mha", re.I)),
    ("reduction", re.compile(r"radix|sort|topk|reduce|softmax|norm_|_norm|layernorm|rmsnorm|cumsum|scan", re.I)),
    ("elementwise", re.compile(r"embedding|permute|CatArray|gather|scatter|index_|elementwise|vectorized|unrolled|"
                               r"pointwise|triton_poi", re.I)),
    ("gemm", re.compile(r"gemm|gemv|wgmma|xmma|cutlass|cublas|nvjet|s16816|h16816|i16832|s1688|h1688|_mm_|"
                        r"matmul|sm\d\d_.*tensorop|volta_|turing_|ampere_|hopper_|dot_?product", re.I)),
    ("reduction", re.compile(r"reduction|sum_|_sum|mean|argmax|argmin|max_|min_|cross_entropy|nll_loss", re.I)),
    ("elementwise", re.compile(r"copy|fill|cat_|where|dropout|gelu|silu|relu|tanh|sigmoid|add|mul|foreach|adam|sgd|"
                               r"clamp|fused", re.I)),
)


@lru_cache(maxsize=65536)
def hta_category(name: str) -> str:
    """HTA's kernel type of a GPU activity called `name` (see the module docstring)."""
    if _COMM.match(name):
        return COMMUNICATION
    if _MEMORY.match(name):
        return MEMORY
    if not _NOT_COMPUTE.match(name):
        return COMPUTE
    return OTHER


@lru_cache(maxsize=65536)
def kernel_class(name: str, cat: str = "kernel") -> str:
    """The class the breakdown and the what-if use; copies and fills by their profiler category first."""
    if cat == "gpu_memcpy":
        return "memcpy"
    if cat == "gpu_memset":
        return "memset"
    if cat == "cuda_sync":  # a stream or event wait the profiler draws on the GPU track (torch 2.3+): no work
        return "sync"
    for cls, rule in _CLASS_RULES:
        if rule.search(name):
            return cls
    return "other"


# cuBLAS and CUTLASS spell the math in: a dtype named outright wins (ampere_fp16_s16816gemm_fp16 is fp16 data
# with fp32 accumulation); else s1688gemm and s16816gemm are fp32 data on TF32 tensor cores, h.... fp16, i.... int8.
_DTYPE_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("fp8", re.compile(r"e4m3|e5m2|fp8|f8f8", re.I)),
    ("bf16", re.compile(r"bf16|bfloat16", re.I)),
    ("fp16", re.compile(r"f16|fp16|half", re.I)),
    ("tf32", re.compile(r"tf32|s1688|s16816|s16832", re.I)),
    ("fp16", re.compile(r"hgemm|h884|h1688|h16816", re.I)),
    ("int8", re.compile(r"i8816|i16832|int8|imma|_i8", re.I)),
    ("fp64", re.compile(r"dgemm|d884|f64|double", re.I)),
    ("fp32", re.compile(r"sgemm|f32|float", re.I)),
)


@lru_cache(maxsize=65536)
def kernel_dtype(name: str) -> str | None:
    """The math dtype a GEMM or attention kernel's name reveals (cuBLAS and CUTLASS spell it in), if any."""
    for dtype, rule in _DTYPE_RULES:
        if rule.search(name):
            return dtype
    return None


_COLLECTIVE_NAME = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", re.I)


def collective_from_kernel(name: str) -> str | None:
    """'ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)' -> 'AllReduce'; the collective when the args lack one."""
    m = _COLLECTIVE_NAME.match(name)
    return m.group(1) if m else None
