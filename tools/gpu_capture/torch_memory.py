"""PyTorch on the GPU: device properties, what the context, cuBLAS, cuDNN and attention cost outside and inside the
caching allocator, how requests round to blocks and segments, the OOM texts, and nvidia-smi while a process holds
memory. One JSON document on stdout; nvidia-smi's views of the held memory go to OUT_DIR.

    python torch_memory.py OUT_DIR
    python torch_memory.py --points     # the checkpoints only (what fakecuda can run: no 90%-of-memory tensor)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

MIB, GIB = 1 << 20, 1 << 30


def nvml_used() -> dict:
    try:
        import pynvml as N

        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        mine = [p.usedGpuMemory for p in N.nvmlDeviceGetComputeRunningProcesses(h) if p.pid == os.getpid()]
        return {"device_used": N.nvmlDeviceGetMemoryInfo(h).used, "process_used": mine[0] if mine else None}
    except Exception as exc:
        return {"error": str(exc)}


def point() -> dict:
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
            "peak_allocated": torch.cuda.max_memory_allocated(), "free": free, "total": total, "nvml": nvml_used()}


def props() -> dict:
    p = torch.cuda.get_device_properties(0)
    out = {}
    for name in dir(p):
        if name.startswith("_"):
            continue
        v = getattr(p, name)
        if callable(v):
            continue
        out[name] = v if isinstance(v, (int, float, str, bool, type(None))) else str(v)
    return out


def rounding() -> list[dict]:
    """Block and segment per request size, each from an emptied cache."""
    rows = []
    for nbytes in (1, 511, 512, 513, MIB - 1, MIB, MIB + 1, 2 * MIB, 10 * MIB - 1, 10 * MIB, 10 * MIB + 1,
                   20 * MIB + 1, 100 * MIB + 3, GIB + 1):
        torch.cuda.empty_cache()
        a0, r0 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        rows.append({"bytes": nbytes, "allocated": torch.cuda.memory_allocated() - a0,
                     "reserved": torch.cuda.memory_reserved() - r0})
        del t
    torch.cuda.empty_cache()
    return rows


def oom_texts() -> dict:
    out = {}
    try:
        torch.empty(512 * GIB, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as exc:
        out["huge"] = str(exc)
    hold = torch.empty(int(torch.cuda.mem_get_info()[0] * 0.9), dtype=torch.uint8, device="cuda")
    try:
        torch.empty(20 * GIB, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as exc:
        out["nearly_full"] = str(exc)
        out["class"] = f"{type(exc).__module__}.{type(exc).__qualname__}"
    del hold
    torch.cuda.empty_cache()
    return out


def smi_while_holding(out_dir: str) -> dict:
    hold = torch.empty(10 * GIB, dtype=torch.uint8, device="cuda")
    hold.fill_(1)
    torch.cuda.synchronize()
    views = {"default": [], "q": ["-q", "-d", "MEMORY,PIDS,UTILIZATION"], "qx": ["-q", "-x"],
             "apps": ["--query-compute-apps=pid,process_name,used_memory,gpu_uuid,gpu_bus_id", "--format=csv"]}
    rcs = {}
    for name, args in views.items():
        p = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True)
        rcs[name] = p.returncode
        with open(os.path.join(out_dir, f"smi_holding_{name}.out"), "w") as f:
            f.write(p.stdout + p.stderr)
    at = point()
    del hold
    torch.cuda.empty_cache()
    return {"rc": rcs, "point": at, "pid": os.getpid()}


def points() -> dict:
    """Memory through init, the first kernel, cuBLAS, cuDNN and SDPA, and after emptying the cache."""
    pts = {}
    torch.cuda.init()
    pts["init"] = point()
    x = torch.ones(1, device="cuda")
    pts["first_tensor"] = point()
    a = torch.randn(1024, 1024, device="cuda")
    pts["randn_4MiB"] = point()
    b = a @ a
    pts["matmul_fp32"] = point()
    c = a.bfloat16() @ a.bfloat16()
    pts["matmul_bf16"] = point()
    torch.backends.cudnn.benchmark = False
    img = torch.randn(8, 64, 56, 56, device="cuda")
    w = torch.randn(64, 64, 3, 3, device="cuda")
    y = F.conv2d(img, w, padding=1)
    pts["conv2d"] = point()
    q = torch.randn(4, 16, 1024, 128, device="cuda", dtype=torch.bfloat16)
    o = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    pts["sdpa_bf16"] = point()
    del a, b, c, img, w, y, q, o
    torch.cuda.empty_cache()
    pts["emptied"] = point()
    del x
    return pts


def main(out_dir: str) -> int:
    doc: dict = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                 "nccl": list(torch.cuda.nccl.version()) if torch.cuda.is_available() else None,
                 "env": {k: v for k, v in os.environ.items() if k.startswith(("CUDA", "PYTORCH", "CUBLAS", "NCCL"))}}
    doc["before_init"] = nvml_used()
    doc["device_count"] = torch.cuda.device_count()
    doc["capability"] = list(torch.cuda.get_device_capability(0))
    doc["arch_list"] = torch.cuda.get_arch_list()
    doc["props"] = props()
    doc["points"] = points()
    doc["memory_stats_keys"] = sorted(torch.cuda.memory_stats())
    doc["rounding"] = rounding()
    doc["oom"] = oom_texts()
    doc["holding"] = smi_while_holding(out_dir)
    try:
        doc["utilization"] = torch.cuda.utilization()
        doc["memory_usage"] = torch.cuda.memory_usage()
    except Exception as exc:
        doc["utilization"] = str(exc)
    json.dump(doc, sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--points"]:
        json.dump(points(), sys.stdout, indent=1)
        sys.exit(0)
    sys.exit(main(sys.argv[1]))
