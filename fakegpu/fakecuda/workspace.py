"""The cuBLAS / cuBLASLt workspaces PyTorch takes from the caching allocator around matrix products. No torch here.

What torch does (aten/src/ATen/cuda/CublasHandlePool.cpp):

- Handles: each thread reserves its own cuBLAS handle per device from a pool on first use and returns it when the
  thread ends, so the handle is reused by the next thread that asks (`HandlePool`). Autograd runs CUDA backward on
  its own thread per device, which lives as long as the process: forward and backward use two handles.
- Held workspaces are kept per (handle, stream) in a process-wide map: a handle and stream seen before reuse theirs.
- torch 2.15 has the TORCH_CUBLAS_WORKSPACE_CACHE switch, off by default on CUDA: every cuBLAS GEMM allocates its
  workspace for the call and frees it after (the first matmul leaves `memory_allocated` unchanged, raises
  `max_memory_allocated` by the workspace and leaves a segment reserved). cuBLASLt (the fused bias GEMM behind
  `linear` / `addmm` with a 1-D bias) takes its own CUBLASLT_WORKSPACE_SIZE KiB (1024 by default) the same way,
  and no cuBLAS workspace (native mode measured: `Linear(64, 64)` on 8 rows raises the peak by output + 1 MiB and
  leaves only the output allocated, call after call). With the switch on, workspaces are held, and cuBLASLt shares
  the cuBLAS one (TORCH_CUBLASLT_UNIFIED_WORKSPACE, on unless set false).
- Releases before 2.15 have no switch (the string is absent from the libtorch_cuda.so of every PyPI wheel from
  2.10.0 to 2.14.0, present in 2.15.0) and always hold the workspaces, as torch has since 2.0 (pytorch/pytorch#95668).
  A cuBLASLt call there first sets up the handle's cuBLAS workspace, then takes a cuBLASLt workspace of its own,
  held too: sharing is opt-in (TORCH_CUBLASLT_UNIFIED_WORKSPACE=1). Measured on a real H200 with torch 2.11
  (tests/data/gpu/h200/mem_workloads.json, linear_fwd_bwd): the first `Linear` allocates its output, a 32 MiB
  cuBLAS workspace and a 1 MiB cuBLASLt one, all three still allocated after; its backward (plain GEMMs, on
  autograd's thread) allocates another 32 MiB cuBLAS workspace that stays too.

The sizes, whether workspaces are held or per call (`workspace_policy`: held before 2.15, per_call from it) and
whether cuBLASLt shares the cuBLAS workspace by default are the workspace profiles' (fakegpu/profiles/
workspace_profiles.yaml, THE overhead model) for the device and the running torch; the environment overrides them as
it does torch's: CUBLAS_WORKSPACE_CONFIG (":SIZE_KiB:COUNT" pairs), CUBLASLT_WORKSPACE_SIZE (KiB),
TORCH_CUBLAS_WORKSPACE_CACHE (read only where the policy is per_call: releases before 2.15 have no switch) and
TORCH_CUBLASLT_UNIFIED_WORKSPACE.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from fakegpu.profiles.workspace_profiles import Overheads

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
    """What the environment says about the workspaces; None leaves it to the workspace profile."""

    cache: bool | None = None  # TORCH_CUBLAS_WORKSPACE_CACHE
    unified: bool | None = None  # TORCH_CUBLASLT_UNIFIED_WORKSPACE
    chosen_override: int | None = None  # CUBLAS_WORKSPACE_CONFIG
    lt_override: int | None = None  # CUBLASLT_WORKSPACE_SIZE

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> BlasConfig:
        env = os.environ if environ is None else environ
        config = cls(cache=_flag(env.get("TORCH_CUBLAS_WORKSPACE_CACHE")),
                     unified=_flag(env.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE")))
        if "CUBLAS_WORKSPACE_CONFIG" in env:
            config.chosen_override = parse_workspace_config(env["CUBLAS_WORKSPACE_CONFIG"])
        lt = env.get("CUBLASLT_WORKSPACE_SIZE")
        if lt is not None and lt.strip().isdigit():
            config.lt_override = int(lt) * KiB
        return config


class _Window:
    """The handles one thread reserved, one per device; back to the pool when the thread ends (its
    threading.local storage is dropped then)."""

    def __init__(self, pool: HandlePool) -> None:
        self.pool = pool
        self.handles: dict[int, int] = {}

    def __del__(self) -> None:
        for index, handle in self.handles.items():
            self.pool.release(index, handle)


class HandlePool:
    """cuBLAS handles per device, as torch's pool hands them out: a thread's first GEMM on a device reserves a
    free handle (or creates one), which the thread keeps until it ends. `in_backward()` says the caller stands for
    autograd's device thread (fakecuda runs backward on the calling thread; CUDA runs it on that thread)."""

    def __init__(self, in_backward: Callable[[], bool] = lambda: False) -> None:
        self.in_backward = in_backward
        self._lock = threading.Lock()
        self._free: dict[int, list[int]] = {}
        self._created: dict[int, int] = {}
        self._engine = _Window(self)  # autograd's device threads never end
        self._local = threading.local()

    def current(self, index: int) -> int:
        """The handle the calling thread uses on device `index`."""
        window = self._engine if self.in_backward() else getattr(self._local, "window", None)
        if window is None:
            window = self._local.window = _Window(self)
        handle = window.handles.get(index)
        if handle is None:
            handle = window.handles[index] = self._reserve(index)
        return handle

    def _reserve(self, index: int) -> int:
        with self._lock:
            free = self._free.get(index)
            if free:
                return free.pop()
            self._created[index] = self._created.get(index, 0) + 1
            return self._created[index] - 1

    def release(self, index: int, handle: int) -> None:
        with self._lock:
            self._free.setdefault(index, []).append(handle)

    def created(self, index: int) -> int:
        return self._created.get(index, 0)


