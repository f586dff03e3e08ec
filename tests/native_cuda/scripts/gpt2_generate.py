"""The new user's first try (issue 21, point 11): a tiny 2-layer GPT-2 built locally (no hub download), on cuda,
model.generate(ids, max_new_tokens=12). transformers' stopping check is a device tensor a kernel computes
(`unfinished_sequences.max() == 0`), read back every step, and kernels do not run under native mode: the read
returns what its block held before. Until native mode carried out fills, the loop never ended; now that block is
the one MaxLengthCriteria's torch.full((batch,), is_done) has just freed, so the loop ends after max_new_tokens
steps (tests/native_cuda/test_device_reads.py) - by the caching allocator's placement, not by computation.

Prints "step N" on stderr after each forward pass (so a test can tell what came before the first step ended) and
ends the process after argv[1] steps (0: never)."""

import os
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

stop_after = int(sys.argv[1]) if len(sys.argv) > 1 else 0
config = GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=256, n_positions=64, bos_token_id=0, eos_token_id=0)
torch.manual_seed(0)
model = GPT2LMHeadModel(config).cuda().eval()
ids = torch.tensor([[1, 2, 3, 4]], device="cuda")
steps = 0


def after_forward(module, args, kwargs, output):
    global steps
    steps += 1
    sys.stderr.write(f"step {steps}\n")
    sys.stderr.flush()
    if steps == stop_after:
        os._exit(0)  # skip interpreter teardown, as nothing is left to write


model.register_forward_hook(after_forward, with_kwargs=True)
sys.stderr.write("generate\n")
sys.stderr.flush()
out = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)
print("generated", tuple(out.shape))
