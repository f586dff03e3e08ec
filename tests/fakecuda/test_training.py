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


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def train_convnet(device: str, steps: int = 5, amp_dtype=None) -> list[float]:
    torch.manual_seed(0)
    model = ConvNet().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(32, 3, 16, 16, device=device)
    y = torch.randint(0, 10, (32,), device=device)
    scaler = torch.amp.GradScaler(enabled=amp_dtype is torch.float16)
    losses = []
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        with torch.autocast("cuda", dtype=amp_dtype or torch.float16, enabled=amp_dtype is not None):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        losses.append(nn.functional.cross_entropy(model(x), y).item())  # eval mode: BatchNorm's running stats
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


def test_convnet_losses_match_cpu(fakecuda):
    reference = train_convnet("cpu")
    fakecuda("a100")
    assert reference[4] < reference[0]
    assert train_convnet("cuda") == pytest.approx(reference, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_convnet_trains_under_cuda_autocast(fakecuda, dtype):
    reference = train_convnet("cpu")
    fakecuda("a100")
    losses = train_convnet("cuda", amp_dtype=getattr(torch, dtype))
    # mixed precision: the same trajectory to half-precision tolerance
    assert losses == pytest.approx(reference, rel=2e-2)
