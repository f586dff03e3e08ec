"""Memory checkpoints of one process on `cuda`: run the same way under native mode and under fakecuda.

    python tests/memory_fidelity/probe.py workloads [NAME ...] --out FILE
    python tests/memory_fidelity/probe.py opdb [--ops a,b,...] [--samples N] --out FILE

Nothing here knows which mode it runs in: it is an ordinary CUDA program. Inputs are made on the CPU from a fixed
seed and then moved, so both modes see the same values (native mode does not run kernels; values it would
compute are not relied on). Every case starts from an emptied cache and its figures are relative to the
allocation at its start: `allocated`, `peak_allocated`, and `reserved` / `peak_reserved` (segments the case
itself made). The output is one JSON document; harness.py compares two of them.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

DEV = "cuda"


class Meter:
    """Checkpoints of one case, relative to where it started."""

    def __init__(self) -> None:
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        self.base = torch.cuda.memory_allocated()
        self.base_reserved = torch.cuda.memory_reserved()
        torch.cuda.reset_peak_memory_stats()
        self.points: dict[str, dict[str, int]] = {}

    def mark(self, name: str) -> None:
        torch.cuda.synchronize()
        self.points[name] = {
            "allocated": torch.cuda.memory_allocated() - self.base,
            "peak_allocated": torch.cuda.max_memory_allocated() - self.base,
            "reserved": torch.cuda.memory_reserved() - self.base_reserved,
            "peak_reserved": torch.cuda.max_memory_reserved() - self.base_reserved,
        }
        torch.cuda.reset_peak_memory_stats()  # each checkpoint's peak covers the stretch since the last one


def cpu_randn(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def on_dev(t: torch.Tensor) -> torch.Tensor:
    return t.to(DEV)


def train_steps(meter: Meter, model: nn.Module, batch: Callable[[], tuple], loss_of: Callable, optimizer,
                steps: int, scaler=None, autocast: torch.dtype | None = None) -> None:
    meter.mark("setup")
    for step in range(steps):
        inputs = batch()
        ctx = torch.autocast(DEV, dtype=autocast) if autocast else contextlib.nullcontext()
        with ctx:
            loss = loss_of(model, *inputs)
        meter.mark(f"forward{step}")
        (scaler.scale(loss) if scaler else loss).backward()
        meter.mark(f"backward{step}")
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        del loss, inputs
        meter.mark(f"step{step}")


def forward_backward(meter: Meter, forward: Callable[[], torch.Tensor]) -> None:
    """Checkpoints after setup, after `forward()` and after backward of its sum."""
    meter.mark("setup")
    y = forward()
    meter.mark("forward")
    y.float().sum().backward()
    meter.mark("backward")


# -- allocation traces (--trace): the allocator's own event sequence, to find where two modes first diverge

class Trace:
    """Allocator events of one case as (action, bytes, where, segment+offset): `alloc`, `free` (the request in
    512-byte granules), `segment_alloc`, `segment_free`. Native mode's come from PyTorch's memory history (the
    real caching allocator); fakecuda's from its allocator model. `where` is the innermost Python frame outside
    fakegpu and torch's dispatch machinery (empty on autograd's C++ thread)."""

    def __init__(self) -> None:
        self.fake = "fakegpu.fakecuda" in sys.modules
        self.events: list[list] = []
        if self.fake:
            self._patch_model()
        else:
            torch.cuda.memory._record_memory_history(max_entries=2_000_000, context="alloc", stacks="python")

    @staticmethod
    def _where() -> str:
        for frame in reversed(traceback.extract_stack()[:-3]):
            if not any(part in frame.filename for part in ("fakegpu", "_dynamo", "_python_dispatch", "overrides")):
                return f"{Path(frame.filename).name}:{frame.lineno}:{frame.name}"
        return ""

    def _patch_model(self) -> None:
        # the model's own event callback (allocator.py's, and allocator.cpp's under the C++ hook): the request's
        # size for alloc and free, the segment's for segment_alloc / segment_free, as PyTorch's history records
        import fakegpu.fakecuda as fc

        events, where = self.events, self._where
        names = {"alloc": "alloc", "free_requested": "free", "segment_alloc": "segment_alloc",
                 "segment_free": "segment_free"}

        def on_event(action: str, address: int, size: int, stream: int, extra: dict) -> None:
            name = names.get(action)
            if name is not None:
                events.append([name, size if name.startswith("segment") else _block(size), where(), address])

        self._devices = fc.active_runtime().devices
        for device in self._devices:
            device.allocator.on_event = on_event

    def stop(self) -> list[list]:
        if self.fake:
            for device in self._devices:
                device.allocator.on_event = None
            return _locate(self.events)
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        out = []
        for e in snap["device_traces"][0]:
            if e["action"] not in ("alloc", "free_requested", "segment_alloc", "segment_free"):
                continue
            frames = [f for f in e.get("frames", []) if f["filename"].endswith(".py")]
            where = f"{Path(frames[0]['filename']).name}:{frames[0]['line']}:{frames[0]['name']}" if frames else ""
            size = e["size"] if e["action"].startswith("segment") else _block(e["size"])
            out.append([{"free_requested": "free"}.get(e["action"], e["action"]), size, where, e["addr"]])
        return _locate(out)


def _block(requested: int) -> int:
    """A request as the allocator's 512-byte granule (native mode's trace records requests, not blocks)."""
    return max(512, -(-requested // 512) * 512)


def _locate(events: list[list]) -> list[list]:
    """Addresses as segment ordinal + offset, comparable across the modes' address spaces ("?" for blocks in
    segments made before the trace began)."""
    segments: list[tuple[int, int, int]] = []
    for e in events:
        action, size, _where, addr = e
        if action == "segment_alloc":
            segments.append((addr, size, len(segments)))
            e[3] = f"s{len(segments) - 1}"
            continue
        seg = next((s for s in segments if s[0] <= addr < s[0] + s[1]), None)
        e[3] = f"s{seg[2]}+{addr - seg[0]}" if seg else "?"
    return events


# -- workloads: name -> function(meter)

WORKLOADS: dict[str, Callable[[Meter], None]] = {}


def workload(fn: Callable[[Meter], None]) -> Callable[[Meter], None]:
    WORKLOADS[fn.__name__] = fn
    return fn


@workload
def linear_fwd_bwd(m: Meter) -> None:
    torch.manual_seed(0)
    layer = nn.Linear(1024, 1024).to(DEV)
    x = on_dev(cpu_randn(256, 1024))
    m.mark("setup")
    layer(x).sum().backward()
    m.mark("backward")


@workload
def gradient_accumulation(m: Meter) -> None:
    """One tensor read by two branches: the engine sums their gradients in place on CUDA (out of place would
    hold a third gradient-sized tensor at the peak)."""
    h = on_dev(cpu_randn(2048, 1024)).requires_grad_()
    m.mark("setup")
    y = h.relu() + h.sigmoid()
    m.mark("forward")
    y.sum().backward()
    m.mark("backward")


REDUCTIONS = [  # (name, shape, dtype, op): bias-gradient sums, losses' means, norms, over several layouts
    ("sum0_1024x256", (1024, 256), torch.float32, lambda x: x.sum(0)),
    ("sum0_1024x1024", (1024, 1024), torch.float32, lambda x: x.sum(0)),
    ("sum01_64x16x768", (64, 16, 768), torch.float32, lambda x: x.sum((0, 1))),
    ("sum1_1024x256", (1024, 256), torch.float32, lambda x: x.sum(1)),
    ("sum_last_8x512x512", (8, 512, 512), torch.float32, lambda x: x.sum(-1)),
    ("sum_mid_8x512x512", (8, 512, 512), torch.float32, lambda x: x.sum(1)),
    ("sum0_transposed", (256, 1024), torch.float32, lambda x: x.t().sum(0)),
    ("mean_all_16x64x256", (16, 64, 256), torch.float32, lambda x: x.mean()),
    ("sum0_bf16_4096x64", (4096, 64), torch.bfloat16, lambda x: x.sum(0)),
    ("sum_all_fp16_1M", (1 << 20,), torch.float16, lambda x: x.sum()),
    ("amax0_1024x256", (1024, 256), torch.float32, lambda x: x.amax(0)),
    ("norm0_1024x256", (1024, 256), torch.float32, lambda x: torch.linalg.vector_norm(x, dim=0)),
    ("var0_1024x256", (1024, 256), torch.float32, lambda x: x.var(0)),
    ("argmax0_1024x256", (1024, 256), torch.float32, lambda x: x.argmax(0)),
    ("any0_1024x256", (1024, 256), torch.float32, lambda x: (x > 0).any(0)),
    ("sum0_small_16x8", (16, 8), torch.float32, lambda x: x.sum(0)),
]


@workload
def reductions(m: Meter) -> None:
    """One checkpoint per reduction: CUDA's split reductions take a staging buffer and semaphores for the call."""
    for i, (name, shape, dtype, op) in enumerate(REDUCTIONS):
        x = on_dev(cpu_randn(*shape, seed=i)).to(dtype)
        m.mark(f"{name}:input")
        y = op(x)
        m.mark(name)
        del x, y


