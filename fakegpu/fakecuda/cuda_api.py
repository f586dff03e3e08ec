"""The torch.cuda functions fakecuda answers, and the install/uninstall of them on torch's own surface.

Only the lowest Python-level functions are replaced (is_available, device_count, _lazy_init, the device
exchange used by torch.cuda.device, memory_stats_as_nested_dict, ...); torch's own Python code above them
(memory_allocated, memory_summary, get_device_name, torch.cuda.device, ...) then runs unchanged.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.cuda
import torch.cuda.graphs
import torch.cuda.memory
import torch.cuda.random

from fakegpu.fakecuda import (
    amp,  # autocast's cast cache, cleared with torch's
    backward,
    comm,  # one process's collectives across its devices (nn.DataParallel, torch.cuda.comm and nccl)
    kernels,  # CUDA's kernel choices (dropout, attention) as handlers; the optimizers' foreach types
    optim,  # the optimizers' per-step bookkeeping without the function mode
    persist,
    report,
    snapshot,
    state,
    streams,
)
from fakegpu.fakecuda.mode import FakeCudaMode, invalid_ordinal
from fakegpu.fakecuda.properties import device_properties
from fakegpu.fakecuda.releases import release
from fakegpu.fakecuda.streams import FakeEvent, FakeStream, StreamContext, StreamState
from fakegpu.fakecuda.tensor import install_storage_methods, malloc, uninstall_storage_methods
from fakegpu.fakecuda.workspace import BlasConfig, HandlePool, Workspaces


def torch_version() -> str:
    """The running torch's release (a seam: tests stand in another release's)."""
    return torch.__version__


class FakeCudaApi:
    def __init__(self, mode: FakeCudaMode) -> None:
        self.mode = mode
        self.rt = mode.runtime
        self._saved: list[tuple[Any, str, Any]] = []
        self._compile_warned = False
        self.history = snapshot.History(self.rt)
        # (its dictionary's other keys, per release; a CPU-only build of torch has no such function)
        self._torch_snapshot = getattr(torch._C, "_cuda_memorySnapshot", None)
        self.streams = StreamState(self.rt.count, self.rt.thread)
        rt = self.rt
        rt.torch_release = release(torch_version())
        # the stack the workspace profiles are looked up for (per-call cuBLAS workspaces from 2.15, ...)
        rt.torch_version, rt.cuda_version = torch_version(), torch.version.cuda
        self.workspaces = Workspaces(BlasConfig.from_env(), lambda i, n: malloc(rt, i, n), rt.free, rt.overheads,
                                     handles=HandlePool(backward.in_backward),
                                     stream=rt.stream_id)
        api = self

        class Stream(FakeStream):
            def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
                return super().__new__(cls, device, priority, index=api.checked(device))

        class Event(FakeEvent):
            pass

        self.Stream, self.Event = Stream, Event

    # -- device selection

    def index(self, device: Any = None, optional: bool = True) -> int:
        if device is None:
            return self.rt.current
        if isinstance(device, str):
            device = torch.device(device)
        if isinstance(device, torch.device):
            if device.type != "cuda":
                raise ValueError(f"Expected a cuda device, but got: {device}")
            device = self.rt.current if device.index is None else device.index
        return int(device)

    def checked(self, device: Any = None) -> int:
        index = self.index(device)
        if not self.rt.valid(index):
            raise invalid_ordinal()
        return index

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return self.rt.count

    def current_device(self) -> int:
        return self.rt.current

    def set_device(self, device: Any) -> None:
        index = self.index(device)
        if index >= 0:
            self.rt.current = self.checked(index)

    def exchange_device(self, index: int) -> int:
        previous = self.rt.current
        if index >= 0:
            self.rt.current = self.checked(index)
        return previous

    def lazy_init(self) -> None:
        return None

    def is_initialized(self) -> bool:
        return True

    def get_device_properties(self, device: Any = None):
        index = self.index(device)
        if not self.rt.valid(index):
            raise AssertionError("Invalid device id")
        return device_properties(self.rt.devices[index].device)

    def compile(self, model: Any = None, **options: Any) -> Any:
        """torch.compile: the model or function itself, run eagerly. Compiling would trace it for the CUDA device
        its tensors report and generate kernels for a GPU that is not there (torch aborts the process asking the
        driver). Under the Python charging hook torch.compile ran eagerly too, as it does with a dispatch mode on;
        the C++ hook is no mode, so this says it explicitly."""
        if model is None:  # @torch.compile(mode=...) on a function
            return lambda fn: self.compile(fn, **options)
        if not self._compile_warned:
            self._compile_warned = True
            warnings.warn("fakecuda runs torch.compile'd code eagerly (no kernels are generated for the fake "
                          "GPU): memory and time figures are eager mode's", UserWarning, stacklevel=2)
        return model

    def record_memory_history(self, *args: Any, **kwargs: Any) -> None:
        """torch._C._cuda_record_memory_history, for the model (snapshot.History.record)."""
        self.history.record(*args, **kwargs)

    def record_memory_history_legacy(self, *args: Any) -> None:
        self.history.record_legacy(*args)

    def memory_snapshot(self, *args: Any) -> dict[str, Any]:
        """torch._C._cuda_memorySnapshot: torch's dictionary with the model's segments and traces (snapshot.py)."""
        template = self._torch_snapshot(*args) if self._torch_snapshot is not None else {"allocator_settings": {}}
        return self.history.snapshot(template)

    def synchronize(self, device: Any = None) -> None:
        self.checked(device)  # host execution: every queued op has already finished
        self.rt.synced()

    def get_arch_list(self) -> list[str]:
        return sorted({f"sm_{d.profile.compute_capability[0]}{d.profile.compute_capability[1]}"
                       for d in self.rt.devices})

    # -- streams

    def current_stream(self, device: Any = None) -> FakeStream:
        return self.streams.current(self.checked(device))

    def default_stream(self, device: Any = None) -> FakeStream:
        return self.streams.default[self.checked(device)]

    def set_stream(self, stream: FakeStream) -> None:
        if stream is not None:
            self.streams.set_current(stream)

    def stream(self, stream: FakeStream | None) -> StreamContext:
        return StreamContext(self.streams, stream)

    def current_accelerator(self, check_available: bool = False) -> torch.device:
        return torch.device("cuda")

    def accelerator(self) -> torch.device:
        """torch._C's accelerator queries (FSDP2's default mesh, barrier, get_device_module) say cuda."""
        return torch.device("cuda")

    def set_device_index(self, device: Any) -> None:
        self.set_device(device)

    def is_current_stream_capturing(self) -> bool:
        """No CUDA graph is ever captured on a fake device. Asked by every optimizer step; torch 2.15's C query
        answers False without a driver, torch 2.10's raises cudaErrorInsufficientDriver."""
        return False

    # -- memory

    def allocator(self, device: Any = None):
        return self.rt.devices[self.checked(device)].allocator

    def memory_stats_as_nested_dict(self, device: Any = None) -> dict:
        return self.allocator(device).stats.as_nested_dict()

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self.rt.fold_peaks(self.checked(device))
        self.allocator(device).stats.reset_peak()

    def reset_accumulated_memory_stats(self, device: Any = None) -> None:
        self.allocator(device).stats.reset_accumulated()

    def empty_cache(self) -> None:
        for d in self.rt.devices:
            d.allocator.empty_cache()
        self.rt.usage_changed()

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        return self.rt.mem_get_info(self.checked(device))

    def set_per_process_memory_fraction(self, fraction: float, device: Any = None) -> None:
        if not isinstance(fraction, float):
            raise TypeError("Invalid type for fraction argument, must be `float`")
        if not 0 <= fraction <= 1:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        self.allocator(device).set_memory_fraction(fraction)

    def get_per_process_memory_fraction(self, device: Any = None) -> float:
        alloc = self.allocator(device)
        if alloc.allowed_memory_maximum is None:
            return 1.0
        return alloc.allowed_memory_maximum / alloc.device_total

    # -- cuBLAS workspaces (torch.backends.cuda.cublas_workspace_size, the clear torch's own tests call)

    def clear_cublas_workspaces(self) -> None:
        self.workspaces.clear()

    def get_cublas_workspace_size(self) -> int:
        return self.workspaces.chosen_bytes(self.rt.current)

    def set_cublas_workspace_size(self, size: int) -> None:
        if size < 0:
            raise ValueError("workspace size must be non-negative")
        self.workspaces.size_override = int(size)
        self.workspaces.resized()

    def get_cublaslt_workspace_size(self) -> int:
        return self.workspaces.lt_bytes(self.rt.current)

    def set_cublaslt_workspace_size(self, size: int) -> None:
        if size < 0:
            raise ValueError("workspace size must be non-negative")
        self.workspaces.config.lt_override = int(size)
        self.workspaces.resized()

    # -- RNG: fake CUDA random ops draw from the CPU generator, so "cuda" seeds seed that generator

    def manual_seed(self, seed: int) -> None:
        torch.default_generator.manual_seed(int(seed))

    def seed(self) -> None:
        torch.default_generator.seed()

    def initial_seed(self) -> int:
        return torch.default_generator.initial_seed()

    def get_rng_state(self, device: Any = "cuda") -> torch.Tensor:
        return torch.default_generator.get_state()

    def set_rng_state(self, new_state: torch.Tensor, device: Any = "cuda") -> None:
        torch.default_generator.set_state(new_state)

    def get_rng_state_all(self) -> list[torch.Tensor]:
        return [self.get_rng_state() for _ in self.rt.devices]

    def set_rng_state_all(self, new_states) -> None:
        for new_state in new_states:
            self.set_rng_state(new_state)

    # -- install

    def replacements(self) -> list[tuple[Any, str, Callable]]:
        c, m, r = torch.cuda, torch.cuda.memory, torch.cuda.random
        pairs: list[tuple[Any, str, Callable]] = [
            (c, "is_available", self.is_available),
            (c, "device_count", self.device_count),
            (c, "current_device", self.current_device),
            (c, "set_device", self.set_device),
            (c, "_exchange_device", self.exchange_device),
            (c, "_maybe_exchange_device", self.exchange_device),
            (c, "_lazy_init", self.lazy_init),
            (c, "init", self.lazy_init),
            (c, "is_initialized", self.is_initialized),
            (m, "is_initialized", self.is_initialized),
            (c, "get_device_properties", self.get_device_properties),
            (c, "synchronize", self.synchronize),
            (c, "get_arch_list", self.get_arch_list),
            (c, "current_stream", self.current_stream),
            (c, "default_stream", self.default_stream),
            (c, "set_stream", self.set_stream),
            (c, "stream", self.stream),
            (c, "Stream", self.Stream),
            (c, "Event", self.Event),
            (torch, "compile", self.compile),
            (torch._C, "_cuda_record_memory_history", self.record_memory_history),
            (torch._C, "_cuda_memorySnapshot", self.memory_snapshot),
        ]
        if hasattr(torch._C, "_cuda_record_memory_history_legacy"):
            pairs.append((torch._C, "_cuda_record_memory_history_legacy", self.record_memory_history_legacy))
        pairs += [
            (torch._C, "_get_accelerator", self.accelerator),
            (torch._C, "_accelerator_getAccelerator", self.accelerator),
            (torch._C, "_cuda_clearCublasWorkspaces", self.clear_cublas_workspaces),
            (torch._C, "_cuda_getCublasWorkspaceSize", self.get_cublas_workspace_size),
            (torch._C, "_cuda_setCublasWorkspaceSize", self.set_cublas_workspace_size),
            (torch._C, "_cuda_getCublasLtWorkspaceSize", self.get_cublaslt_workspace_size),
            (torch._C, "_cuda_setCublasLtWorkspaceSize", self.set_cublaslt_workspace_size),
            (torch._C, "_cuda_isCurrentStreamCapturing", self.is_current_stream_capturing),
            (torch.cuda.graphs, "_cuda_isCurrentStreamCapturing", self.is_current_stream_capturing),
        ]
        # torch.accelerator.device_index (nn.DataParallel's scatter and workers): the device exchange, per thread
        pairs += [(torch._C, name, self.exchange_device)
                  for name in ("_accelerator_exchangeDevice", "_accelerator_maybeExchangeDevice")
                  if hasattr(torch._C, name)]
        pairs += comm.Collectives(self.mode).replacements()
        pairs += kernels.replacements() + amp.replacements() + persist.replacements() + optim.replacements(self.mode)
        a = torch.accelerator
        pairs += [
            (a, "is_available", self.is_available),
            (a, "device_count", self.device_count),
            (a, "current_accelerator", self.current_accelerator),
            (a, "current_device_index", self.current_device),
            (a, "set_device_index", self.set_device_index),
            (a, "current_stream", self.current_stream),
            (a, "set_stream", self.set_stream),
            (a, "synchronize", self.synchronize),
        ]
        for name in ("memory_stats_as_nested_dict", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
                     "empty_cache", "mem_get_info", "set_per_process_memory_fraction",
                     "get_per_process_memory_fraction"):
            pairs += [(m, name, getattr(self, name)), (c, name, getattr(self, name))]
        seeds = {"manual_seed": self.manual_seed, "manual_seed_all": self.manual_seed, "seed": self.seed,
                 "seed_all": self.seed, "initial_seed": self.initial_seed, "get_rng_state": self.get_rng_state,
                 "set_rng_state": self.set_rng_state, "get_rng_state_all": self.get_rng_state_all,
                 "set_rng_state_all": self.set_rng_state_all}
        for name, fn in seeds.items():
            pairs += [(r, name, fn), (c, name, fn)]
        return pairs

    def install(self) -> None:
        self.rt.workspaces = self.workspaces
        self.publisher = state.Publisher(self.rt)
        self.rt.on_usage = self.publisher.notify
        self.rt.on_busy = self.publisher.busy
        self.rt.on_sync = self.publisher.flush
        self.reporter = report.install_from_env(self.rt)
        persist.install(self.mode)
        backward.install(self.mode)
        install_storage_methods(self.mode.tracker)
        streams.active = self.streams  # what `with stream:` changes
        installed: list[Any] = []
        for owner, name, fn in self.replacements():
            if inspect.isroutine(fn) and any(fn == other for other in installed):  # (classes keep isinstance)
                # one object per place: torch.compile keys its handlers by function, and one registered for two
                # (torch.cuda.current_stream and torch.accelerator.current_stream) is an error there
                fn = _alias(fn)
            installed.append(fn)
            self._saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
            setattr(owner, name, fn)
        # get_device_capability/get_device_name and friends cache nothing, but bf16 support probing and
        # get_device_module() (the module of the current accelerator) do.
        torch.cuda._check_bf16_tensor_supported.cache_clear()
        torch.get_device_module.cache_clear()

    def uninstall(self) -> None:
        self.rt.workspaces = None
        self.rt.on_usage = None
        self.rt.on_busy = None
        self.rt.on_sync = None
        self.publisher.close()
        persist.uninstall()
        backward.uninstall()
        uninstall_storage_methods()
        streams.active = None
        while self._saved:
            owner, name, original = self._saved.pop()
            if original is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        torch.cuda._check_bf16_tensor_supported.cache_clear()
        torch.get_device_module.cache_clear()


_MISSING = object()


def _alias(fn: Any) -> Any:
    """`fn` as a function object of its own."""
    @functools.wraps(fn)
    def alias(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)
    return alias

