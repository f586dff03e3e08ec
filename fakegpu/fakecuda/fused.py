"""Fused CUDA attention, emulated on the CPU: the math path's numbers, the fused kernel's memory.

CUDA's flash and memory-efficient attention kernels keep nothing in device memory but their outputs: the
attention output and a float32 logsumexp per query row, saved for backward, which recomputes the attention
weights (and the dropout mask, from the saved RNG offset) in on-chip memory. The CPU build has no such kernel for
dropout, so its math path keeps the (L x S) weights, their softmax and the dropout mask: several times the
bytes. `FusedAttention` runs the math path with charging suspended, charges what the CUDA kernel allocates,
saves the RNG state, and in backward recomputes forward and backward on the CPU from that state (so the dropout
mask, and the gradients, equal the math path's) while charging the gradients and the kernel's backward
temporaries. Sizes follow ATen's kernels (sdp_utils and the flash / mem-efficient entry points): the
logsumexp is (B, H, L) for flash, (B, H, L rounded up to 32) for efficient; flash's backward takes a float32
dq accumulator (B, L rounded up to 128, H, D rounded up to 8) and softmax_d (B, H, L rounded up to 128); the
rest of the backward's temporaries were measured in native mode (see backward). The harness
(tests/memory_fidelity) measures what remains.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from fakegpu.fakecuda.dispatch import suspended
from fakegpu.fakecuda.tensor import StorageTracker


def _up(n: int, m: int) -> int:
    return -(-n // m) * m


def _charged(tracker: StorageTracker, index: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A placeholder of the kernel's buffer, charged to the fake device for as long as it lives."""
    with suspended():
        t = torch.empty(shape, dtype=dtype)
    tracker.account(t, index)
    return t


class FusedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, dropout_p: float, is_causal: bool, scale, backend: str, index: int,
                tracker: StorageTracker):
        ctx.rng = torch.get_rng_state() if dropout_p > 0 else None
        with torch._C.DisableTorchFunction(), suspended():
            math = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                                  is_causal=is_causal, scale=scale)
            # both kernels write (B, L, H, D) and return it transposed: `out.transpose(1, 2).reshape(...)`,
            # the usual next step, is then a view, not a copy
            out = math.transpose(1, 2).contiguous().transpose(1, 2)
            del math
        tracker.account(out, index)
        b, h, lq = q.shape[0], q.shape[1], q.shape[2]
        lse = _charged(tracker, index, (b, h, lq if backend == "flash" else _up(lq, 32)), torch.float32)
        ctx.options = (dropout_p, is_causal, scale, backend, index, tracker)
        # the output too: CUDA's backward reads it, so it stays allocated until the graph goes
        # (and the logsumexp: saved tensors, unlike ctx attributes, are released once backward has run)
        ctx.save_for_backward(q, k, v, out, lse, mask if isinstance(mask, torch.Tensor) else None)
        ctx.mask_value = None if isinstance(mask, torch.Tensor) else mask
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, _out, _lse, mask = ctx.saved_tensors
        mask = mask if mask is not None else ctx.mask_value
        dropout_p, is_causal, scale, backend, index, tracker = ctx.options
        b, h, lq, d = q.shape
        # Measured in native mode (PyTorch's own flash / mem-efficient backward on simulated memory), over B, H, L
        # and D doubled one at a time: beyond dq, dk, dv both take two more buffers of q's size for the call, and
        # per (B, H, L) row float32 state: flash one buffer (softmax_d) plus its float32 dq accumulator, efficient
        # two buffers.
        temps = [_charged(tracker, index, tuple(q.shape), q.dtype) for _ in range(2)]
        if backend == "flash":
            temps.append(_charged(tracker, index, (b, _up(lq, 128), h, _up(d, 8)), torch.float32))
            temps.append(_charged(tracker, index, (b, h, _up(lq, 128)), torch.float32))
        else:
            temps += [_charged(tracker, index, (b, h, lq), torch.float32) for _ in range(2)]
        wanted = [t.requires_grad for t in (q, k, v)]
        with torch._C.DisableTorchFunction(), suspended(), torch.enable_grad():
            state = torch.get_rng_state() if ctx.rng is not None else None
            if state is not None:
                torch.set_rng_state(ctx.rng)
            try:
                leaves = [t.detach().requires_grad_(w) for t, w in zip((q, k, v), wanted, strict=True)]
                out = F.scaled_dot_product_attention(*leaves, attn_mask=mask, dropout_p=dropout_p,
                                                     is_causal=is_causal, scale=scale)
                needed = [t for t in leaves if t.requires_grad]
                got = iter(torch.autograd.grad(out, needed, grad))
            finally:
                if state is not None:
                    torch.set_rng_state(state)
            grads = [next(got) if w else None for w in wanted]
        for g in grads:
            if g is not None:
                tracker.account(g, index)
        del temps  # the kernel's temporaries end with the call
        return (*grads, None, None, None, None, None, None, None)


def attention(q, k, v, mask: Any, dropout_p: float, is_causal: bool, scale, backend: str, index: int,
              tracker: StorageTracker) -> torch.Tensor:
    return FusedAttention.apply(q, k, v, mask, dropout_p, is_causal, scale, backend, index, tracker)
