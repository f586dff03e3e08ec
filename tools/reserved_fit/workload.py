"""Training and inference steps of Llama-shaped decoders, measured phase by phase by PyTorch's caching allocator.

    python workload.py SPECS.json OUT.json      # under `fakegpu run --mode native` (tools/reserved_fit/run.py)

An ordinary CUDA program: nothing here knows it runs on FakeGPU. Under native mode the allocator is PyTorch's own
on simulated device memory, so its segments, rounding and caching are the real ones while kernels do not run.
Each spec is one workload; they run one after another in this process, each from an emptied cache, and every
phase records torch.cuda.memory_stats() counters with the peaks reset at the phase's start (reserved memory is
cumulative: what earlier phases cached stays reserved, as in a real run). Values computed by kernels are never
read: token ids are made on the CPU, and the decode loop feeds fixed ids instead of sampling.
"""

from __future__ import annotations

import gc
import json
import os
import random
import sys
import time
from pathlib import Path

import torch
from torch import nn

STATS = {
    "allocated": "allocated_bytes.all.current",
    "peak_allocated": "allocated_bytes.all.peak",
    "reserved": "reserved_bytes.all.current",
    "peak_reserved": "reserved_bytes.all.peak",
    "small_reserved": "reserved_bytes.small_pool.current",
    "large_reserved": "reserved_bytes.large_pool.current",
    "small_segments": "segment.small_pool.current",
    "large_segments": "segment.large_pool.current",
    "alloc_retries": "num_alloc_retries",
}


class Recorder:
    """Phase records of one workload; `run_peak_*` are the maxima over the whole workload."""

    def __init__(self) -> None:
        self.phases: list[dict] = []

    def start(self) -> None:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def mark(self, phase: str, step: int | None = None) -> None:
        torch.cuda.synchronize()
        stats = torch.cuda.memory_stats()
        row = {"phase": phase, **({"step": step} if step is not None else {})}
        row.update({k: int(stats.get(v, 0)) for k, v in STATS.items()})
        self.phases.append(row)
        torch.cuda.reset_peak_memory_stats()

    def summary(self) -> dict:
        return {"run_peak_allocated": max(p["peak_allocated"] for p in self.phases),
                "run_peak_reserved": max(p["peak_reserved"] for p in self.phases)}


def build_model(spec: dict, dtype: torch.dtype) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    m = spec["model"]
    config = LlamaConfig(hidden_size=m["hidden"], intermediate_size=m["intermediate"],
                         num_hidden_layers=m["layers"], num_attention_heads=m["heads"],
                         num_key_value_heads=m.get("kv_heads", m["heads"]), vocab_size=m["vocab"],
                         max_position_embeddings=8192, tie_word_embeddings=False)
    config._attn_implementation = "sdpa"
    # Built on the device as from_pretrained places a checkpoint: every tensor allocated there in module order.
    with torch.device("cuda"):
        torch.set_default_dtype(dtype)
        try:
            model = LlamaForCausalLM(config)
        finally:
            torch.set_default_dtype(torch.float32)
    return model


class LoraLinear(nn.Module):
    """A frozen Linear plus a trainable low-rank update (PEFT's LoRA layer, forward and parameters)."""

    def __init__(self, base: nn.Linear, rank: int, dropout: float) -> None:
        super().__init__()
        self.base = base
        base.weight.requires_grad_(False)
        dev, dtype = base.weight.device, base.weight.dtype
        self.lora_a = nn.Linear(base.in_features, rank, bias=False, device=dev, dtype=dtype)
        self.lora_b = nn.Linear(rank, base.out_features, bias=False, device=dev, dtype=dtype)
        self.dropout = nn.Dropout(dropout)
        self.scale = 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.lora_b(self.lora_a(self.dropout(x))) * self.scale


def add_lora(model: nn.Module, rank: int, targets: list[str]) -> None:
    for p in model.parameters():
        p.requires_grad_(False)
    for _name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and child_name in targets:
                setattr(module, child_name, LoraLinear(child, rank, 0.05))


def param_bytes(model: nn.Module) -> tuple[list[int], list[int]]:
    """Sizes of the trainable and the frozen parameters, one entry per tensor."""
    trainable = [p.numel() * p.element_size() for p in model.parameters() if p.requires_grad]
    frozen = [p.numel() * p.element_size() for p in model.parameters() if not p.requires_grad]
    return trainable, frozen


