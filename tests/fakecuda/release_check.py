"""fakecuda's acceptance on one torch release, run by that release's interpreter (test_torch_releases.py).

    /path/to/venv/bin/python tests/fakecuda/release_check.py      # prints one JSON object

Needs only torch (and the numpy it brings) in that interpreter: the repository root is put on sys.path here, so
fakegpu need not be installed there. What it measures, the test asserts:
- training: a small transformer's losses over AdamW steps on fake `cuda` and on the CPU, same seed;
- memory: allocator statistics of a known allocation, empty_cache, device properties of the profile;
- oom: torch.cuda.OutOfMemoryError for a request larger than the device, with the model's message;
- ranks: 2 worker processes (backend "nccl" on gloo, tcp:// rendezvous): DDP gradients and FSDP2 (fully_shard)
  gradients against a single-process CPU reference on the whole batch; `libuv_store` says which TCPStore server
  the build has;
- modules: which of fakegpu's optional dependencies got imported (none should be needed).
Every subprocess has a timeout and every process group an init timeout.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEVICES = "a100:2"
WORLD = 2
WORKER_TIMEOUT_S = 180
INIT_TIMEOUT = datetime.timedelta(seconds=60)
MiB = 1 << 20


def small_lm(torch):
    nn = torch.nn
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(50, 32), nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True),
                         nn.Flatten(), nn.Linear(32 * 8, 50))


def losses(torch, device: str, steps: int = 3) -> list[float]:
    model = small_lm(torch).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    tokens, target = torch.randint(0, 50, (4, 8), generator=gen), torch.randint(0, 50, (4,), generator=gen)
    tokens, target = tokens.to(device), target.to(device)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(tokens), target)
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def memory(torch) -> dict:
    dev = torch.device("cuda", 1)  # untouched so far: a fresh allocator
    x = torch.empty(1000, device=dev)  # 4000 bytes, rounded to 4096 in a 2 MiB small-pool segment
    res = {"allocated": torch.cuda.memory_allocated(dev), "reserved": torch.cuda.memory_reserved(dev),
           "stats_current": torch.cuda.memory_stats(dev)["allocated_bytes.all.current"],
           "device": str(x.device), "is_cuda": x.is_cuda}
    del x
    res.update(allocated_after_free=torch.cuda.memory_allocated(dev), peak=torch.cuda.max_memory_allocated(dev),
               reserved_after_free=torch.cuda.memory_reserved(dev))
    torch.cuda.empty_cache()
    props = torch.cuda.get_device_properties(dev)
    res.update(reserved_after_empty_cache=torch.cuda.memory_reserved(dev), device_count=torch.cuda.device_count(),
               name=props.name, total_memory=props.total_memory, capability=list(torch.cuda.get_device_capability(dev)))
    return res


def oom(torch) -> dict:
    total = torch.cuda.get_device_properties(0).total_memory
    before = torch.cuda.memory_allocated(0)
    try:
        torch.empty(total, dtype=torch.uint8, device="cuda:0")
    except torch.cuda.OutOfMemoryError as exc:
        return {"raised": type(exc).__name__, "message": str(exc).splitlines()[0],
                "allocated_unchanged": torch.cuda.memory_allocated(0) == before}
    return {"raised": None}


def make_model(torch):
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))


def global_batch(torch):
    gen = torch.Generator().manual_seed(1)
    return torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)


def reference_grads(torch) -> dict[str, list]:
    model = make_model(torch)
    x, y = global_batch(torch)
    torch.nn.functional.mse_loss(model(x), y).backward()
    return {name: p.grad.tolist() for name, p in model.named_parameters()}


def worker(url: str, rank: int) -> dict:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import fakegpu.fakecuda as fc

    fc.activate(DEVICES)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=url, rank=rank, world_size=WORLD, timeout=INIT_TIMEOUT)
    device = torch.device("cuda", rank)
    x, y = global_batch(torch)
    xs, ys = x[rank::WORLD].to(device), y[rank::WORLD].to(device)
    ddp = DDP(make_model(torch).to(device), device_ids=[rank])
    torch.nn.functional.mse_loss(ddp(xs), ys).backward()
    params = dict(ddp.module.named_parameters())
    res = {"backend": dist.get_backend(), "ddp_grads": {n: p.grad.cpu().tolist() for n, p in params.items()},
           "ddp_devices": sorted({str(p.grad.device) for p in params.values()})}
    from torch.distributed.fsdp import fully_shard

    model = make_model(torch).to(device)
    fully_shard(model[0])
    fully_shard(model)
    torch.nn.functional.mse_loss(model(xs), ys).backward()
    params = dict(model.named_parameters())
    res.update(fsdp2_grads={n: p.grad.full_tensor().cpu().tolist() for n, p in params.items()},
               fsdp2_devices=sorted({str(p.grad.device) for p in params.values()}))
    dist.barrier()
    dist.destroy_process_group()
    return res


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def store_query(torch) -> str:
    """The tcp:// URL's query: `?use_libuv=0` where torch was built without libuv (Debian's python3-torch).

    TCPStore defaults to its libuv server and raises on such a build, with or without fakecuda; torch's own
    switch (USE_LIBUV=0 or this query) selects the other server, which the CUDA wheels have too.
    """
    from torch.distributed import DistStoreError, TCPStore

    try:
        TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=10), use_libuv=True)
    except DistStoreError as exc:
        if "without libuv" not in str(exc):
            raise
        return "?use_libuv=0"
    return ""


def two_ranks(torch) -> dict:
    url = f"tcp://127.0.0.1:{free_port()}{store_query(torch)}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, __file__, "worker", url, str(r)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(WORLD)]
    outputs = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=WORKER_TIMEOUT_S)
            if p.returncode != 0:
                return {"error": f"worker exit {p.returncode}: {stderr[-3000:]}"}
            outputs.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    ref = reference_grads(torch)

    def max_error(grads: dict) -> float:
        return max((torch.tensor(grads[n]) - torch.tensor(g)).abs().max().item() for n, g in ref.items())

    return {"backends": [o["backend"] for o in outputs], "libuv_store": "use_libuv=0" not in url,
            "ddp_devices": [o["ddp_devices"] for o in outputs], "fsdp2_devices": [o["fsdp2_devices"] for o in outputs],
            "ddp_max_error": max(max_error(o["ddp_grads"]) for o in outputs),
            "fsdp2_max_error": max(max_error(o["fsdp2_grads"]) for o in outputs)}


def main() -> dict:
    import torch

    import fakegpu.fakecuda as fc

    result: dict = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "cpu_losses": losses(torch, "cpu")}
    fc.activate(DEVICES)
    try:
        result.update(memory=memory(torch), fake_losses=losses(torch, "cuda"), oom=oom(torch))
    finally:
        fc.deactivate()
    result["ranks"] = two_ranks(torch)
    result["modules"] = sorted(m for m in ("yaml", "jsonschema", "typer", "docker", "pytest") if m in sys.modules)
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        print(json.dumps(worker(sys.argv[2], int(sys.argv[3]))))
    else:
        print(json.dumps(main()))
