"""Workloads whose allocator events test_charge_hook.py compares between the C++ and the Python charging hook.

Prints one JSON document: per workload, every allocation and free the allocator model saw (device, requested bytes,
address), in order, and memory_stats() of each device after it. The hook is FAKEGPU_FAKECUDA_HOOK's, and with it
the model: C++ under the C++ hook, Python under the Python one; --no-fast-path: the C++ hook without its fast path.
"""

from __future__ import annotations

import json
import sys

import torch
from torch import nn

import fakegpu.fakecuda as fc

runtime = fc.activate("a100:2")
events: list[tuple] = []
if "--no-fast-path" in sys.argv[1:]:  # the C++ hook with every op through the Python rules
    fc._active["charges"].set_fast(False)


def _listen(index: int):
    def on_event(action: str, address: int, size: int, stream: int, extra: dict) -> None:
        if action in ("alloc", "free_requested"):
            events.append((action, index, size, address))
    return on_event


for device in runtime.devices:
    device.allocator.on_event = _listen(device.index)


def train(model: nn.Module, x: torch.Tensor, steps: int = 2, amp: bool = False) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(steps):
        with torch.autocast("cuda", enabled=amp):
            loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def transformer() -> None:
    layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
    train(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).cuda(), torch.randn(4, 16, 64, device="cuda"))


def convnet() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 8, 3), nn.Flatten(), nn.Linear(8 * 14 * 14, 10)).cuda()
    train(model.to(memory_format=torch.channels_last), torch.randn(4, 3, 32, 32, device="cuda"))


def mlp_amp() -> None:
    layers: list[nn.Module] = []
    for _ in range(4):
        layers += [nn.Linear(64, 64), nn.LayerNorm(64), nn.GELU(), nn.Dropout(0.1)]
    train(nn.Sequential(*layers).cuda(), torch.randn(8, 64, device="cuda"), amp=True)


def products_and_reductions() -> None:
    a = torch.randn(300, 200, device="cuda", requires_grad=True)
    b = torch.randn(300, 200, device="cuda")
    c = a.t() @ b  # a transposed operand cuBLAS reads as it is
    d = a.expand(2, 300, 200).transpose(1, 2) @ b.expand(2, 300, 200)  # stride-0 batch: copied first
    e = torch.addmm(torch.randn(200, device="cuda"), a.t(), b)  # cuBLASLt's bias GEMM
    (c.sum() + d.var(dim=1).sum() + e.argmax(dim=0).float().mean() + a.amax()).backward()
    # the workspaces resized mid-run (torch.backends.cuda's setters): the next GEMMs take the new sizes
    if hasattr(torch._C, "_cuda_setCublasWorkspaceSize"):
        torch._C._cuda_setCublasWorkspaceSize(3 << 20)
        (a.t() @ b).sum().backward()
        torch._C._cuda_setCublasWorkspaceSize(0)
        torch.addmm(torch.randn(200, device="cuda"), a.t(), b)
    torch.nn.functional.layer_norm(a.t(), (300,)).sum().backward()  # a non-contiguous input, forward and backward
    y = torch.nn.functional.layer_norm(a, (200,), torch.ones(200, device="cuda", requires_grad=True))
    y.t().contiguous().t().sum().backward()  # a contiguous input, a non-contiguous dY (the weight's gradient too)


def copies_and_factories() -> None:
    x = torch.randn(1024, 256, device="cuda:0")
    y = x.to("cuda:1")
    host = y.cpu()
    z = torch.empty(1024, 256, device="cuda:1")
    z.copy_(host, non_blocking=True)
    pooled = nn.FractionalMaxPool2d(2, output_ratio=0.5)(torch.randn(2, 3, 16, 16, device="cuda"))
    out = torch.empty(1024, 256, device="cuda:0")
    torch.add(x, 1, out=out)
    x.add_(1).mul_(2)
    idx = torch.tensor([0, 5, 7], device="cuda")
    x.index_put_((idx,), torch.zeros(3, 256, device="cuda"))
    del y, host, z, pooled, out
    torch.cuda.empty_cache()


WORKLOADS = [transformer, convnet, mlp_amp, products_and_reductions, copies_and_factories]

hook = fc._active["charges"]
report = {"hook": type(hook).__name__, "allocator": type(runtime.devices[0].allocator).__name__, "workloads": {}}
for workload in WORKLOADS:
    torch.manual_seed(0)
    events.clear()
    workload()
    report["workloads"][workload.__name__] = {
        "events": list(events),
        "stats": [torch.cuda.memory_stats(i) for i in range(torch.cuda.device_count())],
    }
# how many ops the C++ fast path charged (charge_fast.cpp; None: not installed)
report["fast_ops"] = hook.ext.fast_handled() if hasattr(hook, "ext") else None
report["fast_gemms"] = hook.ext.fast_gemms() if hasattr(hook, "ext") else None
report["fast_reductions"] = hook.ext.fast_reductions() if hasattr(hook, "ext") else None
report["fast_convolutions"] = hook.ext.fast_convolutions() if hasattr(hook, "ext") else None
json.dump(report, sys.stdout)
