"""The two fixes the March-2024 HF stack needs to run on torch 2.10 under FakeGPU's native accounting mode.

Neither changes what the probe measures: the first replaces a module 4-bit QLoRA never calls, the second moves
a few KB of pickled save plans off the GPU.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import types
from collections.abc import Callable
from typing import Any

OBJECT_COLLECTIVES = ("gather_object", "all_gather_object", "broadcast_object_list", "scatter_object_list")


def install_triton_ops_stub() -> None:
    """bitsandbytes 0.43.0 imports triton.ops.matmul_perf_model for its int8 SwitchBack kernels, and triton 3
    removed triton.ops, so the import of bitsandbytes (through peft and trl) fails without this stub.
    Must run before anything imports bitsandbytes."""
    try:
        import triton
    except ImportError:
        return
    if "triton.ops" in sys.modules or importlib.util.find_spec("triton.ops") is not None:
        return
    ops = types.ModuleType("triton.ops")
    perf_model = types.ModuleType("triton.ops.matmul_perf_model")
    perf_model.early_config_prune = lambda configs, named_args, **kwargs: configs  # type: ignore[attr-defined]
    perf_model.estimate_matmul_time = lambda *args, **kwargs: 0.0  # type: ignore[attr-defined]
    ops.matmul_perf_model = perf_model  # type: ignore[attr-defined]
    sys.modules["triton.ops"] = ops
    sys.modules["triton.ops.matmul_perf_model"] = perf_model
    triton.ops = ops  # type: ignore[attr-defined]


def route_object_collectives_via_gloo() -> Any:
    """In accounting mode FakeGPU's NCCL moves no bytes, so object collectives (pickles sent as uint8 CUDA
    tensors) arrive as zeros and unpickling fails with EOFError in torch.distributed.checkpoint's plan exchange
    during the SHARDED_STATE_DICT epoch save. Sending them over a gloo group of the same ranks keeps the save
    working; on a real GPU those tensors are a few KB, so the memory numbers are unaffected.
    Needs torch.distributed initialised; returns the gloo group."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    gloo = dist.new_group(backend="gloo")
    world = dist.get_world_size()

    def reroute(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn)

        def call(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            group = bound.arguments.get("group")
            # Only whole-world calls: a subgroup would need its own gloo twin, and nothing in this run uses one.
            if group is None or group is dist.group.WORLD or dist.get_world_size(group) == world:
                bound.arguments["group"] = gloo
                if "device" in bound.arguments:
                    bound.arguments["device"] = None
            return fn(*bound.args, **bound.kwargs)

        call.__wrapped__ = fn  # type: ignore[attr-defined]
        return call

    for name in OBJECT_COLLECTIVES:
        wrapped = reroute(getattr(c10d, name))
        setattr(c10d, name, wrapped)
        setattr(dist, name, wrapped)
    return gloo
