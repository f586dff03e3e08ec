"""The state of one fakecuda process: its devices, their allocators, each thread's current device. No torch here.

Everything the fake CUDA surface reports comes from this object, and this object takes every device fact
from the profile (fakegpu.profiles) through THE device-spec parser (fakegpu.devices).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fakegpu.devices import Device, resolve_devices
from fakegpu.devices.cuda_view import cuda_view
from fakegpu.fakecuda.allocator import Block, DeviceAllocator
from fakegpu.fakecuda.config import AllocatorConfig, config_from_env
from fakegpu.fakecuda.errors import ModelGPULost, ModelOutOfMemory
from fakegpu.fakecuda.releases import Release
from fakegpu.fakecuda.workspace import Workspaces
from fakegpu.faults.board import Watch
from fakegpu.profiles import workspace_profiles
from fakegpu.profiles.workspace_profiles import Overheads, WorkspaceProfiles
from fakegpu.shared_state import state_dir

MiB = 1 << 20


@dataclass
class FakeDevice:
    device: Device
    allocator: DeviceAllocator
    # The index of the board this CUDA device lives on (CUDA_VISIBLE_DEVICES renumbers, a MIG slice is part of
    # its board): nvidia-smi shows the process's memory there.
    board: int = -1
    initialized: bool = False  # a context exists once the device is first used, as with real CUDA
    context_bytes: int = 0  # what the context holds now: created, then grown by lazy loading (workspace profiles)
    context_parts: set[str] = field(default_factory=set)  # the lazy parts charged so far

    def __post_init__(self) -> None:
        if self.board < 0:
            self.board = self.device.index

    @property
    def index(self) -> int:
        return self.device.index

    @property
    def profile(self):
        return self.device.profile


class HostThread(threading.local):
    """What CUDA keeps per host thread: the current device, and each device's current stream. A thread that never
    set them is on device 0 and its default streams, whatever the thread that started it chose (cudaSetDevice and
    PyTorch's current streams are per thread), so nn.DataParallel's workers, each in a `torch.cuda.device(i)`, do
    not move one another."""

    device = 0  # (class attributes: what a thread sees before it sets its own)

    def __init__(self) -> None:
        # id of each device's current stream where it is not the default one (0): blocks come from that stream's
        # pool (streams.py sets it; charge_fast.cpp reads it)
        self.stream_ids: dict[int, int] = {}


@dataclass
class Runtime:
    devices: list[FakeDevice]
    context_override: int | None  # FAKEGPU_CUDA_CONTEXT_MIB; else the workspace profiles' figure for the stack
    spec: str = ""
    config: AllocatorConfig = field(default_factory=AllocatorConfig)
    workspaces: Workspaces | None = None  # cuBLAS workspaces; set up by the torch layer (it raises torch's OOM)
    on_usage: Callable[[], None] | None = None  # called when a segment or a context comes or goes (state.py)
    # called with the board an op ran on, whether it was compute work, when it began, and when it ended where that
    # was not just now (state.py: utilization)
    on_busy: Callable[..., None] | None = None
    on_sync: Callable[[], None] | None = None  # a sync point: busy time reported so far is written out (state.py)
    # busy time kept elsewhere (the C++ hook's fast path, charge_fast.cpp), handed to on_busy when called: before
    # busy time reported here and at sync points, so on_busy sees it in order
    busy_backlog: Callable[[], None] | None = None
    # makes the state file's busy-time writer in C++ (the extension's BusyRing, busy_ring.cpp: mapping, layout, pid)
    # while the C++ hook is installed; state.py's Publisher uses it for the file it creates
    busy_ring: Callable[..., Any] | None = None
    ooms: list[ModelOutOfMemory] = field(default_factory=list)  # every OOM raised, caught by the script or not
    folded_peaks: dict[int, tuple[int, int]] = field(default_factory=dict)  # peaks before a reset_peak_memory_stats
    thread: HostThread = field(default_factory=HostThread, repr=False)
    # calls to ops whose memory fakecuda is known not to match CUDA's (fidelity.py), by ATen name
    gap_calls: dict[str, int] = field(default_factory=dict)
    # the run's fault board (fakegpu/faults/board.py): lost GPUs, faults after a number of allocations
    faults: Watch | None = None
    # the running torch's major.minor (releases.py), set by the torch layer; None: the newest behaviour
    torch_release: Release | None = None
    # the context and cuBLAS workspace figures: built-in, and the files FAKEGPU_WORKSPACE_PROFILES names first
    workspace_profiles: WorkspaceProfiles = field(default_factory=workspace_profiles.builtin)
    # the running torch's version and CUDA build (torch.version.cuda), set by the torch layer: the stack the
    # workspace profiles are looked up for; None: the profiles' default stack
    torch_version: str | None = None
    cuda_version: str | None = None
    _overheads: dict[tuple[int, str | None, str | None], Overheads] = field(default_factory=dict, repr=False)

    @classmethod
    def from_spec(cls, spec: str, environ: dict[str, str] | None = None) -> Runtime:
        return cls.from_devices(resolve_devices(spec), spec, environ)

    @classmethod
    def from_devices(cls, resolved: list[Device], spec: str, environ: dict[str, str] | None = None) -> Runtime:
        """The runtime for devices resolved already (a device table's, or `spec`'s): CUDA_VISIBLE_DEVICES and the
        allocator settings from `environ` apply on top."""
        env = os.environ if environ is None else environ
        config = config_from_env(env)
        override = env.get("FAKEGPU_CUDA_CONTEXT_MIB")
        context = int(float(override) * MiB) if override else None
        devices = [
            FakeDevice(d, DeviceAllocator(d.index, d.profile.cuda_total_bytes, config, non_pytorch_bytes=0), board)
            for d, board in cuda_view(resolved, env.get("CUDA_VISIBLE_DEVICES"))
        ]
        return cls(devices, context, spec=spec, config=config, faults=Watch(state_dir(env)),
                   workspace_profiles=workspace_profiles.from_env(env))

    def since(self, first: Release) -> bool:
        """Whether the running torch is `first` or later (releases.py names the releases that changed)."""
        return self.torch_release is None or self.torch_release >= first

    def overheads(self, index: int) -> Overheads:
        """The workspace profile's figures for device `index` under the running torch (asked at every GEMM, so
        kept per device and stack)."""
        key = (index, self.torch_version, self.cuda_version)
        found = self._overheads.get(key)
        if found is None:
            profile = self.devices[index].profile
            found = self._overheads[key] = self.workspace_profiles.overheads(
                profile.compute_capability, torch=self.torch_version, cuda=self.cuda_version,
                architecture=profile.architecture)
        return found

    @property
    def count(self) -> int:
        return len(self.devices)

    @property
    def current(self) -> int:
        """The calling thread's current device."""
        return self.thread.device

    @current.setter
    def current(self, index: int) -> None:
        self.thread.device = index

    def stream_id(self, index: int) -> int:
        """The id of the calling thread's current stream on device `index`."""
        return self.thread.stream_ids.get(index, 0)

    def valid(self, index: int) -> bool:
        return 0 <= index < len(self.devices)

    def context_bytes(self, index: int) -> int:
        """Device memory the CUDA context holds on this device: what it took when created (on first use), grown
        since by lazy loading; outside the allocator. FAKEGPU_CUDA_CONTEXT_MIB pins it, growth included."""
        dev = self.devices[index]
        if dev.initialized:
            return dev.context_bytes
        if self.context_override is not None:
            return self.context_override
        return self.overheads(index).context_bytes()

    def touch(self, index: int) -> FakeDevice:
        """The device, with its CUDA context created on first use (the context takes device memory)."""
        dev = self.devices[index]
        if not dev.initialized:
            created = self.context_bytes(index)
            dev.initialized = True
            self._hold(dev, created)
        return dev

    def loaded(self, index: int, part: str) -> None:
        """The context grows once per device at its first kernel launch (`first_launch`) and when cuBLAS or cuDNN
        first run (`cublas`, `cudnn`), as lazy module loading makes a real one (the workspace profiles)."""
        dev = self.touch(index)
        if part in dev.context_parts:
            return
        dev.context_parts.add(part)
        if self.context_override is None:
            self._hold(dev, self.overheads(index).lazy_bytes(part))

    def _hold(self, dev: FakeDevice, nbytes: int) -> None:
        dev.context_bytes += nbytes
        dev.allocator.non_pytorch_bytes += nbytes
        self.usage_changed()

    def usage_changed(self) -> None:
        if self.on_usage is not None:
            self.on_usage()

    def ran(self, index: int, compute: bool = False, started_ns: int | None = None) -> None:
        """An op ran on the device (since started_ns, CLOCK_MONOTONIC; tensor-core math when `compute`): a lost GPU
        refuses it (ModelGPULost), a live one was busy with it, and a throttled one (a fault plan's straggler)
        takes boost/clock times as long: the op's wall time is stretched here, so its peers wait for it.
        Called at every op: a run without faults pays one look at the board."""
        dev = self.devices[index]
        faults = self.faults
        if faults is not None and not faults.quiet():
            if faults.lost(dev.board):
                raise ModelGPULost(index)
            if "first_launch" not in dev.context_parts:
                self.loaded(index, "first_launch")
            if started_ns is not None:
                boost = dev.profile.data["clocks_mhz"]["boost"]
                factor = faults.slowdown(dev.board, boost)
                if factor > 1:
                    time.sleep((factor - 1) * max(0, time.monotonic_ns() - started_ns) / 1e9)
        elif "first_launch" not in dev.context_parts:
            self.loaded(index, "first_launch")
        if self.on_busy is not None:
            if self.busy_backlog is not None:
                self.busy_backlog()
            self.on_busy(dev.board, compute, started_ns)

    def synced(self) -> None:
        """The host waited for the devices (torch.cuda.synchronize): what they were busy with is published now."""
        if self.busy_backlog is not None:
            self.busy_backlog()
        if self.on_sync is not None:
            self.on_sync()

    def check_lost(self, index: int) -> None:
        """ModelGPULost when the device's GPU fell off the bus (the run's fault board)."""
        faults = self.faults
        if faults is not None and not faults.quiet() and faults.lost(self.devices[index].board):
            raise ModelGPULost(index)

    def malloc(self, index: int, nbytes: int, stream: int | None = None) -> Block | int:
        """A block handle from the device's model: a Block (allocator.py) or its address (the C++ model)."""
        if stream is None:
            stream = self.stream_id(index)
        dev = self.devices[index]
        faults = self.faults
        if faults is not None and not faults.quiet() and faults.lost(dev.board):
            raise ModelGPULost(index)
        if not dev.initialized:
            self.touch(index)
        alloc = dev.allocator
        reserved, segments = alloc.total_allocated_memory, alloc.num_device_alloc
        try:
            return alloc.malloc(nbytes, stream)
        except ModelOutOfMemory as oom:
            self.out_of_memory(oom)
            raise
        finally:
            self.allocated(index, reserved, segments)

    def out_of_memory(self, oom: ModelOutOfMemory) -> None:
        """Keep an OOM for the report: a copy, not the exception raised, whose traceback would keep alive every frame
        it passed through and the tensors they hold (an op's output, charged before the op's workspace ran out)."""
        self.ooms.append(ModelOutOfMemory(oom.message, oom.device, oom.requested))

    def allocated(self, index: int, reserved: int, segments: int) -> None:
        """After a malloc on the device's model that held `reserved` bytes in `segments` cudaMallocs before: usage
        listeners hear of a change in reserved memory, the fault board of each new cudaMalloc. (Segments change on
        a new cudaMalloc and on the free-and-retry before an OOM, never on a cache hit.)"""
        alloc = self.devices[index].allocator
        if alloc.total_allocated_memory != reserved and self.on_usage is not None:
            self.on_usage()
        if self.faults is not None:  # a plan's "after N allocations" counts cudaMallocs, as native mode does
            for _ in range(alloc.num_device_alloc - segments):
                self.faults.allocated(self.devices[index].board)

    def replace_allocators(self, make: Callable[[DeviceAllocator], Any]) -> None:
        """Each device's allocator model swapped for make(old), before any block is taken (the C++ model)."""
        for dev in self.devices:
            dev.allocator = make(dev.allocator)

    def free(self, index: int, block: Block | int) -> None:
        self.devices[index].allocator.free(block)

    def mem_get_info(self, index: int) -> tuple[int, int]:
        alloc = self.touch(index).allocator
        return alloc.device_free(), alloc.device_total

    def process_used_bytes(self, index: int) -> int:
        """What nvidia-smi would list for this process on the device: context plus reserved segments."""
        alloc = self.devices[index].allocator
        return alloc.non_pytorch_bytes + alloc.total_allocated_memory

    def fold_peaks(self, index: int) -> None:
        """Keep the process-lifetime peaks across a user's reset_peak_memory_stats (preflight reports them)."""
        self.folded_peaks[index] = self.lifetime_peaks(index)

    def lifetime_peaks(self, index: int) -> tuple[int, int]:
        """(peak allocated, peak reserved) since the process started."""
        core = self.devices[index].allocator.stats.core
        old = self.folded_peaks.get(index, (0, 0))
        return max(old[0], core["allocated_bytes"]["all"].peak), max(old[1], core["reserved_bytes"]["all"].peak)

    def summary(self) -> list[dict]:
        rows = []
        for d in self.devices:
            a = d.allocator
            rows.append({
                "index": d.index,
                "name": d.profile.name,
                "uuid": d.device.uuid,
                "total_bytes": a.device_total,
                "allocated_bytes": a.allocated_bytes,
                "reserved_bytes": a.reserved_bytes,
                "peak_allocated_bytes": a.stats.core["allocated_bytes"]["all"].peak,
                "peak_reserved_bytes": a.stats.core["reserved_bytes"]["all"].peak,
                "process_used_bytes": self.process_used_bytes(d.index) if d.initialized else 0,
            })
        return rows
