"""All-reduce steps under torchrun with backend nccl, each finished on the host (.item()), with a short
process-group timeout so a hung collective meets torch's watchdog within seconds. Each rank prints
`rank R step N value` after each step and `rank R done` at the end; a fault plan decides where it stops."""

import datetime
import os
import sys

import torch
import torch.distributed as dist

rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
timeout = float(os.environ.get("STEPS_TIMEOUT_S", "4"))
dist.init_process_group("nccl", device_id=torch.device("cuda", rank), timeout=datetime.timedelta(seconds=timeout))
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())  # one write: the ranks share the pipe (print may split text and newline)


for step in range(1, steps + 1):
    t = torch.full((4,), float(rank + 1), device="cuda")
    dist.all_reduce(t)
    say(f"rank {rank} step {step} {t[0].item()}")
dist.destroy_process_group()
say(f"rank {rank} done")
