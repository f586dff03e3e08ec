"""A tiny DDP model, one training step with backend nccl (run under torchrun and `fakegpu run`).

Each rank starts from different weights (copied from the host, so they are real bytes in full memory mode).
DDP's construction broadcasts rank 0's parameters, packed into one buffer by torch.cat, a kernel that native mode
does not run: the values that arrive are not rank 0's, but they must be the same on every rank, and no longer
rank 1's own. Then forward, backward, optimizer step, and two collectives whose results are checked on the host."""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).cuda()
with torch.no_grad():
    model[0].weight.copy_(torch.full((32, 16), float(rank + 1)))
before = model[0].weight.detach().cpu()[0, 0].item()
ddp = DDP(model, device_ids=[rank])
after_broadcast = model[0].weight.detach().cpu()[0, 0].item()
opt = torch.optim.AdamW(ddp.parameters())
x, y = torch.randn(8, 16, device="cuda"), torch.randn(8, 4, device="cuda")
torch.nn.functional.mse_loss(ddp(x), y).backward()
opt.step()
torch.cuda.synchronize()
total = torch.tensor([float(rank + 1)], device="cuda")
dist.all_reduce(total)
gathered = [torch.zeros(1, device="cuda") for _ in range(dist.get_world_size())]
dist.all_gather(gathered, torch.tensor([float(rank)], device="cuda"))
fields = [f"rank{rank}", "step-ok", before, after_broadcast, total.item(), *[g.item() for g in gathered]]
os.write(1, (" ".join(map(str, fields)) + "\n").encode())  # one write: the ranks share stdout
dist.destroy_process_group()
