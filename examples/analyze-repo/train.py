"""Trains a small model on whatever GPUs there are (the example analyze-repo judges: fakecuda)."""

import os

import torch
import torch.distributed as dist
from model import TinyNet


def main() -> None:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group(backend="nccl")
    model = TinyNet().cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    x = torch.randn(64, 32, device="cuda")
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    print(f"loss {loss.item():.4f}, peak {torch.cuda.max_memory_allocated() >> 20} MiB")


if __name__ == "__main__":
    main()
