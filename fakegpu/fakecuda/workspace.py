"""The cuBLAS / cuBLASLt workspaces PyTorch takes from the caching allocator around matrix products. No torch here.

What torch 2.15 does (aten/src/ATen/cuda/CublasHandlePool.cpp; the switches are in its libtorch_cuda.so;
torch 2.10 has no caching switch and always holds the cuBLAS workspace, see BlasConfig.from_env):

- Workspace caching is off by default on CUDA (TORCH_CUBLAS_WORKSPACE_CACHE=1 turns it on). Off, every cuBLAS
  GEMM allocates its workspace from the caching allocator for the duration of the call and frees it after: the
  first matmul leaves `memory_allocated` unchanged, raises `max_memory_allocated` by the workspace and leaves a
  segment behind in `memory_reserved`.
- cuBLASLt (the fused bias GEMM behind `linear` / `addmm` with a 1-D bias) takes its own workspace,
  CUBLASLT_WORKSPACE_SIZE KiB (1024 by default), the same way: for the call only. Measured in native mode
  (PyTorch's real CUDA path on our simulated memory): `Linear(64, 64)` on 8 rows raises the peak by output +
  1 MiB and leaves only the output allocated, call after call.
- With caching on, the cuBLAS workspace is held per (handle, stream) and cuBLASLt shares it
  (TORCH_CUBLASLT_UNIFIED_WORKSPACE, on unless set false), so the first matmul leaves the workspace allocated.

The cuBLAS size is fakegpu.cuda_overheads.cublas_workspace_bytes(cc) (THE overhead model) unless
CUBLAS_WORKSPACE_CONFIG (":SIZE_KiB:COUNT" pairs) says otherwise, as in torch. One handle per device is modeled
(one Python thread, the default stream's pool).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from fakegpu.cuda_overheads import cublas_workspace_bytes

KiB = 1024
_TRUE = {"1", "true", "yes", "on", "y"}
_FALSE = {"0", "false", "no", "off", "n"}


def _flag(value: str | None) -> bool | None:
    if value is None:
        return None
    v = value.strip().lower()
    return True if v in _TRUE else False if v in _FALSE else None


def parse_workspace_config(text: str) -> int | None:
    """CUBLAS_WORKSPACE_CONFIG as torch reads it: the sum of SIZE KiB x COUNT over ':SIZE:COUNT' groups."""
    pairs = re.findall(r":([0-9]+):([0-9]+)", text)
    if not pairs:
        return None  # torch warns and keeps its default
    return sum(int(size) * KiB * int(count) for size, count in pairs)


@dataclass
class BlasConfig:
    caching: bool = False
    unified: bool = True
    chosen_override: int | None = None  # CUBLAS_WORKSPACE_CONFIG, else the per-architecture default
    lt_bytes: int = 1024 * KiB

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, caching_switch: bool = True) -> BlasConfig:
        """`caching_switch`: the running torch has TORCH_CUBLAS_WORKSPACE_CACHE (2.15 does). Without it (2.10's
        libtorch_cuda.so has no such string) torch always holds the cuBLAS workspace per (handle, stream), the
        behaviour since torch 2.0 (pytorch/pytorch#95668: one Linear leaves 8 MiB + 128 KiB allocated)."""
        env = os.environ if environ is None else environ
        caching = _flag(env.get("TORCH_CUBLAS_WORKSPACE_CACHE")) is True if caching_switch else True
        config = cls(caching=caching)
        config.unified = _flag(env.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE")) is not False
        if "CUBLAS_WORKSPACE_CONFIG" in env:
            config.chosen_override = parse_workspace_config(env["CUBLAS_WORKSPACE_CONFIG"])
        lt = env.get("CUBLASLT_WORKSPACE_SIZE")
        if lt is not None and lt.strip().isdigit():
            config.lt_bytes = int(lt) * KiB
        return config


@dataclass
class Workspaces:
    """The workspaces each fake device holds, and the transient one around each cuBLAS call."""

    config: BlasConfig
    malloc: Callable[[int, int], object]            # (device, bytes) -> block
    free: Callable[[int, object], None]             # (device, block)
    compute_capability: Callable[[int], tuple[int, int]]
    cublas: dict[int, tuple[object, int]] = field(default_factory=dict)   # device -> (block, bytes)
    cublaslt: dict[int, tuple[object, int]] = field(default_factory=dict)
    size_override: int | None = None  # torch.backends.cuda.cublas_workspace_size(n)

    def chosen_bytes(self, index: int) -> int:
        if self.size_override is not None:
            return self.size_override
        if self.config.chosen_override is not None:
            return self.config.chosen_override
        return cublas_workspace_bytes(self.compute_capability(index))

    def lt_bytes(self, index: int) -> int:
        if self.config.caching and self.config.unified:
            return min(self.config.lt_bytes, self.chosen_bytes(index))  # torch caps it and warns once
        return self.config.lt_bytes

    def _hold(self, table: dict, index: int, nbytes: int) -> None:
        entry = table.get(index)
        if entry is not None and entry[1] >= nbytes:
            return
        block = self.malloc(index, nbytes) if nbytes else None  # a new one replaces an undersized one
        if entry is not None and entry[0] is not None:
            self.free(index, entry[0])
        table[index] = (block, nbytes)

    def after_gemm(self, index: int, lt: bool) -> None:
        """Account a GEMM that just ran on device `index` (its output is already allocated)."""
        chosen = self.chosen_bytes(index)
        if self.config.caching:
            if lt and self.config.unified:
                self._hold(self.cublas, index, max(self.lt_bytes(index), chosen))
            elif lt:
                self._hold(self.cublaslt, index, self.lt_bytes(index))
            else:
                self._hold(self.cublas, index, chosen)
        elif lt:
            nbytes = self.lt_bytes(index)
            if nbytes:
                self.free(index, self.malloc(index, nbytes))
        elif chosen:
            self.free(index, self.malloc(index, chosen))  # held only while the kernel is enqueued

    def clear(self) -> None:
        """torch._C._cuda_clearCublasWorkspaces(): the held workspaces go back to the caching allocator."""
        for table in (self.cublas, self.cublaslt):
            for index, (block, _) in table.items():
                if block is not None:
                    self.free(index, block)
            table.clear()
