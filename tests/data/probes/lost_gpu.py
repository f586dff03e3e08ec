"""A GPU lost mid-run (a fault plan: Xid 79 on cuda:1 after 20 allocations) as PyTorch sees it: the next call on
cuda:1 raises, cuda:0 keeps computing, and nvidia-smi names the lost GPU. Prints one JSON line."""

import json
import subprocess

import torch

out = {}
# 64 MiB each: past the caching allocator's 20 MiB large-pool segments, so each is one cudaMalloc.
keep = [torch.empty(64 << 20, dtype=torch.uint8, device="cuda:1") for _ in range(20)]
for what, call in (("alloc", lambda: torch.empty(64 << 20, dtype=torch.uint8, device="cuda:1")),
                   ("op", lambda: keep[0].float().sum().item())):
    try:
        call()
        out[what] = None
    except Exception as e:  # which class it is, is what we report
        out[what] = [type(e).__name__, isinstance(e, RuntimeError), str(e).splitlines()[0]]
x = torch.arange(1000, device="cuda:0", dtype=torch.float32)
out["cuda0"] = float((x * 2).sum().item())  # native mode runs no kernel: only that it answers counts there
smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
out["smi"] = [smi.returncode, smi.stdout.splitlines()[0]]
print(json.dumps(out))
