"""Run under `fakegpu run --devices 'a100:mig=3g.40gb+2g.20gb+1g.10gb'` as `mig_memory.py TORCH_PYTHON` (the
probe itself needs pynvml; its torch processes run with TORCH_PYTHON): processes on two MIG slices hold memory;
NVML (real pynvml) charges each process to its slice, lists it there with its instance's IDs, and a process on a
slice another process already fills runs out of memory at what the slice has left. Prints one JSON document."""

import json
import subprocess
import sys
import time

HOLD = r"""
import sys, torch
x = torch.empty(int(sys.argv[1]) << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("held", flush=True)
sys.stdin.readline()
"""
TRY = r"""
import sys, torch
try:
    x = torch.empty(int(sys.argv[1]) << 20, dtype=torch.uint8, device="cuda")
    print("ok")
except torch.OutOfMemoryError as e:
    print("oom")
"""


def child(code: str, mig: str, mib: int) -> subprocess.Popen:
    env = {**__import__("os").environ, "CUDA_VISIBLE_DEVICES": mig}
    return subprocess.Popen([sys.argv[1], "-c", code, str(mib)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


import pynvml as n  # noqa: E402

n.nvmlInit()
board = n.nvmlDeviceGetHandleByIndex(0)
migs = []
for i in range(n.nvmlDeviceGetMaxMigDeviceCount(board)):  # the most there could be; the layout has fewer
    try:
        migs.append(n.nvmlDeviceGetMigDeviceHandleByIndex(board, i))
    except n.NVMLError_NotFound:
        pass
uuids = [n.nvmlDeviceGetUUID(m) for m in migs]
a, b = child(HOLD, uuids[1], 2048), child(HOLD, uuids[2], 6144)  # 2 GiB on the 2g.20gb, 6 GiB on the 1g.10gb
for p in (a, b):
    assert p.stdout.readline().strip() == "held"
time.sleep(0.2)
out = {"pids": [a.pid, b.pid], "slices": []}
for m in migs:
    procs = n.nvmlDeviceGetComputeRunningProcesses(m)
    out["slices"].append({"gi": n.nvmlDeviceGetGpuInstanceId(m), "used": n.nvmlDeviceGetMemoryInfo(m).used,
                          "procs": [[p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId] for p in procs]})
everyone = n.nvmlDeviceGetComputeRunningProcesses(board)
out["board_procs"] = [[p.pid, p.gpuInstanceId, p.computeInstanceId] for p in everyone]
# The 1g.10gb has 9728 MiB: with 6 GiB (and a context) held there, 4 GiB more does not fit, on the 2g.20gb it does.
tries = {}
for name, mig in (("same_slice", uuids[2]), ("other_slice", uuids[1])):
    t = child(TRY, mig, 4096)
    tries[name] = t.communicate(timeout=120)[0].strip()
out["tries"] = tries
out["smi"] = subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout
for p in (a, b):
    p.communicate("\n", timeout=60)
print(json.dumps(out))
