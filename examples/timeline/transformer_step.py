"""A small transformer's training steps, for `fakegpu run --timeline` (see the README): two encoder layers,
bf16 autocast, AdamW. Each step ends with torch.cuda.synchronize(), which is where the timeline's steps end; the
warm-up step before the first one stays out of the trace, as a profiler schedule's warm-up does."""

import torch

torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True, dropout=0.0)
model = torch.nn.TransformerEncoder(layer, num_layers=2).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(16, 128, 256, device="cuda")


def step() -> None:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


step()  # warm-up: cuBLAS handles, autograd's device thread
torch.cuda.synchronize()
for _ in range(4):
    step()
    torch.cuda.synchronize()
print("4 steps done")
