"""Native mode across two cluster nodes (one container each): PyPI's CUDA torch, unmodified, on FakeGPU's shims,
with nccl for CUDA tensors and gloo for CPU ones ("cpu:gloo,cuda:nccl", what init_process_group() picks without a
backend). Bytes each rank puts on its device (its host name, its weights) must arrive whole on every rank through
all_gather, DDP's parameter broadcast and gradient all-reduce; Python objects of different sizes through
all_gather_object and broadcast_object_list, which torch runs on the CPU backend of such a group. (With "nccl"
alone it would run them on the GPU and size their buffers with a max or a sum computed by a kernel, which native
mode does not run.) Prints one JSON line per rank."""

import hashlib
import json
import os
import socket

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("cpu:gloo,cuda:nccl", device_id=torch.device("cuda", local))
name = torch.tensor(list(socket.gethostname().encode().ljust(64, b"\0")), dtype=torch.uint8).cuda()
names = [torch.empty_like(name) for _ in range(dist.get_world_size())]
dist.all_gather(names, name)
hosts = [bytes(n.cpu().tolist()).rstrip(b"\0").decode() for n in names]
big = torch.full((3 << 20,), float(rank + 1), device="cuda")  # 12 MiB: many rounds of the transport's slot
dist.all_reduce(big)
big_ok = bool((big.cpu() == 3.0).all())
model = torch.nn.Linear(16, 4).cuda()
with torch.no_grad():  # each rank its own weights, copied from the host: real bytes
    model.weight.copy_(torch.full((4, 16), float(rank + 1)))
ddp = DDP(model, device_ids=[local])
ddp(torch.full((8, 16), float(rank + 1), device="cuda")).sum().backward()
torch.cuda.synchronize()
total = torch.tensor([float(rank + 1)], device="cuda")
dist.all_reduce(total)


objects: list = [None] * dist.get_world_size()
dist.all_gather_object(objects, {"rank": rank, "host": socket.gethostname(), "pad": "x" * (1000 * (rank + 1))})
shared = [{"from": socket.gethostname(), "sizes": [len(o["pad"]) for o in objects]} if rank == 1 else None]
dist.broadcast_object_list(shared, src=1)


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().cpu().numpy().tobytes()).hexdigest()[:16]


print(json.dumps({"rank": rank, "hosts": hosts, "big_ok": big_ok, "total": total.item(),
                  "weight": digest(model.weight), "grad": digest(model.weight.grad),
                  "objects": [{k: o[k] for k in ("rank", "host")} | {"pad": len(o["pad"])} for o in objects],
                  "broadcast": shared[0]}), flush=True)
dist.destroy_process_group()