@workload
def linear_input_grad(m: Meter) -> None:
    torch.manual_seed(0)
    layer = nn.Linear(512, 256).to(DEV)
    x = on_dev(cpu_randn(64, 128, 512)).requires_grad_()
    m.mark("setup")
    y = F.gelu(layer(x))
    m.mark("forward")
    y.pow(2).mean().backward()
    m.mark("backward")


@workload
def sdpa_causal_fp32(m: Meter) -> None:
    q, k, v = (on_dev(cpu_randn(8, 4, 256, 64, seed=i)).requires_grad_() for i in range(3))
    forward_backward(m, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))


@workload
def sdpa_causal_bf16(m: Meter) -> None:
    q, k, v = (on_dev(cpu_randn(8, 8, 512, 64, seed=i)).bfloat16().requires_grad_() for i in range(3))
    forward_backward(m, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))


@workload
def adamw_step(m: Meter) -> None:
    params = [nn.Parameter(on_dev(cpu_randn(512, 512, seed=i))) for i in range(8)]  # 8 x 1 MiB
    for p in params:
        p.grad = on_dev(cpu_randn(512, 512, seed=100 + p.numel() % 7))
    opt = torch.optim.AdamW(params, lr=1e-3)
    m.mark("setup")
    opt.step()
    m.mark("step0")
    opt.step()
    m.mark("step1")


