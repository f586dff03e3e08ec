"""One rank of bench_scale.py's DDP job (run by torchrun in a node container): a small MLP, 5 DDP steps, then one
JSON line with what this rank cost (rank 0 of each node adds its torchrun agent and, with FAKEGPU_SHARE_TORCH=1, the
zygote that forked the workers). Memory is read while every rank is still alive (between two barriers), so
shared pages are divided among all of them: PSS, not RSS, is the rank's share of the host's memory."""

from __future__ import annotations

import json
import os
import time


def _rollup(pid: int | str) -> dict[str, int]:
    keys = {"Rss": "rss_mib", "Pss": "pss_mib", "Pss_Anon": "pss_anon_mib", "Pss_File": "pss_file_mib"}
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in keys:
                out[keys[key]] = int(value.split()[0]) / 1024
    return out


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _process_start(pid: int | str = "self") -> float:
    """The process's start in wall-clock seconds (its /proc stat start time on the boot clock)."""
    with open(f"/proc/{pid}/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


def main() -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    steps = int(os.environ.get("SCALE_STEPS", "5"))
    dist.init_process_group("nccl")
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local % torch.cuda.device_count())
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                    torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ends = []
    for _ in range(steps):
        x = torch.randn(32, 256, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        torch.cuda.synchronize()
        ends.append(time.time())
    # every rank checks the replicas agree, as DDP promises: the job is real, not just started. Not in native
    # mode, where kernels (the sum here, the optimizer's math) do not run and values mean nothing.
    agree = None
    if os.environ.get("FAKEGPU_RUNTIME") != "native":
        first = next(model.parameters()).detach().sum().reshape(1)
        gathered = [torch.zeros_like(first) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, first)
        agree = all(torch.equal(g, gathered[0]) for g in gathered)
    dist.barrier()
    start = _process_start()
    row = {"rank": dist.get_rank(), "world": dist.get_world_size(), "local_rank": local, "agree": agree,
           "first_step_s": ends[0] - start, "step_s": (ends[-1] - ends[0]) / max(1, len(ends) - 1),
           "steps": len(ends), **_rollup("self")}
    if local == 0:  # once per node: the torchrun agent, and the zygote between it and the workers if any
        row["agent"] = _rollup(os.getppid())
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            if b"fakegpu.fakecuda.zygote" in f.read():
                row["zygote"] = row["agent"]
                row["agent"] = _rollup(_parent(os.getppid()))
    os.write(1, ("SCALE " + json.dumps(row) + "\n").encode())  # one write: ranks share the stream
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
