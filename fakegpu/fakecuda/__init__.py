"""fakecuda: PyTorch programs written for CUDA run their math on the CPU behind a faithful CUDA surface.

    import fakegpu.fakecuda as fc
    fc.activate(devices="a100:2")          # or FAKEGPU_RUNTIME=fakecuda FAKEGPU_DEVICES=a100:2 + the auto hook
    x = torch.randn(4, 4, device="cuda")   # x.device == cuda:0, data on the CPU, memory in the allocator model

Importing this package does not import torch; activate() does. See README.md here for the mechanism.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fakegpu.fakecuda.errors import FakeCudaNotActive

if TYPE_CHECKING:
    from fakegpu.fakecuda.runtime import Runtime

_active: dict[str, Any] = {}


def _devices(spec: str | None) -> tuple[list[Any], str]:
    """The process's devices and their spec: `spec` when given; else the device table FakeGPU's runtime or `fakegpu
    run` gave the process (FAKEGPU_DEVICE_TABLE: the GPUs allocated to a container, which the native shims read
    too, and which come before FAKEGPU_DEVICES there as well); else FAKEGPU_DEVICES; else one A100."""
    from fakegpu.devices import DEFAULT_DEVICES, resolve_devices
    from fakegpu.devices.table import table_devices
    from fakegpu.errors import FakeGPUError

    table = os.environ.get("FAKEGPU_DEVICE_TABLE")
    if spec is None and table:
        try:
            return table_devices(table)
        except (OSError, ValueError, FakeGPUError) as exc:
            raise RuntimeError(f"fakecuda: cannot read the device table FAKEGPU_DEVICE_TABLE={table}: {exc}") from exc
    spec = spec if spec is not None else os.environ.get("FAKEGPU_DEVICES") or DEFAULT_DEVICES
    return resolve_devices(spec), spec


def activate(devices: str | None = None) -> Runtime:
    """Install fakecuda in this process: devices from `devices`, else the device table FakeGPU's runtime gave the
    process (FAKEGPU_DEVICE_TABLE), else FAKEGPU_DEVICES, else one a100."""
    if _active:
        raise RuntimeError("fakecuda is already active in this process; deactivate() it first")
    from fakegpu.fakecuda import allocator_cxx
    from fakegpu.fakecuda.cuda_api import FakeCudaApi
    from fakegpu.fakecuda.dispatch import ChargeHook, charging
    from fakegpu.fakecuda.mode import FakeCudaMode
    from fakegpu.fakecuda.runtime import Runtime

    runtime = Runtime.from_devices(*_devices(devices))
    mode = FakeCudaMode(runtime)
    charges = charging(mode.tracker)  # (a bad FAKEGPU_FAKECUDA_HOOK stops here, before anything is installed)
    if isinstance(charges, ChargeHook):  # the extension is built: the allocator model runs in C++ too
        cls = allocator_cxx.allocator_class(charges.ext)
        runtime.replace_allocators(functools.partial(allocator_cxx.replace, cls=cls))
        mode.use_cxx(charges.ext)
    api = FakeCudaApi(mode)
    api.install()
    mode.__enter__()
    charges.__enter__()
    from fakegpu.fakecuda import distributed, dtensor, threads

    threads.install(functools.partial(_in_thread, mode, charges))

    distributed.install(runtime.faults)  # backend "nccl" -> gloo on the CPU tensors
    dtensor.install()  # DTensors on a cuda mesh (FSDP2) report their fake device
    _active.update(runtime=runtime, mode=mode, api=api, charges=charges, steps=_count_steps(runtime),
                   frozen=_freeze_imports())
    return runtime


@contextlib.contextmanager
def _in_thread(mode: Any, charges: Any) -> Iterator[None]:
    """The mode and the charging hook on a thread the program started (threads.py)."""
    with mode, charges.in_thread():
        yield


def _freeze_imports() -> bool:
    """Put what exists now (the interpreter's and torch's ~300k objects, when the start hook activates) out of the
    cyclic collector's reach. fakecuda makes several collector-tracked objects per op output (the tensor's and its
    storage's Python objects, the allocator block, the tracking entry), so full collections come far more often
    than in the plain program, and each walks every object torch's import made: ~150 ms each, every ~80 steps of
    bench_fakecuda's MLP (7% of its step). Cycles among the objects frozen here are not collected until
    deactivate(). True when this froze them (nothing was frozen before: the zygote's preload already is)."""
    import gc

    if gc.get_freeze_count():
        return False
    gc.freeze()
    return True


def _count_steps(runtime: Runtime) -> Any:
    """A plan's `after_steps` faults see this process's training steps: torch.optim's global hook, after every
    optimizer's step. The hook's handle, or None without a board to tell."""
    if runtime.faults is None:
        return None
    from torch.optim.optimizer import register_optimizer_step_post_hook

    rank = os.environ.get("RANK", "")
    watch, who = runtime.faults, int(rank) if rank.isdigit() else None

    def stepped(optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            watch.stepped(who)
        except Exception:  # a board that cannot be written must not fail the training step
            pass

    return register_optimizer_step_post_hook(stepped)


def deactivate() -> None:
    """Undo activate(): the mode leaves the stack and torch.cuda gets its own functions back."""
    if not _active:
        return
    from fakegpu.fakecuda import distributed, dtensor, threads

    threads.uninstall()
    # threads started meanwhile and still running keep these on their stacks: from now on they pass calls through
    _active["mode"].retire()
    _active["charges"].rules.retired = True
    if _active.get("steps") is not None:
        _active["steps"].remove()
    dtensor.uninstall()
    distributed.uninstall()
    _active["charges"].__exit__(None, None, None)
    _active["mode"].__exit__(None, None, None)
    _active["api"].uninstall()
    if _active["frozen"]:
        import gc

        gc.unfreeze()
    _active.clear()


def is_active() -> bool:
    return bool(_active)


def active_runtime() -> Runtime:
    """The active fakecuda's runtime (devices, allocator models). (Not `runtime()`: the submodule of that name
    would shadow it as soon as it is imported.)"""
    if not _active:
        raise FakeCudaNotActive("fakecuda is not active: call fakegpu.fakecuda.activate() first")
    return _active["runtime"]


def init(runtime: str = "fakecuda", devices: str | None = None) -> Runtime:
    """fakegpu.init(runtime="fakecuda", devices=...) delegates here."""
    if runtime != "fakecuda":
        raise ValueError(f"fakecuda.init handles runtime='fakecuda', not {runtime!r}")
    return activate(devices)


__all__ = ["activate", "deactivate", "init", "is_active", "runtime"]