def _optimizer_workload(cls, **options) -> Callable[[Meter], None]:
    def run(m: Meter) -> None:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256)).to(DEV)
        opt = cls(model.parameters(), lr=1e-3, **options)
        x = on_dev(cpu_randn(32, 256))
        train_steps(m, model, lambda: (x,), lambda mod, a: mod(a).square().mean(), opt, steps=2)
    return run


for _cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW):
    for _impl, _opts in (("default", {}), ("forloop", {"foreach": False}), ("foreach", {"foreach": True}),
                         ("fused", {"fused": True})):
        if _cls is torch.optim.SGD:
            _opts = {**_opts, "momentum": 0.9}
        WORKLOADS[f"optim_{_cls.__name__.lower()}_{_impl}"] = _optimizer_workload(_cls, **_opts)


@workload
def transformer_encoder(m: Meter) -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(256, 4, dim_feedforward=1024, batch_first=True, dropout=0.1)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = on_dev(cpu_randn(16, 64, 256))
    train_steps(m, model, lambda: (x,), lambda mod, a: mod(a).square().mean(), opt, steps=3)


@workload
def cnn_step(m: Meter) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(64, 10)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = on_dev(cpu_randn(32, 3, 64, 64))
    y = on_dev(torch.arange(32) % 10)
    train_steps(m, model, lambda: (x, y), lambda mod, a, b: F.cross_entropy(mod(a), b), opt, steps=2)


@workload
def conv1d_layernorm(m: Meter) -> None:
    torch.manual_seed(0)
    conv = nn.Conv1d(64, 128, 5, padding=2).to(DEV)
    norm = nn.LayerNorm(128).to(DEV)
    x = on_dev(cpu_randn(16, 64, 512)).requires_grad_()
    forward_backward(m, lambda: norm(conv(x).transpose(1, 2)))


@workload
def rmsnorm_silu_dropout(m: Meter) -> None:
    torch.manual_seed(0)
    norm = nn.RMSNorm(1024).to(DEV)
    x = on_dev(cpu_randn(32, 128, 1024)).requires_grad_()
    forward_backward(m, lambda: F.dropout(F.silu(norm(x)), p=0.1, training=True))


@workload
def embedding_cross_entropy_large_vocab(m: Meter) -> None:
    torch.manual_seed(0)
    emb = nn.Embedding(32000, 256).to(DEV)
    head = nn.Linear(256, 32000, bias=False).to(DEV)
    tokens = on_dev(torch.randint(0, 32000, (8, 128), generator=torch.Generator().manual_seed(0)))
    m.mark("setup")
    logits = head(emb(tokens))
    loss = F.cross_entropy(logits.view(-1, 32000), tokens.view(-1))
    m.mark("forward")
    loss.backward()
    m.mark("backward")


