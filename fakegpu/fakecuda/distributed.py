"""torch.distributed backend "nccl" under fakecuda: real collectives, carried by gloo on the CPU tensors.

A fake CUDA tensor is a CPU tensor to C++ (tensor.py), so c10d dispatches its collectives to whatever backend
the process group registered for the *cpu* device type. install() re-registers the backend name "nccl" through
torch's own extension point, `Backend.register_backend` (torch itself registers its builtin backends that way),
with a creator that builds torch's ProcessGroupGloo and registers it on the group for both cpu and cuda.
Everything above the backend (init_process_group's rendezvous, env:// and tcp://, `get_backend()` == "nccl",
DDP's reducer) is torch's unchanged code, and the numbers are real: gloo moves each rank's actual data. Torch
releases that build "nccl" in `_new_process_group_helper` instead of through a plugin (2.10) get the same
backend another way (_install_builtin_nccl below).
(FSDP needs more than a backend; README.md says what.)

Calls and bytes per collective come from ProcessGroup.register_pre_hook, torch's per-group hook that also sees
the collectives C++ issues (DDP's bucket all-reduces), not only the Python API. The same hook meets the run's NCCL
faults (a fault plan's `nccl: hang|error` on a rank, fakegpu/faults): an injected error fails the collective with
the RuntimeError torch raises for ncclRemoteError, and a hang blocks it while a watchdog thread, after the group's
timeout, says what torch's NCCL watchdog says and aborts the process (SIGABRT), as torch does by default. The
peers then see gloo's own failure (a timeout, or the hung rank's connection closing), not NCCL's watchdog: they
raise instead of aborting. Torch releases without pre-hooks (2.10, 2.11) count nothing and meet no NCCL faults.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import itertools
import os
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from fakegpu.faults.board import NCCL_HANG, NCCL_REMOTE_ERROR, Watch

# What NCCL version a CPU build of torch (which has no NCCL) reports: the one PyPI's CUDA torch 2.15 bundles.
_FALLBACK_NCCL_VERSION = (2, 30, 7)


@dataclass
class CollectiveCount:
    calls: int = 0
    bytes: int = 0  # nccl-tests' "size": the larger of what a rank sends and what it receives, per call


class CollectiveStats:
    """Per-process counts of collectives by op name (all_reduce, all_gather_into_tensor, ...). Thread-safe:
    c10d may issue collectives from its own threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ops: dict[str, CollectiveCount] = {}

    def record(self, op: str, nbytes: int) -> None:
        with self._lock:
            count = self._ops.get(op)
            if count is None:
                count = self._ops[op] = CollectiveCount()
            count.calls += 1
            count.bytes += nbytes

    def snapshot(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {op: {"calls": c.calls, "bytes": c.bytes} for op, c in sorted(self._ops.items())}

    def reset(self) -> None:
        with self._lock:
            self._ops.clear()


STATS = CollectiveStats()


def collective_stats() -> dict[str, dict[str, int]]:
    """{op: {"calls": n, "bytes": b}} for this process since activation (or the last reset)."""
    return STATS.snapshot()


def reset_collective_stats() -> None:
    STATS.reset()


# c10d's hook names, as the torch.distributed functions that issue them are called (what a report reader knows).
_OP_NAMES = {
    "ALLREDUCE": "all_reduce", "ALLREDUCE_COALESCED": "all_reduce_coalesced", "BROADCAST": "broadcast",
    "REDUCE": "reduce", "ALLGATHER": "all_gather", "ALLGATHER_BASE": "all_gather_into_tensor",
    "ALLGATHER_COALESCED": "all_gather_coalesced",
    "ALLGATHER_INTO_TENSOR_COALESCED": "all_gather_into_tensor_coalesced", "REDUCE_SCATTER": "reduce_scatter",
    "REDUCE_SCATTER_BASE": "reduce_scatter_tensor",
    "REDUCE_SCATTER_TENSOR_COALESCED": "reduce_scatter_tensor_coalesced",
    "ALLTOALL": "all_to_all", "ALLTOALL_BASE": "all_to_all_single",
    "BARRIER": "barrier", "SCATTER": "scatter", "GATHER": "gather", "SEND": "send", "RECV": "recv",
}


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _count(args) -> None:
    # A hook that raised would fail the collective; counting must never do that.
    try:
        op = _OP_NAMES.get(args.name.name, args.name.name.lower())
        STATS.record(op, max(_nbytes(args.input_tensors), _nbytes(args.output_tensors)))
    except Exception:
        STATS.record("uncounted", 0)


_HOOK_ID = 0x66616B65  # "fake": one id per group, so a second registration replaces rather than doubles

# ProcessGroupNCCL's default timeout (c10d's default_pg_nccl_timeout), for a group that does not say its own.
_NCCL_DEFAULT_TIMEOUT_S = 600.0
# The run's fault board (install()); None: no NCCL faults to meet.
_faults: Watch | None = None

# What NCCL's C API calls each op (the name torch's error for it quotes: "NCCL AllReduce failed: ...").
_NCCL_NAMES = {
    "ALLREDUCE": "AllReduce", "ALLREDUCE_COALESCED": "AllReduce", "BROADCAST": "Broadcast", "REDUCE": "Reduce",
    "ALLGATHER": "AllGather", "ALLGATHER_BASE": "AllGather", "ALLGATHER_COALESCED": "AllGather",
    "ALLGATHER_INTO_TENSOR_COALESCED": "AllGather", "REDUCE_SCATTER": "ReduceScatter",
    "REDUCE_SCATTER_BASE": "ReduceScatter", "REDUCE_SCATTER_TENSOR_COALESCED": "ReduceScatter",
    "ALLTOALL": "AllToAll", "ALLTOALL_BASE": "AllToAll", "BARRIER": "AllReduce", "SEND": "Send", "RECV": "Recv",
    "SCATTER": "Send", "GATHER": "Send",
}


def _rank(group_rank: int) -> int:
    """The global rank a fault plan's `rank` names: $RANK (torchrun's), else the rank in the group (native
    mode's libnccl decides the same way)."""
    value = os.environ.get("RANK", "")
    return int(value) if value.isdigit() else group_rank


def _meet_faults(group_rank: int, timeout_s: float, seq: int, args: Any) -> None:
    """What an NCCL fault on this rank does to the group's `seq`th collective, about to run: raise, hang, or
    nothing."""
    try:
        code = _faults.collective(_rank(group_rank)) if _faults is not None else 0
        op = args.name.name
        if code == NCCL_HANG:
            numel_in = sum(t.numel() for t in args.input_tensors)
            numel = (numel_in, sum(t.numel() for t in args.output_tensors) or numel_in)  # in place: in is out
    except Exception:  # a board that cannot be read must not fail the collective
        return
    rank = _rank(group_rank)
    if code == NCCL_REMOTE_ERROR:
        # torch 2.15's text for ncclRemoteError with NCCL's last error, as native mode shows it
        raise RuntimeError(f"NCCL {_NCCL_NAMES.get(op, op.title())} failed: remote process exited or there was a "
                           f"network error \nNCCL Last Error: FakeGPU fault plan: rank {rank}'s connection to its "
                           "peers failed (nccl: error)")
    if code == NCCL_HANG:
        _hang(rank, f"SeqNum={seq}, OpType={op}, NumelIn={numel[0]}, NumelOut={numel[1]}", timeout_s)


def _hang(rank: int, work: str, timeout_s: float) -> None:
    """Block this collective for good; a watchdog thread ends the process after the group's timeout, as
    ProcessGroupNCCL's does (TORCH_NCCL_ASYNC_ERROR_HANDLING's default: take the process down), saying what its
    watchdog says (torch 2.10's words; 2.15 shortens them to "Operation timed out after N ms")."""
    def watchdog() -> None:
        time.sleep(timeout_s)
        ms = round(timeout_s * 1000)
        sys.stderr.write(f"[rank{rank}]: [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL({work}, "
                         f"Timeout(ms)={ms}) ran for {ms} milliseconds before timing out. (fakecuda: fault plan, "
                         f"nccl: hang)\n[rank{rank}]: [Rank {rank}] To avoid data inconsistency, we are taking the "
                         "entire process down.\n")
        sys.stderr.flush()
        os.abort()

    threading.Thread(target=watchdog, name="fakecuda-nccl-watchdog", daemon=True).start()
    threading.Event().wait()


def _create_nccl_on_gloo(opts, backend_options) -> dist.Backend:
    """The "nccl" creator: torch's own gloo creator, serving the group's cpu and cuda device types.

    backend_options is a ProcessGroupNCCL.Options when the caller passed pg_options; gloo has no use for NCCL's
    knobs (streams, NVLS, ...), so they are accepted and not applied, as gloo itself would ignore them.
    """
    c10d.Backend._ensure_backend_registered(c10d.Backend.GLOO)
    gloo = c10d.Backend._plugins[c10d.Backend.GLOO.upper()].creator_fn(opts, None)
    group = opts.process_group
    if group is not None:
        # c10d picks a backend by the tensor's C++ device type, which for a fake CUDA tensor is cpu. The helper
        # registers this backend for "cuda" (NCCL's capability); cpu is added here so "cuda:nccl" stays what
        # get_backend_config() reports, as with real NCCL.
        group._register_backend(torch.device("cpu"), _BACKEND_TYPE, gloo)
        _hook(group, opts.group_rank, opts.timeout.total_seconds())
    _at_exit()
    return gloo


# Why the hooks come off at exit: a group that the program never destroyed stays in c10d's C++ GroupRegistry, a
# static whose destructor runs from libc's exit handlers, after Python has finalized. The group's pre-hooks are
# std::functions around Python callables (pybind11's wrapper), and destroying one takes the GIL of the dead
# interpreter: SIGSEGV, after the program's own output, for every script that ends without
# destroy_process_group() (issue 13). So every group hooked here is remembered (weakly: a destroyed group stays
# free to go) and unhooked from an atexit handler, while Python is still alive; nothing else of fakecuda's is
# held by a group. The handler is registered after the report's (activation comes first), so it runs first: the
# counts stay in STATS, only collectives that later exit handlers issue go uncounted.
_hooked: list[weakref.ref] = []
_hooked_lock = threading.Lock()


def _pre_collective(group_rank: int, timeout_s: float, seq: Any, args: Any) -> None:
    _count(args)
    _meet_faults(group_rank, timeout_s, next(seq), args)


def _hook(group: Any, group_rank: int, timeout_s: float) -> None:
    if not hasattr(group, "register_pre_hook"):  # torch 2.10 has none: no counting, nothing held
        return
    # seq: the group's collectives, numbered from 1 as ProcessGroupNCCL's SeqNum
    group.register_pre_hook(_HOOK_ID, functools.partial(_pre_collective, group_rank, timeout_s,
                                                        itertools.count(1)))
    with _hooked_lock:
        _hooked[:] = [ref for ref in _hooked if ref() is not None]
        _hooked.append(weakref.ref(group))


def _unhook_groups() -> None:
    """Take fakecuda's pre-hook off every live group it hooked (the last Python object it gave c10d)."""
    with _hooked_lock:
        groups = [g for g in (ref() for ref in _hooked) if g is not None]
        _hooked.clear()
    for group in groups:
        try:
            group.unregister_pre_hook(_HOOK_ID)
        except Exception:  # a group in any state (aborted, shut down) must not fail the exit
            pass


# Why a pause at exit: a gloo worker thread destroys each finished work just *after* waking the waiter, and the
# work holds the collective's tensors. Fake CUDA tensors (like any tensor Python still knew) keep a Python
# object, so that destruction takes the GIL. If the main thread has meanwhile reached interpreter
# finalization, CPython 3.11 ends the worker thread inside a noexcept destructor and the process dies with
# "terminate called without an active exception" (SIGABRT; measured with plain gloo + DDP too, about 1 run in
# 3 on this machine). Releasing the GIL briefly from an atexit handler, which runs before finalization starts,
# lets the workers finish. Registered once, on the first group, so processes without one pay nothing.
_EXIT_DRAIN_S = 0.1
_exit_registered = False


def _exit_handler() -> None:
    _unhook_groups()
    time.sleep(_EXIT_DRAIN_S)  # drain the gloo workers


def _at_exit() -> None:
    global _exit_registered
    if not _exit_registered:
        _exit_registered = True
        atexit.register(_exit_handler)


# The type c10d files the backend under. NCCL, so that every torch-level view of the group (its default
# backend, _get_backend_name(), code that branches on "nccl") is what a real NCCL group shows; code that needs
# the C++ class itself goes by the object, and isinstance(..., ProcessGroupNCCL) is honestly False.
_BACKEND_TYPE = dist.ProcessGroup.BackendType.NCCL
_NCCL = c10d.Backend.NCCL


class _Installed:
    """What install() replaced, so uninstall() can put torch back exactly."""

    def __init__(self) -> None:
        B = c10d.Backend
        self.plugin = B._plugins.get(_NCCL.upper())
        self.capability = list(B.backend_capability.get(_NCCL, ["cuda"]))
        self.backend_type = B.backend_type_map.get(_NCCL)
        self.functions: list[tuple[Any, str, Any]] = []

    def replace(self, owner: Any, name: str, fn: Any) -> None:
        # a class's own dict entry (a pybind method is an `instancemethod` there, a plain builtin once looked up)
        original = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
        self.functions.append((owner, name, original))
        setattr(owner, name, fn)

    def restore(self) -> None:
        B = c10d.Backend
        if self.plugin is None:
            # torch registers its builtins lazily, from entry points, the first time a name is asked for
            B._plugins.pop(_NCCL.upper(), None)
        else:
            B._plugins[_NCCL.upper()] = self.plugin
        B.backend_capability[_NCCL] = self.capability
        if self.backend_type is not None:
            B.backend_type_map[_NCCL] = self.backend_type
        while self.functions:
            owner, name, original = self.functions.pop()
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


_installed: _Installed | None = None


def install(faults: Watch | None = None) -> None:
    """Make backend "nccl" mean NCCL-on-gloo in this process (fakecuda.activate() calls this), meeting the NCCL
    faults of the run's board `faults`."""
    global _installed, _faults
    _faults = faults
    if _installed is not None:
        return
    state = _Installed()
    if "_backend_type" in inspect.signature(c10d.Backend.register_backend).parameters:
        c10d.Backend.register_backend(_NCCL, _create_nccl_on_gloo, extended_api=True, devices=state.capability,
                                      _backend_type=_BACKEND_TYPE)
    else:
        _install_builtin_nccl(state)
    # A CPU build of torch has no NCCL at all: answer as the CUDA build does.
    if not hasattr(torch._C, "_nccl_version"):
        state.replace(torch.cuda.nccl, "version", nccl_version)
        state.replace(torch.cuda.nccl, "is_available", nccl_is_available)
    if not dist.is_nccl_available():
        state.replace(dist, "is_nccl_available", _true)
        state.replace(c10d, "is_nccl_available", _true)
    state.replace(dist.ProcessGroup, "barrier", _host_barrier(dist.ProcessGroup.barrier))
    _installed = state


def _host_barrier(barrier: Any) -> Any:
    """ProcessGroup.barrier with a cuda device (`init_process_group(device_id=...)`, `barrier(device_ids=)`)
    taken as the CPU. c10d's barrier allocates its one-byte tensor on `opts.device`, a real CUDA allocation that
    fails with no driver; the collective runs on gloo, whose tensors are CPU tensors, as every fake CUDA one is."""

    @functools.wraps(barrier)
    def host_barrier(self, opts=None):
        if opts is None:
            return barrier(self)
        device = getattr(opts, "device", None)
        if device is not None and device.type == "cuda":
            opts.device = torch.device("cpu")
        return barrier(self, opts=opts)

    return host_barrier


# -- torch releases whose "nccl" is not a registered plugin (2.10 among them)
#
# There `_new_process_group_helper` has a branch for the name "nccl" that constructs the module's
# `ProcessGroupNCCL` and then checks isinstance(..., ProcessGroupNCCL); `Backend.register_backend` cannot
# replace a builtin. So, for the duration of that helper only, the module's `ProcessGroupNCCL` is a stand-in
# whose construction makes torch's ProcessGroupGloo (as the helper's own gloo branch does) and whose
# isinstance accepts it. Outside the helper torch's class is back, so the many isinstance(backend,
# ProcessGroupNCCL) checks elsewhere (uid, abort, timeouts) keep treating the group as the gloo it is.
# After the helper, the group gets the same backend for cpu, as the plugin creator does.


class _PassesAsNccl(type):
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, dist.ProcessGroupGloo)


