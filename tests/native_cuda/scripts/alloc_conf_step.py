"""Run by test_vmm.py under `fakegpu run` with a PYTORCH_CUDA_ALLOC_CONF (expandable segments or the cudaMallocAsync
backend): a transformer training step, how memory_reserved grows, mem_get_info, OOM at the capacity. Prints JSON."""

import json
import subprocess
import sys
import time

import torch

MiB = 1 << 20
out: dict = {"backend": torch.cuda.get_allocator_backend()}

growth = []
keep = []
for n in (1, 3, 5, 30, 70, 150):  # MiB
    keep.append(torch.empty(n * MiB, dtype=torch.uint8, device="cuda"))
    growth.append(torch.cuda.memory_reserved())
out["growth"] = growth
del keep

torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
model = torch.nn.TransformerEncoder(layer, 2).cuda()
opt = torch.optim.AdamW(model.parameters())
for _ in range(2):
    loss = model(torch.randn(8, 64, 256, device="cuda")).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
torch.cuda.synchronize()
out["step_allocated"] = torch.cuda.memory_allocated()
free, total = torch.cuda.mem_get_info()
out["step"] = {"reserved": torch.cuda.memory_reserved(), "free": free, "total": total}
if len(sys.argv) > 1:  # nvidia-smi's view of this process, once the shared state is republished
    time.sleep(0.3)
    smi = subprocess.run(
        [sys.argv[1], "--query-compute-apps=used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    )
    out["smi_used_mib"] = int(smi.stdout.split()[0])
stats = torch.cuda.memory_stats()
out["stats_keys"] = len(stats)
out["stats_reserved"] = stats.get("reserved_bytes.all.current")

big = []
try:
    while True:
        big.append(torch.empty(10 << 30, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError:
    out["oom"] = {"chunks": len(big), "reserved": torch.cuda.memory_reserved(), "free": torch.cuda.mem_get_info()[0]}
out["max_reserved"] = torch.cuda.max_memory_reserved()
del big
torch.cuda.empty_cache()
free, total = torch.cuda.mem_get_info()
out["after_empty"] = {"reserved": torch.cuda.memory_reserved(), "free": free}
print(json.dumps(out))
