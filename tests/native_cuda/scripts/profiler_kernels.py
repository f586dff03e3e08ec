"""torch.profiler with CUDA activities around matmuls and a small model's training step, unmodified: run under
native mode by tests/native_cuda/test_cupti.py. Prints one JSON line: what the profiler saw. With --no-profiler
the same work runs unprofiled and the line says what it computed."""

import json
import sys

import torch

MATMULS = 3
N = 512


def work() -> float:
    a = torch.randn(N, N, device="cuda")
    b = torch.randn(N, N, device="cuda")
    for _ in range(MATMULS):
        c = torch.mm(a, b)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 64, device="cuda")
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    return float(c.shape[0] + loss.shape.numel())


if "--no-profiler" in sys.argv:
    print(json.dumps({"result": work(), "cuda": torch.cuda.is_available()}))
    sys.exit(0)

trace = sys.argv[1]
from torch.profiler import ProfilerActivity, profile  # noqa: E402

with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    result = work()
prof.export_chrome_trace(trace)
rows = []
for e in prof.key_averages():
    device_total = getattr(e, "device_time_total", None)
    if device_total is None:
        device_total = e.cuda_time_total
    self_device = getattr(e, "self_device_time_total", None)
    if self_device is None:
        self_device = e.self_cuda_time_total
    rows.append(
        {
            "key": e.key,
            "count": e.count,
            "device_time_total": device_total,
            "self_device_time_total": self_device,
            "device_type": str(e.device_type),
        }
    )
print(json.dumps({"result": result, "matmuls": MATMULS, "n": N, "rows": rows}))