class _Options:
    """What the helper fills in for NCCL (timeout, ranks, name, split source and color): gloo takes the first
    three; NCCL's own knobs are accepted and not applied, as with the plugin creator."""

    def __init__(self) -> None:
        self._timeout = None
        self.global_ranks_in_group: list[int] = []
        self.group_name = ""
        self.is_high_priority_stream = False


def _nccl_stand_in() -> type:
    class ProcessGroupNCCL(metaclass=_PassesAsNccl):
        Options = _Options

        def __new__(cls, store, rank: int, size: int, options) -> dist.ProcessGroupGloo:  # type: ignore[misc]
            gloo = dist.ProcessGroupGloo(store, rank, size, timeout=options._timeout)
            gloo.options.global_ranks_in_group = options.global_ranks_in_group
            gloo.options.group_name = options.group_name
            return gloo

    return ProcessGroupNCCL


def _install_builtin_nccl(state: _Installed) -> None:
    real = getattr(c10d, "ProcessGroupNCCL", None)  # a CPU build of torch has none
    stand_in = _nccl_stand_in()
    original = c10d._new_process_group_helper

    @functools.wraps(original)
    def new_process_group_helper(*args, **kwargs):
        backend = args[3] if len(args) > 3 else kwargs.get("backend")
        if str(backend) != _NCCL:
            return original(*args, **kwargs)
        # a caller's ProcessGroupNCCL.Options (pg_options=) would fail the helper's isinstance against the
        # stand-in's; gloo has no use for NCCL's knobs, so they are dropped here, as the plugin creator ignores them
        if len(args) > 6:
            args = (*args[:6], None, *args[7:])
        kwargs.pop("backend_options", None)
        c10d.ProcessGroupNCCL = stand_in
        try:
            pg, store = original(*args, **kwargs)
        finally:
            if real is None:
                del c10d.ProcessGroupNCCL
            else:
                c10d.ProcessGroupNCCL = real
        if isinstance(pg, dist.ProcessGroup) and pg is not c10d.GroupMember.NON_GROUP_MEMBER:
            pg._register_backend(torch.device("cpu"), _BACKEND_TYPE, pg._get_backend(torch.device("cuda")))
            options = getattr(pg._get_backend(torch.device("cuda")), "options", None)
            timeout = getattr(options, "_timeout", None)
            _hook(pg, pg.rank(), timeout.total_seconds() if timeout is not None else _NCCL_DEFAULT_TIMEOUT_S)
            _at_exit()
        return pg, store

    state.replace(c10d, "_new_process_group_helper", new_process_group_helper)


def uninstall() -> None:
    global _installed
    if _installed is not None:
        _installed.restore()
        _installed = None


def _true() -> bool:
    return True


def nccl_version() -> tuple[int, int, int]:
    return _FALLBACK_NCCL_VERSION


def nccl_is_available(tensors) -> bool:
    """torch.cuda.nccl.is_available's rule (dense, contiguous, CUDA, one tensor per device) for a CPU build."""
    devices = set()
    for t in tensors:
        if t.is_sparse or not t.is_contiguous() or not t.is_cuda or t.get_device() in devices:
            return False
        devices.add(t.get_device())
    return True


__all__ = ["CollectiveStats", "collective_stats", "install", "reset_collective_stats", "uninstall"]
