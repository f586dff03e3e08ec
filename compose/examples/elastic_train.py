"""A small DDP job for elastic rehearsals (`torchrun --max-restarts N --rdzv-backend c10d`): it runs long enough
to be hit by `fakegpu cluster fault ... kill-workers`, printing one line per step with the worker group's start
(TORCHELASTIC_RESTART_COUNT), so a restart is visible in the output. It keeps no checkpoint: after a restart it
starts over, as a job without one would. STEPS (10) and STEP_S (seconds per step, 0.3) resize it; PG_TIMEOUT_S sets
the process group's timeout (torch's default otherwise), after which a hung collective meets NCCL's watchdog."""

import datetime
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    timeout = os.environ.get("PG_TIMEOUT_S")
    dist.init_process_group("nccl", **({"timeout": datetime.timedelta(seconds=float(timeout))} if timeout else {}))
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    steps, pause = int(os.environ.get("STEPS", "10")), float(os.environ.get("STEP_S", "0.3"))
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(64, 1).to(device), device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, steps + 1):
        loss = model(torch.randn(16, 64, device=device)).pow(2).mean()
        opt.zero_grad()
        loss.backward()  # DDP's all-reduce: a dead peer shows up here
        opt.step()
        print(f"rank {rank}/{world} restart {restart} step {step}/{steps} loss {loss.item():.4f}", flush=True)
        time.sleep(pause)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
