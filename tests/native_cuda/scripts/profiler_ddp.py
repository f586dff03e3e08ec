"""torch.profiler around a few DDP steps on each rank of a torchrun job, unmodified, then one all-reduce of
SAMPLED bytes (a size the price sheet samples the topology model at): run under native mode by
tests/native_cuda/test_cupti.py. Each rank exports its trace to <folder>/rank<r>.json and prints one JSON line."""

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

STEPS = 3
SAMPLED = 4 << 20  # bytes: 1 KiB x 16^3, one of timeline_price.SHEET_SIZES

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(512, 512).cuda(), device_ids=[rank])
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 512, device="cuda")


def step() -> None:
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()


step()  # DDP's first step rebuilds its buckets: outside the profile
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(STEPS):
        step()
    dist.all_reduce(torch.ones(SAMPLED // 4, device="cuda"))
    torch.cuda.synchronize()
prof.export_chrome_trace(str(Path(sys.argv[1]) / f"rank{rank}.json"))
# one write: the ranks share the pipe, and print's text and newline can go out apart, another rank's line between
os.write(1, (json.dumps({"rank": rank, "steps": STEPS, "sampled": SAMPLED, "bucket": 4 * (512 * 512 + 512)})
             + "\n").encode())
dist.destroy_process_group()