def ids(batch: int, seq: int, vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0)).to("cuda")


def step_lengths(spec: dict) -> list[int]:
    """Each step's sequence length: spec["seq"] every step, or, with "lengths": "varying", batches padded to their
    own longest sequence as a dataset without packing gives them: a fifth at the truncation length, the rest
    anywhere from seq/16 up (seeded, so a rerun measures the same sequence), the longest reached at least once."""
    steps, seq = spec.get("steps", 2), spec["seq"]
    if spec.get("lengths", "fixed") == "fixed":
        return [seq] * steps
    rng = random.Random(0)
    out = [seq if rng.random() < 0.2 else rng.randint(max(1, seq // 16), seq) for _ in range(steps)]
    if seq not in out:
        out[steps // 2] = seq
    return out


def run_training(spec: dict, rec: Recorder) -> dict:
    amp = spec["precision"] == "amp"
    model = build_model(spec, torch.float32 if amp else torch.bfloat16)
    if spec.get("lora"):
        add_lora(model, spec["lora"]["rank"], spec["lora"]["targets"])
    if spec.get("grad_checkpointing"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    rec.mark("load")
    trainable, frozen = param_bytes(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, foreach=True)
    x = None
    for step, length in enumerate(step_lengths(spec)):
        # The ids of a fixed-length run are made once, as a dataloader's pinned batch would be reused.
        if x is None or x.shape[1] != length:
            x = ids(spec["batch"], length, spec["model"]["vocab"])
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = model(input_ids=x, labels=x).loss
        rec.mark("forward", step)
        loss.backward()
        del loss
        rec.mark("backward", step)
        opt.step()
        opt.zero_grad(set_to_none=True)
        rec.mark("optimizer_step", step)
    states = [t.numel() * t.element_size() for s in opt.state.values() for t in s.values()
              if torch.is_tensor(t) and t.is_cuda]
    del opt, model, x
    return {"trainable_param_sizes": trainable, "frozen_param_sizes": frozen, "optimizer_state_sizes": states}


@torch.inference_mode()
def run_inference(spec: dict, rec: Recorder) -> dict:
    from transformers import DynamicCache

    model = build_model(spec, torch.bfloat16)
    model.eval()
    rec.mark("load")
    trainable, frozen = param_bytes(model)
    x = ids(spec["batch"], spec["seq"], spec["model"]["vocab"])
    cache = DynamicCache()
    # generate() asks for the prompt's logits at the last position only; scoring a prompt wants them all.
    keep = 0 if spec.get("logits") == "all" else 1
    out = model(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=keep)
    rec.mark("prefill")
    nxt = x[:, -1:]
    del out
    for _ in range(spec["new_tokens"] - 1):
        out = model(input_ids=nxt, past_key_values=cache, use_cache=True, logits_to_keep=1)
        del out
    rec.mark("decode")
    del cache, model, x, nxt
    return {"trainable_param_sizes": [], "frozen_param_sizes": trainable + frozen, "optimizer_state_sizes": []}


def run_one(spec: dict) -> dict:
    gc.collect()
    # cuBLAS workspaces are the allocator's blocks that outlive a workload (torch 2.11 keeps 36 MiB of them here);
    # freeing them lets each workload start from no segments, as a fresh process does.
    torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()
    # Anything still held; fit.py measures from it (0 on the torch versions tried).
    leftover, held = torch.cuda.memory_reserved(), torch.cuda.memory_allocated()
    rec = Recorder()
    rec.start()
    began = time.perf_counter()
    sizes = (run_training if spec["kind"] == "training" else run_inference)(spec, rec)
    gc.collect()
    return {"spec": spec, "reserved_at_start": leftover, "allocated_at_start": held,
            "seconds": round(time.perf_counter() - began, 2), "phases": rec.phases, **rec.summary(), **sizes}


def main(argv: list[str]) -> int:
    specs = json.loads(Path(argv[0]).read_text())
    results = [run_one(s) for s in specs]
    doc = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(),
           "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "runs": results}
    Path(argv[1]).write_text(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