@workload
def amp_autocast_gradscaler(m: Meter) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(DEV)
    x = on_dev(cpu_randn(64, 512))
    train_steps(m, model, lambda: (x,), lambda mod, a: mod(a).float().square().mean(), opt, steps=2,
                scaler=scaler, autocast=torch.float16)


@workload
def activation_checkpointing(m: Meter) -> None:
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    blocks = nn.ModuleList(nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512))
                           for _ in range(3)).to(DEV)
    opt = torch.optim.SGD(blocks.parameters(), lr=0.1)

    def loss_of(mod, a):
        for b in mod:
            a = a + checkpoint(b, a, use_reentrant=False)
        return a.square().mean()

    x = on_dev(cpu_randn(64, 512))
    train_steps(m, blocks, lambda: (x,), loss_of, opt, steps=2)


@workload
def gpt2_causal_lm(m: Meter) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=4, n_embd=512, n_head=8, vocab_size=8000, n_positions=256)
    model = GPT2LMHeadModel(config).to(DEV)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = on_dev(torch.randint(0, 8000, (8, 256), generator=torch.Generator().manual_seed(0)))
    train_steps(m, model, lambda: (ids,), lambda mod, a: mod(input_ids=a, labels=a).loss, opt, steps=2)


# -- PyTorch's op database

def opdb_cases(names: set[str] | None, samples: int):
    """(op, index, sample) for float32 samples of ops that run on CUDA, made on the CPU."""
    from torch.testing._internal.common_methods_invocations import op_db

    for op in op_db:
        if names is not None and op.name not in names and f"{op.name}.{op.variant_test_name}" not in names:
            continue
        if torch.float32 not in op.supported_dtypes("cuda"):
            continue
        torch.manual_seed(0)
        grad = op.supports_autograd
        try:
            cases = list(op.sample_inputs("cpu", torch.float32, requires_grad=grad))[:samples]
        except Exception:
            continue
        for i, sample in enumerate(cases):
            yield op, i, sample


def _to_dev(x):
    if isinstance(x, torch.Tensor):
        return x.detach().to(DEV).requires_grad_(x.requires_grad)
    return x


def _tensors(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


def run_sample(op, sample) -> dict:
    s = sample.transform(_to_dev)
    m = Meter()
    out = op(s.input, *s.args, **s.kwargs)
    m.mark("forward")
    shapes = [list(t.shape) for t in _tensors(out)]
    diff = [t for t in _tensors(out) if t.requires_grad and t.dtype.is_floating_point]
    if diff:
        leaves = [t for t in _tensors([s.input, list(s.args), list(s.kwargs.values())]) if t.requires_grad]
        grads = torch.autograd.grad(diff, leaves, [torch.ones_like(t) for t in diff], allow_unused=True)
        m.mark("backward")
        del grads
    del out, diff, s
    m.mark("freed")
    return {"points": m.points, "shapes": shapes}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["workloads", "opdb"])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--ops", default="")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--trace", action="store_true", help="record each workload's allocator events")
    ap.add_argument("--deadline", type=float, default=None,
                    help="stop starting op-database cases after this many seconds (a capture on a rented GPU)")
    ap.add_argument("--start-at", default=None, help="skip op-database ops before this one (resume a capture)")
    args = ap.parse_args(argv)
    torch.ones(1, device=DEV)  # the context, and the first segment's rounding, before any case
    doc: dict = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "cases": {}}
    start = time.monotonic()
    if args.what == "workloads":
        for name in args.names or list(WORKLOADS):
            try:
                m = Meter()
                trace = Trace() if args.trace else None
                WORKLOADS[name](m)
                doc["cases"][name] = {"points": m.points}
                if trace:
                    doc["cases"][name]["trace"] = trace.stop()
            except Exception as exc:
                doc["cases"][name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    else:
        names = {n for n in args.ops.split(",") if n} or None
        skipping = args.start_at is not None
        for op, i, sample in opdb_cases(names, args.samples):
            skipping = skipping and op.name != args.start_at
            if skipping:
                continue
            if args.deadline is not None and time.monotonic() - start > args.deadline:
                doc["truncated"] = f"stopped at {op.name} after {args.deadline:g} s"
                break
            key = f"{op.name}{'.' + op.variant_test_name if op.variant_test_name else ''}#{i}"
            try:
                doc["cases"][key] = run_sample(op, sample)
            except Exception as exc:
                doc["cases"][key] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
    doc["seconds"] = round(time.monotonic() - start, 1)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception:
        traceback.print_exc()
        sys.exit(1)