@dataclass
class Workspaces:
    """The workspaces held per (device, handle, stream), and the transient one around each cuBLAS call."""

    config: BlasConfig
    malloc: Callable[[int, int], object]            # (device, bytes) -> block
    free: Callable[[int, object], None]             # (device, block)
    overheads: Callable[[int], Overheads]  # the device's workspace profile
    handles: HandlePool = field(default_factory=HandlePool)
    stream: Callable[[int], int] = lambda index: 0  # the device's current stream
    cublas: dict[tuple[int, int, int], tuple[object, int]] = field(default_factory=dict)  # key -> (block, bytes)
    cublaslt: dict[tuple[int, int, int], tuple[object, int]] = field(default_factory=dict)
    size_override: int | None = None  # torch.backends.cuda.cublas_workspace_size(n)
    # Bumped by resized(): charge_fast.cpp keeps the per-call sizes it asked for until this changes
    version: int = 0

    def resized(self) -> None:
        """The workspace sizes were set (size_override, config.lt_override): what was asked before is stale."""
        self.version += 1

    def caching(self, index: int) -> bool:
        """Whether workspaces are held per (handle, stream): always where the profile's policy is `held` (torch
        before 2.15 has no switch), else when TORCH_CUBLAS_WORKSPACE_CACHE asks."""
        return self.overheads(index).workspace_policy == "held" or self.config.cache is True

    def unified(self, index: int) -> bool:
        """Whether cuBLASLt uses the cuBLAS workspace: TORCH_CUBLASLT_UNIFIED_WORKSPACE, else the profile's
        default (opt-in before 2.15, on from it)."""
        if self.config.unified is not None:
            return self.config.unified
        return self.overheads(index).cublaslt_shares_workspace

    def chosen_bytes(self, index: int) -> int:
        if self.size_override is not None:
            return self.size_override
        if self.config.chosen_override is not None:
            return self.config.chosen_override
        return self.overheads(index).cublas_workspace_bytes()

    def lt_bytes(self, index: int) -> int:
        lt = self.config.lt_override
        if lt is None:
            lt = self.overheads(index).cublaslt_workspace_bytes()
        if self.caching(index) and self.unified(index):
            return min(lt, self.chosen_bytes(index))  # torch caps it and warns once
        return lt

    def _hold(self, table: dict, key: tuple[int, int, int], nbytes: int) -> None:
        entry = table.get(key)
        if entry is not None and entry[1] >= nbytes:
            return
        index = key[0]
        block = self.malloc(index, nbytes) if nbytes else None  # a new one replaces an undersized one
        if entry is not None and entry[0] is not None:
            self.free(index, entry[0])
        table[key] = (block, nbytes)

    def after_gemm(self, index: int, lt: bool) -> None:
        """Account a GEMM that just ran on device `index` (its output is already allocated)."""
        chosen = self.chosen_bytes(index)
        if self.caching(index):
            key = (index, self.handles.current(index), self.stream(index))
            if lt and self.unified(index):
                self._hold(self.cublas, key, max(self.lt_bytes(index), chosen))
                return
            self._hold(self.cublas, key, chosen)  # the handle's own, set up by every call that takes it
            if lt:
                self._hold(self.cublaslt, key, self.lt_bytes(index))
        elif lt:
            nbytes = self.lt_bytes(index)
            if nbytes:
                self.free(index, self.malloc(index, nbytes))
        elif chosen:
            self.free(index, self.malloc(index, chosen))  # held only while the kernel is enqueued

    def held(self, index: int) -> list[tuple[int, int, int]]:
        """(handle, stream, bytes) of each workspace held on the device, cuBLAS's then cuBLASLt's."""
        return [(key[1], key[2], entry[1]) for table in (self.cublas, self.cublaslt)
                for key, entry in table.items() if key[0] == index]

    def clear(self) -> None:
        """torch._C._cuda_clearCublasWorkspaces(): the held workspaces go back to the caching allocator."""
        for table in (self.cublas, self.cublaslt):
            for key, (block, _) in table.items():
                if block is not None:
                    self.free(key[0], block)
            table.clear()
