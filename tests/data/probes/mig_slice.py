"""One MIG slice as a CUDA process sees it: device count, properties, mem_get_info, and where it runs out of memory.
Prints one JSON line."""

import json

import torch

n = torch.cuda.device_count()
out = {"count": n, "devices": []}
for i in range(n):
    p = torch.cuda.get_device_properties(i)
    out["devices"].append({"name": p.name, "total": p.total_memory, "sms": p.multi_processor_count,
                           "mem_get_info": list(torch.cuda.mem_get_info(i))})
total = out["devices"][0]["total"]
held = torch.empty(total // 2, dtype=torch.uint8, device="cuda:0")
try:
    more = torch.empty(total // 2 + (1 << 30), dtype=torch.uint8, device="cuda:0")
    out["oom"] = None
except torch.OutOfMemoryError as e:
    out["oom"] = str(e).splitlines()[0]
print(json.dumps(out))
