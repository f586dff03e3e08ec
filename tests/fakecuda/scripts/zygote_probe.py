"""A torchrun worker that says how it was started (tests/fakecuda/test_zygote.py): argv, sys.path[0], folder,
session, parent, fakecuda, threads, its shared pages; then a DDP step whose gradients every rank checks against
the others. Exits with ZYGOTE_EXIT's code on the rank it names."""

import atexit
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import fakegpu.fakecuda as fc


def shared_mib() -> float:
    with open("/proc/self/smaps_rollup") as f:
        return sum(int(line.split()[1]) for line in f if line.startswith(("Shared_Clean", "Shared_Dirty"))) / 1024


rank = int(os.environ["RANK"])
atexit.register(lambda: os.write(1, f"ATEXIT {rank}\n".encode()))  # a worker ends as python ends a script
with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
    parent = f.read().replace(b"\0", b" ").decode()
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 2).cuda())
model(torch.full((4, 8), float(rank + 1), device="cuda")).sum().backward()
grad = model.module.weight.grad.detach().cpu()
grads = [torch.zeros_like(grad) for _ in range(dist.get_world_size())]
dist.all_gather(grads, grad)
row = {"rank": rank, "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "pid": os.getpid(),
       "ppid": os.getppid(), "sid": os.getsid(0), "parent": parent, "fakecuda": fc.is_active(),
       "devices": torch.cuda.device_count(), "name": torch.cuda.get_device_name(0), "threads": torch.get_num_threads(),
       "shared_mib": shared_mib(), "grads_agree": all(torch.equal(g, grads[0]) for g in grads),
       "grad_sum": float(grad.sum())}
os.write(1, ("PROBE " + json.dumps(row) + "\n").encode())  # one write: the ranks share the pipe
dist.barrier()
dist.destroy_process_group()
if os.environ.get("ZYGOTE_EXIT") == str(rank):
    sys.exit(3)
if os.environ.get("ZYGOTE_RAISE") == str(rank):
    raise RuntimeError("rank failed on purpose")
