"""Differential tests: the same training script on plain CPU torch and on fake CUDA reaches the same losses."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


def train_mlp(device: str, steps: int = 5) -> list[float]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randn(64, 16, device=device)
    y = torch.randint(0, 4, (64,), device=device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 50, d: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        n = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=tokens.device)
        return self.head(self.encoder(self.embed(tokens), mask=mask, is_causal=True))


def train_lm(device: str, steps: int = 4) -> list[float]:
    torch.manual_seed(0)
    model = TinyLM().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.randint(0, 50, (8, 17), device=device)
    losses = []
    model.train()
    for _ in range(steps):
        logits = model(data[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 50), data[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def test_mlp_losses_match_cpu(fakecuda):
    reference = train_mlp("cpu")
    fakecuda("a100")
    assert train_mlp("cuda") == pytest.approx(reference, rel=1e-6, abs=1e-7)


def test_transformer_lm_losses_match_cpu(fakecuda):
    reference = train_lm("cpu")
    fakecuda("a100")
    assert reference[-1] < reference[0]
    assert train_lm("cuda") == pytest.approx(reference, rel=1e-5, abs=1e-6)


def test_training_leaves_everything_on_the_fake_device(fakecuda):
    fakecuda("a100:2")
    torch.cuda.set_device(1)
    model = nn.Linear(8, 8).cuda()
    model(torch.randn(4, 8, device="cuda")).sum().backward()
    for p in model.parameters():
        assert p.device == torch.device("cuda", 1) and p.is_cuda
        assert isinstance(p, nn.Parameter)
        assert p.grad.device == torch.device("cuda", 1) and p.grad.is_cuda
    assert torch.cuda.memory_allocated(0) == 0
    assert torch.cuda.memory_allocated(1) > 0
