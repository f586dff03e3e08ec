"""Records the small real trace in this folder, mlp-cpu.json.gz, with torch.profiler (from the repository root):

    .venv/bin/python tests/data/traces/record.py cpu tests/data/traces/mlp-cpu.json.gz

It holds CPU ops, the host allocator's [memory] events, record_function annotations and ProfilerStep#N, and no GPU
activity: this machine has no GPU. Under fakecuda (`fakegpu run --mode fakecuda -- ... record.py cuda OUT`) the
profiler's CUDA side fails ("Failed to record CUDA event": its stubs call the real CUDA runtime) and the trace is
the same kind (CPU ops, host [memory] events, since fakecuda tensors live on the CPU), so none is kept. Traces with
kernels and NCCL are written by hand (tests/perf/kineto.py).

A two-layer MLP trained for five steps under a profiler schedule (wait 1, warmup 1, active 3), with
record_function annotations, profile_memory and record_shapes, as a user would profile a training loop.
"""

from __future__ import annotations

import sys

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def main(kind: str, out: str) -> None:
    torch.manual_seed(0)
    device = "cuda" if kind == "cuda" else "cpu"
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.LayerNorm(512),
                                torch.nn.Linear(512, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(64, 256, device=device)
    y = torch.randint(0, 10, (64,), device=device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if kind == "cuda" else [])
    with profile(activities=activities, schedule=schedule(wait=1, warmup=1, active=3), profile_memory=True,
                 record_shapes=True, on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
        for _ in range(5):
            with record_function("forward"):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            prof.step()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
