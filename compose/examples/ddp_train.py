"""A tiny DDP job for rehearsals: written for real GPUs (backend nccl, one cuda device per local rank), small
enough that 8 ranks on a 2-core machine finish in seconds under fakecuda. STEPS and WIDTH env vars resize it."""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    width, steps = int(os.environ.get("WIDTH", "256")), int(os.environ.get("STEPS", "5"))
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 1))
                .to(device), device_ids=[local])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(steps):
        x = torch.randn(32, width, device=device)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == steps - 1:
            print(f"rank {rank}/{world} on {torch.cuda.get_device_name(local)} ({device}): loss {loss.item():.4f}, "
                  f"peak allocated {torch.cuda.max_memory_allocated(device)} B", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
