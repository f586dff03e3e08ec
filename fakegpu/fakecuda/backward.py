"""The fake CUDA surface inside autograd's backward: the mode is on the stack while the engine runs Python.

Why it is needed: `loss.backward()` reaches the engine from inside FakeCudaMode.__torch_function__, and torch
pops a mode off the torch-function stack for the duration of its own handler (so that calling `func` there
does not recurse). The engine captures the thread-local state at that moment, with the stack empty, and every
Python callback it runs (tensor hooks, Node hooks, post-accumulate-grad hooks, module full backward hooks,
autograd.Function.backward, checkpoint recomputation, queue_callback) ran without fakecuda: `device="cuda"`
reached the real, absent CUDA.

What this does:
- wraps torch.autograd's engine entry `_engine_run_backward` (the one function that both backward() and
  grad() call, and the one torch.compiler itself swaps the same way) so that the mode is pushed for the
  engine's run; the engine then hands that stack to every Python callback;
- marks the thread as "in backward" for that run. Gradients that C++ backward kernels produce are fresh
  tensors, and a fresh tensor reaches Python as a plain CPU tensor (only tensors first seen in Python carry a
  badge). Inside backward the mode therefore lets such plain tensors meet fake CUDA ones (no device-mismatch
  error) and badges the result with the fake device;
- pushes the mode around saved-tensor pack hooks (`torch.autograd.graph.saved_tensors_hooks`, which
  checkpoint uses): C++ calls them from inside an op, that is from inside the mode's own handler, where the
  mode is off the stack for the same reason;
- badges the gradient a `Tensor.register_hook` hook receives with its tensor's device, so `grad.device` is
  `cuda:N` there (the common hook; Node hooks still see plain CPU grads);
- badges the gradients a custom `autograd.Function`'s backward receives (its node's `apply`, which the engine calls
  outside any op): each plain one whose storage is charged with that device, else (zeros the engine made for an
  output that got no gradient) with the device its forward output was on, which `Function.apply` notes on the
  node. Libraries pick kernels by `grad.device` / `grad.is_cuda` there, and make their buffers on it.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch
import torch.autograd
import torch.autograd.graph

from fakegpu.fakecuda.copies import dense
from fakegpu.fakecuda.tensor import FAKE_TYPES, StorageTracker, badge, storage_key


class _Local(threading.local):
    depth = 0  # a class default: a thread that never ran backward reads it without an AttributeError raised


_local = _Local()
_saved: list[tuple[Any, str, Any]] = []


def in_backward() -> bool:
    """True while this thread runs (Python called from) an autograd engine run started under fakecuda."""
    return _local.depth > 0


# what a gradient in the engine is: a plain tensor made in C++, or one Python saw before (badged as fake CUDA)
_ENGINE_TYPES = (torch.Tensor, *FAKE_TYPES)


def accumulated_in_place(tracker: StorageTracker, args: tuple, kwargs: dict, out: Any) -> torch.Tensor | None:
    """The gradient the autograd engine would have added the other into, in place, on CUDA.

    The engine sums a gradient arriving for an input that already has one (InputBuffer::accumulate, `old + new`)
    into the one it holds, the first argument, when it holds the only reference to it, unless a dispatch mode is
    active, when it adds out of place (a mode may not tolerate mutation). fakecuda's Python charging mode is one,
    so every such sum would otherwise cost one more gradient-sized tensor than on CUDA. The test is the engine's: no
    grad mode, a plain dense tensor whose storage nothing else holds (tracker.sole_owner). Gradients that reached
    Python before (the loss's, a badged fake tensor) qualify as well. Never the new gradient: on a real H200 (torch
    2.11) GPT-2's tied embedding and LM head add theirs out of place, the held one (the head's, a transposed view)
    not qualifying."""
    if torch.is_grad_enabled() or kwargs.get("alpha", 1) != 1 or len(args) != 2 or not isinstance(out, torch.Tensor):
        return None
    t = args[0]
    if (type(t) in _ENGINE_TYPES and t.layout is torch.strided and t.shape == out.shape and t.dtype == out.dtype
            and tracker.sole_owner(t) and dense(t)):
        return t
    return None


def _on_stack(mode: Any) -> bool:
    get = torch._C._get_function_stack_at
    return any(get(i) is mode for i in range(torch._C._len_torch_function_stack()))


def under_mode(mode: Any, fn: Any, backward: bool = False) -> Any:
    """`fn`, called with the mode on the torch-function stack (pushed only when it is not there already)."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if backward:
            _local.depth += 1
        try:
            if _on_stack(mode):  # e.g. backward() called from a hook that already runs under the mode
                return fn(*args, **kwargs)
            with mode:  # push; popped on the way out
                return fn(*args, **kwargs)
        finally:
            if backward:
                _local.depth -= 1

    return call


