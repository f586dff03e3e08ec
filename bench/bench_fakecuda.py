"""fakecuda overhead: one training step of a small transformer LM on fake `cuda` vs the same on plain CPU torch.

Same process, same model code, steps interleaved (cpu, fake, cpu, fake, ...) so machine noise hits both
alike; reports the median step time of each and their ratio (target: fake/cpu <= 1.10).
Run: .venv/bin/python bench/bench_fakecuda.py [--steps N] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn

import fakegpu.fakecuda as fc


class SmallLM(nn.Module):
    def __init__(self, vocab: int = 1000, d: int = 256, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
        return self.head(self.encoder(self.embed(tokens), mask=mask, is_causal=True))


def make(device: str):
    torch.manual_seed(0)
    model = SmallLM().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, 1000, (16, 65), device=device)
    return model, opt, data


def step(model, opt, data) -> float:
    t0 = time.perf_counter()
    loss = nn.functional.cross_entropy(model(data[:, :-1]).reshape(-1, 1000), data[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    loss.item()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    fc.activate("a100")
    # The CPU side runs with torch-function handling disabled: plain torch, no fakecuda mode on the stack.
    with torch._C.DisableTorchFunction():
        cpu = make("cpu")
    fake = make("cuda")
    cpu_times, fake_times = [], []
    for i in range(args.steps + 2):  # the first two rounds warm both up
        with torch._C.DisableTorchFunction():
            c = step(*cpu)
        f = step(*fake)
        if i >= 2:
            cpu_times.append(c)
            fake_times.append(f)
    fc.deactivate()
    cpu_med, fake_med = statistics.median(cpu_times), statistics.median(fake_times)
    result = {"benchmark": "fakecuda_transformer_step", "steps": args.steps, "torch": torch.__version__,
              "cpu_median_ms": round(cpu_med * 1e3, 3), "fakecuda_median_ms": round(fake_med * 1e3, 3),
              "ratio": round(fake_med / cpu_med, 4), "target": 1.10}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"small transformer step: cpu {result['cpu_median_ms']} ms, fakecuda {result['fakecuda_median_ms']} ms,"
              f" ratio {result['ratio']} (target <= {result['target']})")


if __name__ == "__main__":
    main()
