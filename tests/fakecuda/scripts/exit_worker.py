"""A training script that ends the way users' scripts do, for the exit tests (test_exit.py).

    exit_worker.py KIND DESTROY [spawn]

KIND: ddp | fsdp1 | fsdp2. DESTROY: 1 calls dist.destroy_process_group() at the end, 0 just returns (the issue-13
case). Without "spawn" the script is a torchrun worker (env://); with it, it starts WORLD ranks itself through
torch.multiprocessing.spawn over tcp://. Each rank prints one line `rank R KIND VALUE` and nothing is written
after; the tests check the exit status and that line. Needs fakecuda on from the environment (FAKEGPU_RUNTIME).
"""

from __future__ import annotations

import datetime
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

WORLD = 2
TIMEOUT = datetime.timedelta(seconds=60)


def train(kind: str, rank: int, world: int) -> float:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2)).cuda()
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[torch.cuda.current_device()])
    elif kind == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        # A torch.device, not an int: on a CPU-only torch build (Debian's) FSDP turns an int into a device through
        # torch.accelerator, which reports none there.
        model = FSDP(model, device_id=torch.device("cuda", torch.cuda.current_device()), use_orig_params=True)
    elif kind == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        fully_shard(model[0])
        fully_shard(model)
    else:
        raise SystemExit(f"unknown kind {kind}")
    x = torch.randn(4, 8, device="cuda") + rank
    model(x).pow(2).mean().backward()
    t = torch.full((1,), float(rank + 1), device="cuda")
    dist.all_reduce(t)
    return t.item()


def run(rank: int, world: int, kind: str, destroy: bool, url: str | None) -> None:
    torch.cuda.set_device(rank % torch.cuda.device_count())
    if url is None:
        dist.init_process_group("nccl", timeout=TIMEOUT)  # env:// from torchrun
    else:
        dist.init_process_group("nccl", init_method=url, rank=rank, world_size=world, timeout=TIMEOUT)
    value = train(kind, rank, world)
    sys.stdout.write(f"rank {rank} {kind} {value:g}\n")  # one write: print's two would interleave across ranks
    sys.stdout.flush()
    if destroy:
        dist.destroy_process_group()


def main(argv: list[str]) -> None:
    kind, destroy = argv[0], argv[1] == "1"
    if len(argv) > 2 and argv[2] == "spawn":
        import socket

        import torch.multiprocessing as mp

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(run, args=(WORLD, kind, destroy, f"tcp://127.0.0.1:{port}"), nprocs=WORLD)
    else:
        run(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), kind, destroy, None)


if __name__ == "__main__":
    main(sys.argv[1:])
