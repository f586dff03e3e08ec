"""One training step of a small conv net (Conv2d, BatchNorm2d, ReLU, pooling, Linear; AdamW) on `cuda`.

Run under `fakegpu run --mode native`: torch reaches cuDNN for convolutions and batch norm. Kernels do not
run in native mode, so no value is checked; prints what the test reads: the cuDNN version torch sees and the
allocator's peak.
"""

from __future__ import annotations

import torch
from torch import nn


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(8, 3, 32, 32, device="cuda")
    y = torch.randint(0, 10, (8,), device="cuda")
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print("cudnn", torch.backends.cudnn.is_available(), torch.backends.cudnn.enabled, torch.backends.cudnn.version())
    print("peak", torch.cuda.max_memory_allocated())


if __name__ == "__main__":
    main()
