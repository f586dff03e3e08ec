"""Outputs of library calls read on the host (tests/native_cuda/test_device_reads.py): a cuBLAS GEMM's,
matrix-vector and dot product's and a cuDNN convolution's are kernel output; an NCCL all-reduce's is as host-known
as its input (it moves real data).
argv[1] names the case; prints "v ..." with what was read."""

import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

what = sys.argv[1]
if what == "matmul":
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device="cuda")
    print("v", (a @ a).cpu().tolist())
elif what == "mv":
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device="cuda")
    print("v", (a @ a[0]).cpu().tolist())
elif what == "dot":
    a = torch.tensor([1.0, 2.0], device="cuda")
    print("v", torch.dot(a, a).cpu().tolist())
elif what == "conv":
    x = torch.zeros(1, 1, 4, 4, device="cuda")
    w = torch.zeros(1, 1, 3, 3, device="cuda")
    print("v", torch.nn.functional.conv2d(x, w).cpu().shape)
elif what in ("nccl_host", "nccl_kernel"):
    store = Path(tempfile.mkdtemp()) / "store"
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1)
    t = torch.tensor([2.0], device="cuda")  # copied from the host
    if what == "nccl_kernel":
        t = t * 3
    dist.all_reduce(t)
    print("v", t.item())
    dist.destroy_process_group()
