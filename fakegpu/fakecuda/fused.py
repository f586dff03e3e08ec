"""Fused CUDA kernels, emulated on the CPU: the composite's numbers, the fused kernel's memory.

Attention first, then RMSNorm, then dropout (at the end of this file).

CUDA's flash and memory-efficient attention kernels keep nothing in device memory but their outputs: the attention
output and a float32 logsumexp per query row, saved for backward, which recomputes the attention weights (and the
dropout mask, from the saved RNG offset) in on-chip memory. The CPU build has no such kernel for dropout, so its
math path keeps the (L x S) weights, their softmax and the dropout mask: several times the bytes. `FusedAttention`
runs the math path with charging suspended, charges what the CUDA kernel allocates, and in backward charges the
gradients and the kernel's backward temporaries while the CPU computes the math path's gradients: through the math
path's own graph, kept in host memory (never charged) when the weights are small (KEEP_GRAPH_ELEMENTS; a plain CPU
run holds the same), else by running forward again from the saved RNG state (so the dropout mask, and the gradients,
equal the math path's) rather than hold large weights on the host. With dropout (the CPU's own SDPA then takes the
math path) the kept graph is the math path's ops run here one by one (_MathPath): backward needs no nested autograd
run, and writes dq and dk in the kernel's layout as it computes them instead of copying them there, bit for bit what
autograd computes through the math path. Sizes follow ATen's kernels (sdp_utils and the
flash / mem-efficient entry points): the logsumexp is (B, H, L) for flash, (B, H, L rounded up to 32) for efficient;
flash's backward takes a float32 dq accumulator (B, L rounded up to 128, H, D rounded up to 8) and softmax_d (B, H,
L rounded up to 128). The order of every buffer, forward and backward, and the layout of the gradients follow native
mode's allocator trace (`python -m tests.memory_fidelity.harness --trace sdpa_causal_fp32`), which they equal event
for event on the harness's attention workloads.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.nn.functional as F

from fakegpu.fakecuda.dispatch import suspended
from fakegpu.fakecuda.releases import EFFICIENT_ATTENTION_DEVICE_RNG
from fakegpu.fakecuda.tensor import StorageTracker, launched


def _up(n: int, m: int) -> int:
    return -(-n // m) * m


def _layout(t: torch.Tensor, backend: str) -> tuple[int, ...]:
    if backend == "cudnn":
        return _dense_strides(t)
    if backend == "flash" or t.dim() != 4:
        return t.stride()
    _, h, n, d = t.shape
    return (n * h * d, d, h * d, 1)


def _dense_strides(t: torch.Tensor) -> tuple[int, ...]:
    """Strides of a dense tensor of t's shape whose dims lie in memory in t's order (torch's matching layout)."""
    order = sorted(range(t.dim()), key=lambda i: (-t.stride(i), i))
    strides = [0] * t.dim()
    step = 1
    for i in reversed(order):
        strides[i] = step
        step *= max(1, t.shape[i])
    return tuple(strides)


def _like_layout(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    strides = _dense_strides(like)
    if x.stride() == strides:
        return x
    return torch.empty_strided(x.shape, strides, dtype=x.dtype).copy_(x)


# cuDNN attention's workspaces beyond what its backward formula gives, as a real H200 showed them (torch 2.11,
# cuDNN 9.19, tests/data/gpu/h200/mem_workloads.json, sdpa_causal_bf16; one shape, B=8, H=8, L=512, D=64):
# forward one block of the allocator's smallest granule, taken after the logsumexp and freed before returning
CUDNN_FORWARD_WORKSPACE = 512
CUDNN_BACKWARD_WORKSPACE_PAD = 512


# Attention whose (B x H x L x S) weights have at most this many elements keeps the CPU math path's graph from
# forward to backward (its weights, softmax and dropout mask, in host memory, 4 MiB each in float32 at most, as a
# plain CPU run holds them); larger ones recompute the forward in backward, as the fused kernels do, rather than
# hold them (a rehearsal's host memory goes to many ranks).
KEEP_GRAPH_ELEMENTS = 1 << 20


def _saved_tensors_hooked() -> bool:
    """Whether saved-tensor hooks are on (torch.utils.checkpoint's, non-reentrant, among others). The kept math
    graph's tensors would pass them as if the attention kernel saved them: checkpoint counts what forward saved
    against what its recomputation saves, and raised CheckpointError (12 against 5 for one attention call), and an
    offloading hook would move host memory the kernel never held. Under hooks backward recomputes instead."""
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None


def _transient(rt, index: int, nbytes: int) -> None:
    rt.free(index, rt.malloc(index, nbytes))


def _charged(tracker: StorageTracker, index: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A placeholder of the kernel's buffer, charged to the fake device for as long as it lives."""
    with suspended():
        t = torch.empty(shape, dtype=dtype)
    tracker.account(t, index)
    return t


class _MathPath:
    """The CPU math path of scaled_dot_product_attention with dropout, run op by op as ATen's
    _scaled_dot_product_attention_math runs it (q and k scaled by the scale's square root, matmul folded to bmm, the
    mask added in place, _safe_softmax, dropout as the CPU's `dropout` draws it, matmul with v), keeping what its
    autograd graph would keep; backward is that graph's formulas in the same order (BmmBackward, MulBackward,
    _softmax_backward_data), so the numbers, and the generator's state after the draw, are the math path's bit for
    bit (tests/fakecuda/test_charges.py checks it against autograd). What it saves is host memory, as the graph's."""

    __slots__ = ("kt3", "noise", "p3", "probs", "q3", "scale", "shape", "v3", "wanted")

    @staticmethod
    def takes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any, dropout_p: float, is_causal: bool,
              scale: Any) -> bool:
        """Whether the CPU's own SDPA would take the math path these formulas follow: dropout (its flash kernel
        takes none), one dtype of float32 or float64 (the math path computes half types in float32), 4-D inputs
        with matching batch and heads (no broadcast, no grouped-query expansion), a float or bool mask or none."""
        if not 0 < dropout_p < 1 or q.dtype not in (torch.float32, torch.float64):
            return False
        if any(t.dim() != 4 or t.dtype != q.dtype or t.layout is not torch.strided for t in (q, k, v)):
            return False
        if q.shape[:2] != k.shape[:2] or k.shape[:3] != v.shape[:3] or q.shape[3] != k.shape[3]:
            return False
        if scale is not None and not (isinstance(scale, (int, float)) and scale > 0):
            return False
        if mask is None:
            return True
        return (not is_causal and isinstance(mask, torch.Tensor) and mask.dtype in (q.dtype, torch.bool)
                and mask.layout is torch.strided)

    def __init__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any, dropout_p: float,
                 is_causal: bool, scale: Any, wanted: list[bool]) -> None:
        self.wanted = wanted
        b, h, lq, d = q.shape
        s, dv = k.shape[2], v.shape[3]
        self.shape = (b, h, lq, d, s, dv)
        self.scale = math.sqrt(scale if scale is not None else 1.0 / math.sqrt(d))
        self.q3 = (q * self.scale).reshape(b * h, lq, d)
        self.kt3 = (k.transpose(-2, -1) * self.scale).reshape(b * h, d, s)
        weights = torch.bmm(self.q3, self.kt3).view(b, h, lq, s)
        if is_causal:
            mask = torch.ones(lq, s, dtype=torch.bool).tril()
        if mask is not None:
            if mask.dtype == torch.bool:
                mask = torch.zeros_like(mask, dtype=q.dtype).masked_fill_(mask.logical_not(), -math.inf)
            weights.add_(mask)
        self.probs = torch._safe_softmax(weights, -1)
        del weights
        self.noise = torch.empty_like(self.probs).bernoulli_(1 - dropout_p).div_(1 - dropout_p)
        self.p3 = (self.probs * self.noise).view(b * h, lq, s)
        self.v3 = v.reshape(b * h, s, dv)

    def output(self) -> torch.Tensor:
        b, h, lq, _, _, dv = self.shape
        return torch.bmm(self.p3, self.v3).view(b, h, lq, dv)

    def gradients(self, grad: torch.Tensor, layouts: list[tuple[int, ...]]) -> list[torch.Tensor | None]:
        """dq, dk, dv (None where not wanted); dq and dk written in `layouts` by their last product."""
        b, h, lq, d, s, dv = self.shape
        want_q, want_k, want_v = self.wanted
        g3 = grad.reshape(b * h, lq, dv)
        dq = dk = dvalue = None
        if want_v:
            dvalue = torch.bmm(self.p3.transpose(1, 2), g3).view(b, h, s, dv)
        if want_q or want_k:
            dprobs = torch.bmm(g3, self.v3.transpose(1, 2)).view(b, h, lq, s) * self.noise
            dw3 = torch._softmax_backward_data(dprobs, self.probs, -1, self.probs.dtype).view(b * h, lq, s)
            del dprobs
            if want_q:
                dq = torch.empty_strided((b, h, lq, d), layouts[0], dtype=g3.dtype)
                torch.mul(torch.bmm(dw3, self.kt3.transpose(1, 2)).view(b, h, lq, d), self.scale, out=dq)
            if want_k:
                dk = torch.empty_strided((b, h, s, d), layouts[1], dtype=g3.dtype)
                torch.mul(torch.bmm(self.q3.transpose(1, 2), dw3).view(b, h, d, s).transpose(-2, -1), self.scale,
                          out=dk)
        return [dq, dk, dvalue]



class FusedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, dropout_p: float, is_causal: bool, scale, backend: str, index: int,
                tracker: StorageTracker):
        ctx.rng = torch.get_rng_state() if dropout_p > 0 else None
        ctx.graph = None
        wanted = list(ctx.needs_input_grad[:3])
        with torch._C.DisableTorchFunction(), suspended():
            keep = (any(wanted) and q.shape[0] * q.shape[1] * q.shape[2] * k.shape[-2] <= KEEP_GRAPH_ELEMENTS
                    and not _saved_tensors_hooked())
            if keep and _MathPath.takes(q, k, v, mask, dropout_p, is_causal, scale):
                ctx.graph = _MathPath(q, k, v, mask, dropout_p, is_causal, scale, wanted)
                math_out = ctx.graph.output()
            elif keep:
                # small enough to keep the math path's graph (host memory, never charged): backward then runs it
                # instead of recomputing the forward, as plain CPU torch would
                with torch.enable_grad():
                    leaves = [t.detach().requires_grad_(w) for t, w in zip((q, k, v), wanted, strict=True)]
                    math_out = F.scaled_dot_product_attention(*leaves, attn_mask=mask, dropout_p=dropout_p,
                                                              is_causal=is_causal, scale=scale)
                ctx.graph = (math_out, leaves)
            else:
                math_out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                                          is_causal=is_causal, scale=scale)
            # both kernels write (B, L, H, D) and return it transposed: `out.transpose(1, 2).reshape(...)`,
            # the usual next step, is then a view, not a copy
            out = math_out.transpose(1, 2).contiguous().transpose(1, 2)
            del math_out
        b, h, lq = q.shape[0], q.shape[1], q.shape[2]
        rt = tracker.runtime
        # the kernels' philox seed and offset (one int64 each) and the float32 logsumexp, in each kernel's order
        # (native mode's allocator trace): flash and efficient keep the seed and offset on the device only
        # without dropout (with it they are CPU scalars outside graph capture), and efficient only from torch
        # 2.15 (releases.py); efficient makes them first, flash after its outputs; cuDNN always keeps them,
        # first
        def rng(device: bool) -> tuple[torch.Tensor | None, ...]:
            if not device:
                return None, None
            return tuple(_charged(tracker, index, (), torch.int64) for _ in range(2))

        if backend == "flash":
            tracker.account(out, index)
            lse = _charged(tracker, index, (b, h, lq), torch.float32)
            seed, offset = rng(dropout_p == 0)
        elif backend == "cudnn":
            seed, offset = rng(True)
            # cuDNN writes the output in q's layout (a contiguous q gives a contiguous output)
            with suspended():
                out = _like_layout(out, q)
            tracker.account(out, index)
            lse = _charged(tracker, index, (b, h, lq), torch.float32)
            _transient(rt, index, CUDNN_FORWARD_WORKSPACE)
        else:
            seed, offset = rng(dropout_p == 0 and rt.since(EFFICIENT_ATTENTION_DEVICE_RNG))
            tracker.account(out, index)
            lse = _charged(tracker, index, (b, h, _up(lq, 32)), torch.float32)
        ctx.options = (dropout_p, is_causal, scale, backend, index, tracker)
        # the output too: CUDA's backward reads it, so it stays allocated until the graph goes
        # (and the logsumexp: saved tensors, unlike ctx attributes, are released once backward has run)
        rng = (seed, offset) if backend == "flash" else (offset, seed)
        ctx.save_for_backward(q, k, v, lse, out, *rng, mask if isinstance(mask, torch.Tensor) else None)
        ctx.mask_value = None if isinstance(mask, torch.Tensor) else mask
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, _lse, _out, _seed, _offset, mask = ctx.saved_tensors
        mask = mask if mask is not None else ctx.mask_value
        backend, index, tracker = ctx.options[3:]
        rt = tracker.runtime
        b, h, lq, d = q.shape
        size = q.numel() * q.element_size()
        # The kernels' buffers in the order native mode's trace shows them (PyTorch's own flash / mem-efficient
        # backward on simulated memory): flash takes two buffers of q's size, then dq, dk, dv, then per-row
        # float32 softmax_d and a float32 dq accumulator (B, L rounded up to 128, H, D rounded up to 8);
        # efficient takes a contiguous (B, L, H, D) copy of the output's gradient unless it already is one (GPT-2's
        # is, its heads merged by a transpose: no copy on the H200, torch 2.11), dq, dk, dv, a second q-sized
        # buffer and two float32 (B, H, L) rows, then a float32 workspace of (L x D + L / 16) per batch and head.
        if backend == "cudnn":
            # dq, dk, dv in their inputs' layouts, then one workspace for the call: a float32 dq accumulator
            # and per-row softmax sums, plus at most 512 bytes (the H200's, torch 2.11, cuDNN 9.19:
            # 8520192 bytes by the allocator's 512-byte granule for B=8, H=8, L=512, D=64)
            grad_blocks = [rt.malloc(index, t.numel() * t.element_size()) for t in (q, k, v)]
            _transient(rt, index, b * h * lq * (d + 1) * 4 + CUDNN_BACKWARD_WORKSPACE_PAD)
        elif backend == "flash":
            temps = [rt.malloc(index, size) for _ in range(2)]
            grad_blocks = [rt.malloc(index, t.numel() * t.element_size()) for t in (q, k, v)]
            softmax_d = rt.malloc(index, b * h * _up(lq, 128) * 4)
            accumulator = rt.malloc(index, b * _up(lq, 128) * h * _up(d, 8) * 4)
            for block in (accumulator, softmax_d, *reversed(temps)):
                rt.free(index, block)
        else:
            copied = not grad.transpose(1, 2).is_contiguous()
            first = rt.malloc(index, grad.numel() * grad.element_size()) if copied else None
            grad_blocks = [rt.malloc(index, t.numel() * t.element_size()) for t in (q, k, v)]
            second = rt.malloc(index, size)
            rows = [rt.malloc(index, b * h * lq * 4) for _ in range(2)]
            rt.free(index, rows[0])
            rt.free(index, second)
            workspace = rt.malloc(index, b * h * (_up(lq, 16) * _up(d, 8) + _up(lq, 16) // 16) * 4)
            for block in (rows[1], workspace, first):
                if block is not None:
                    rt.free(index, block)
        wanted = [t.requires_grad for t in (q, k, v)]
        graph, ctx.graph = ctx.graph, None  # once: a second backward (retain_graph) recomputes
        with torch._C.DisableTorchFunction(), suspended(), torch.enable_grad():
            if isinstance(graph, _MathPath) and graph.wanted == wanted:
                with torch.no_grad():
                    grads = graph.gradients(grad, [_layout(q, backend), _layout(k, backend)])
            else:
                if graph is not None and not isinstance(graph, _MathPath) and [
                        t.requires_grad for t in graph[1]] == wanted:
                    out, leaves = graph
                    got = iter(torch.autograd.grad(out, [t for t in leaves if t.requires_grad], grad))
                else:
                    got = iter(_recomputed(ctx, q, k, v, mask, wanted, grad))
                grads = [next(got) if w else None for w in wanted]
            del graph
            # each kernel's gradient layout, which decides whether AccumulateGrad keeps it as `.grad` or copies
            # it into the parameter's layout: flash writes its inputs' layout, efficient a (B, L, H, D) buffer
            # returned transposed (the math path's come out in the layouts of its own products)
            grads = [g if g is None or g.stride() == _layout(t, backend) else
                     torch.empty_strided(t.shape, _layout(t, backend), dtype=g.dtype).copy_(g)
                     for g, t in zip(grads, (q, k, v), strict=True)]
        for g, block in zip(grads, grad_blocks, strict=True):
            if g is None:
                rt.free(index, block)  # the kernel writes all three; autograd drops the unwanted ones
            else:
                tracker.account(g, index, block)
        return (*grads, None, None, None, None, None, None, None)


def _recomputed(ctx, q, k, v, mask: Any, wanted: list[bool], grad: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The math path's gradients from its forward run again, with the forward's RNG state (its dropout mask)."""
    dropout_p, is_causal, scale = ctx.options[:3]
    state = torch.get_rng_state() if ctx.rng is not None else None
    if state is not None:
        torch.set_rng_state(ctx.rng)
    try:
        leaves = [t.detach().requires_grad_(w) for t, w in zip((q, k, v), wanted, strict=True)]
        out = F.scaled_dot_product_attention(*leaves, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal,
                                             scale=scale)
        return torch.autograd.grad(out, [t for t in leaves if t.requires_grad], grad)
    finally:
        if state is not None:
            torch.set_rng_state(state)


def attention(q, k, v, mask: Any, dropout_p: float, is_causal: bool, scale, backend: str, index: int,
              tracker: StorageTracker) -> torch.Tensor:
    return FusedAttention.apply(q, k, v, mask, dropout_p, is_causal, scale, backend, index, tracker)


class FusedRMSNorm(torch.autograd.Function):
    """CUDA's rms_norm is one kernel (`_fused_rms_norm`) that keeps only the output and a float32 reciprocal
    RMS per row, and whose backward makes dx and the weight gradient and nothing else (native mode's trace);
    the CPU build runs a composite that keeps its squares, mean and normalized input for backward."""

    @staticmethod
    def forward(ctx, x, normalized_shape, weight, eps, index: int, tracker: StorageTracker):
        with torch._C.DisableTorchFunction(), suspended():
            out = F.rms_norm(x, normalized_shape, weight, eps)
        tracker.account(out, index)
        rows = tuple(x.shape[:x.dim() - len(normalized_shape)]) + (1,) * len(normalized_shape)
        acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
        rstd = _charged(tracker, index, rows, acc)
        ctx.options = (tuple(normalized_shape), eps, index, tracker)
        ctx.save_for_backward(x, weight, rstd)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, weight, _rstd = ctx.saved_tensors
        normalized_shape, eps, index, tracker = ctx.options
        rt = tracker.runtime
        wanted = [ctx.needs_input_grad[0], weight is not None and ctx.needs_input_grad[2]]
        blocks = [rt.malloc(index, x.numel() * x.element_size()),
                  rt.malloc(index, weight.numel() * weight.element_size()) if wanted[1] else None]
        with torch._C.DisableTorchFunction(), suspended(), torch.enable_grad():
            leaves = [x.detach().requires_grad_(wanted[0]),
                      None if weight is None else weight.detach().requires_grad_(wanted[1])]
            out = F.rms_norm(leaves[0], normalized_shape, leaves[1], eps)
            needed = [t for t, w in zip(leaves, wanted, strict=True) if w]
            got = iter(torch.autograd.grad(out, needed, grad) if needed else ())
            grads = [next(got) if w else None for w in wanted]
        final = []
        for g, t, block in zip(grads, (x, weight), blocks, strict=True):
            if g is None:
                if block is not None:
                    rt.free(index, block)
                final.append(None)
                continue
            if g.stride() != t.stride():  # the kernel writes its inputs' layout (AccumulateGrad keeps it)
                g = torch.empty_strided(t.shape, t.stride(), dtype=g.dtype).copy_(g)
            tracker.account(g, index, block)
            final.append(g)
        grads = final
        return grads[0], None, grads[1], None, None, None


def rms_norm(x, normalized_shape, weight, eps, index: int, tracker: StorageTracker) -> torch.Tensor:
    return FusedRMSNorm.apply(x, normalized_shape, weight, eps, index, tracker)


class FusedDropout(torch.autograd.Function):
    """CUDA's dropout is `native_dropout`: one kernel that writes a bool mask (allocated first) and the output, and a
    backward that scales the gradient by the mask. The CPU build's `native_dropout` computes the same numbers the
    slow way, multiplying by its bool mask with a type-promoting cast (forward, and again in backward): 1.4x the CPU
    build's own dropout, which draws float noise (forward and backward of 16x64x1024 floats, 14.1 vs 10.1 ms, one
    thread). This draws the noise as a float tensor instead, with the same
    Bernoulli draws (the CPU sampler's draws do not depend on the dtype filled) scaled in place, so that
    `x * noise` is ATen's `x * mask * scale` bit for bit (x*1*s and x*(1*s) round alike; x*0 keeps x's sign and
    NaN), and backward is one multiply. Only where that equality holds: float32 and float64 (a half type's
    `(x * mask) * scale` rounds between the two products). The device sees CUDA's buffers: the mask's bytes
    charged first and held until backward has run (a placeholder never written, so it costs the host no pages),
    then the output; the noise is host memory only, as the CPU build's own dropout keeps it."""

    @staticmethod
    def forward(ctx, x, p: float, index: int, tracker: StorageTracker):
        started = time.monotonic_ns()
        p1m = 1.0 - p
        with torch._C.DisableTorchFunction(), suspended():
            mask = torch.empty_like(x, dtype=torch.bool)  # native_dropout's: x's layout, one byte per element
            noise = torch.empty_like(x).bernoulli_(p1m).mul_(1.0 / p1m)
            out = x.mul(noise)
        launched(tracker.runtime, index, started)  # as the dispatch mode does after an op: busy, or lost
        tracker.account(mask, index)
        tracker.account(out, index)
        ctx.save_for_backward(mask, noise)  # saved tensors: released once backward has run, as ATen's mask is
        return out

    @staticmethod
    def backward(ctx, grad):
        _mask, noise = ctx.saved_tensors
        return grad * noise, None, None, None  # charged by the dispatch mode, as native_dropout_backward's output


# What user code that inspects the graph sees on CUDA (torchviz, anomaly traces, tests asserting the node)
FusedDropout._backward_cls.__name__ = FusedDropout._backward_cls.__qualname__ = "NativeDropoutBackward0"

DROPOUT_DTYPES = (torch.float32, torch.float64)


def dropout(x: torch.Tensor, p: float, index: int, tracker: StorageTracker) -> torch.Tensor:
    return FusedDropout.apply(x, p, index, tracker)
