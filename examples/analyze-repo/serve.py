"""Serves the model with the fused kernel (the example analyze-repo judges: real-gpu)."""

import torch
from fused import fused_add
from model import TinyNet

if __name__ == "__main__":
    model = TinyNet().to("cuda")
    x = torch.randn(8, 32, device="cuda")
    print(fused_add(model(x), model(x)))
