"""torch.optim's per-step bookkeeping on fake CUDA, run without the function mode.

(Which implementation an optimizer picks, foreach as on CUDA, is kernels.py's: fake parameters count as foreach
types there.) An optimizer step asks many small questions per parameter (`p.grad`, `is_complex`, the state's step
count as a Python number) and runs its foreach ops on lists of every parameter: each is one call through
FakeCudaMode, ~130 a step on a small conv net, which cost it +0.6 ms of a 1.2 ms step. The ops need no mode (the
C++ charging hook charges their outputs, and every tensor involved is on one fake device already), so the
optimizers' `_init_group` and `_multi_tensor_*` functions run with it off, and `zero_grad` (optimizers' and
modules', one call per parameter) too. What they make that outlives the call (state tensors on the first step,
SGD's momentum buffers) reaches the caller through their list arguments: such a tensor, charged to a fake device
but not yet badged, is badged on the way out, as the mode would have done. Only where nothing else could see the
difference: this mode alone on the function-mode stack (torch's `with torch.device(...)` is a mode too, and
changes where the state is made), parameters of the fake types (a DTensor's local shards are badged by the mode's
own rules), and not while torch.compile traces.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

import torch

from fakegpu.fakecuda.tensor import FAKE_TYPES, StorageTracker, badge, storage_key

_MODULES = ("adam", "adamw", "sgd", "rmsprop", "adagrad", "adamax", "nadam", "radam", "asgd", "adadelta", "rprop",
            "_adafactor")
_compiling = torch.compiler.is_compiling
_stack_length = torch._C._len_torch_function_stack
_stack_at = torch._C._get_function_stack_at


def _only(mode: Any) -> bool:
    return _stack_length() == 1 and _stack_at(0) is mode


def _all_fake(params: Any) -> bool:
    return isinstance(params, list) and all(type(p) in FAKE_TYPES for p in params)


def _badge_charged(tracker: StorageTracker, values: Any) -> None:
    """Badge the plain tensors in `values`' lists whose storage is charged to a fake device."""
    live = tracker.live
    for value in values:
        if type(value) is list:
            for t in value:
                if type(t) is torch.Tensor or type(t) is torch.nn.Parameter:
                    entry = live.get(storage_key(t))
                    if entry is not None:
                        badge(t, entry[0], tracker)


def _without_mode(fn: Callable, mode: Any, params_of: Callable[[tuple, dict], Any] | None) -> Callable:
    """`fn` with the function mode off where only this mode is on; params_of: where its parameters are, which must
    all be fake, and whose list arguments are searched for tensors to badge after (None: fn makes no tensor)."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not _only(mode) or _compiling() or (params_of is not None and not _all_fake(params_of(args, kwargs))):
            return fn(*args, **kwargs)
        with torch._C.DisableTorchFunction():
            out = fn(*args, **kwargs)
            if params_of is not None:  # (in here: the mode would see each untyped_storage() otherwise)
                _badge_charged(mode.tracker, args)
                _badge_charged(mode.tracker, kwargs.values())
        return out

    return run


def _group_params(args: tuple, kwargs: dict) -> Any:  # Optimizer._init_group(self, group, ...)
    group = args[1] if len(args) > 1 else kwargs.get("group")
    return group.get("params") if isinstance(group, dict) else None


def _first_list(args: tuple, kwargs: dict) -> Any:  # _multi_tensor_*(params, grads, ...)
    return args[0] if args else kwargs.get("params")


def replacements(mode: Any) -> list[tuple[Any, str, Any]]:
    """(owner, name, value) for cuda_api to install and restore with its other replacements."""
    # zero_grad sets or zeroes gradients in place, one mode call per parameter and gradient otherwise
    pairs: list[tuple[Any, str, Any]] = [
        (owner, "zero_grad", _without_mode(vars(owner)["zero_grad"], mode, None))
        for owner in (torch.optim.Optimizer, torch.nn.Module)]
    for name in _MODULES:  # (torch.optim's __init__ deletes its submodules' names: imported by name)
        try:
            module = importlib.import_module(f"torch.optim.{name}")
        except ImportError:  # (one this torch does not have)
            continue
        for attr, value in list(vars(module).items()):
            if attr.startswith("_multi_tensor_") and callable(value):
                pairs.append((module, attr, _without_mode(value, mode, _first_list)))
            elif (isinstance(value, type) and issubclass(value, torch.optim.Optimizer)
                  and value.__module__ == module.__name__ and "_init_group" in vars(value)):
                pairs.append((value, "_init_group", _without_mode(vars(value)["_init_group"], mode, _group_params)))
    return pairs
