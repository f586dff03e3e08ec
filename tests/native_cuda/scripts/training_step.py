"""One training step (Linear-ReLU-Linear, AdamW, backward, synchronize) on cuda:0, then exit.

The exit of this script is where PyTorch's autograd exit race shows (issue 13): CUDA's autograd device thread can
drop the last reference to the backward's GraphTask after the main thread began Py_FinalizeEx; the GIL it then
asks for ends it with pthread_exit, whose unwind crosses a noexcept destructor: "terminate called without an
active exception", SIGABRT. tests/native_cuda/scripts/exit_race_loop.sh runs it in a loop under CPU load."""

import os

import torch

m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.AdamW(m.parameters())
x = torch.randn(64, 256, device="cuda")
y = torch.randint(0, 10, (64,), device="cuda")
torch.nn.functional.cross_entropy(m(x), y).backward()
opt.step()
torch.cuda.synchronize()
os.write(1, b"step-ok\n")