def install(mode: Any) -> None:
    """Route autograd's engine entry and saved-tensor hook registration through the mode, and badge custom
    Functions' gradients; see uninstall()."""
    if _saved:
        return
    run_backward = under_mode(mode, torch.autograd.graph._engine_run_backward, backward=True)
    push_hooks = torch._C._autograd._push_saved_tensors_default_hooks

    def push_saved_tensors_hooks(pack_hook, unpack_hook):
        # unpack runs in backward (covered by the engine entry) or in plain Python; pack runs inside ops
        return push_hooks(under_mode(mode, pack_hook), unpack_hook)

    replacements = [(torch.autograd.graph, "_engine_run_backward", run_backward),
                    (torch.autograd, "_engine_run_backward", run_backward),
                    (torch._C._autograd, "_push_saved_tensors_default_hooks", push_saved_tensors_hooks)]
    replacements += _function_replacements(mode)
    for owner, name, fn in replacements:
        # (a class's own entry, not what getattr binds: Function.apply is a classmethod)
        _saved.append((owner, name, owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)))
        setattr(owner, name, fn)


def _function_replacements(mode: Any) -> list[tuple[Any, str, Any]]:
    """Function.apply noting its outputs' fake devices on their node, and the node's apply (apply_boxed too, where
    torch has it) badging the gradients its backward receives."""
    from torch.autograd.function import BackwardCFunction, Function

    original = Function.__dict__["apply"]  # (a Python classmethod, or from torch 2.15 _FunctionBase's C one)

    def apply(cls, *args, **kwargs):
        out = original.__get__(None, cls)(*args, **kwargs)
        outputs = out if type(out) is tuple else (out,)
        node = None
        for o in outputs:
            if isinstance(o, torch.Tensor) and o.grad_fn is not None:
                node = o.grad_fn
                break
        if node is not None and type(node) is getattr(cls, "_backward_cls", None):
            # one per output, in order: backward's gradients follow the outputs
            node._fc_devices = tuple(o._fc_index if type(o) in FAKE_TYPES else None for o in outputs)
        return out

    tracker = mode.tracker

    def badged(node: Any, grads: Any) -> None:
        devices = getattr(node, "_fc_devices", ())
        live = tracker.live
        for i, g in enumerate(grads):
            if type(g) is torch.Tensor:
                entry = live.get(storage_key(g))
                index = entry[0] if entry is not None else devices[i] if i < len(devices) else None
                if index is not None:
                    badge(g, index, tracker)

    node_apply = BackwardCFunction.__dict__["apply"]

    def apply_node(self, *args):
        badged(self, args)
        return node_apply(self, *args)

    replacements = [(Function, "apply", classmethod(apply)), (BackwardCFunction, "apply", apply_node)]
    boxed = BackwardCFunction.__dict__.get("apply_boxed")
    if boxed is not None:  # torch 2.15: the gradients arrive as one list (boxed_grads_call)
        def apply_boxed(self, *args):
            badged(self, args[0] if len(args) == 1 and type(args[0]) is list else args)
            return boxed(self, *args)

        replacements.append((BackwardCFunction, "apply_boxed", apply_boxed))
    return replacements


def uninstall() -> None:
    while _saved:
        owner, name, original = _saved.pop()
        setattr(owner, name, original)


def wrap_tensor_hook(mode: Any, tensor: torch.Tensor, hook: Any) -> Any:
    """`hook` for Tensor.register_hook on a fake tensor: its gradient arrives badged with the tensor's device."""
    if type(tensor) not in FAKE_TYPES:
        return hook
    index = tensor._fc_index

    @functools.wraps(hook)
    def badged(grad):
        if type(grad) is torch.Tensor:
            badge(grad, index, mode.tracker)
        return hook(grad)

    return badged
