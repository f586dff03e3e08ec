"""Achieved rates on the GPU, the roofline's ground truth: GEMM per dtype and shape, batched GEMM, attention,
memory bandwidth by size (L2 and HBM), host copies, elementwise and normalisation kernels, launch overhead.
One JSON document on stdout; each row has its shape, the median time of its repeats, and the rate it implies.

Timed with CUDA events around a batch of repeats after warm-ups; each batch is sized to run ~50 ms. Set
CAPTURE_QUICK=1 for a dry run (one repeat; the fake's timings mean nothing).
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

QUICK = os.environ.get("CAPTURE_QUICK") == "1"
GIB = 1 << 30


def timed(fn, *args, target_ms: float = 50.0, batches: int = 5) -> float:
    """Median seconds per call of fn(*args)."""
    fn(*args)
    torch.cuda.synchronize()
    if QUICK:
        return 1e-9
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn(*args)
    end.record()
    end.synchronize()
    one = max(start.elapsed_time(end), 1e-3)
    reps = max(1, min(2000, int(target_ms / one)))
    times = []
    for _ in range(batches):
        start.record()
        for _ in range(reps):
            fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / reps)
    return statistics.median(times)


def gemm_rows() -> list[dict]:
    rows = []
    dtypes = {"fp64": torch.float64, "fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
              "bf16": torch.bfloat16}
    squares = [256, 1024, 4096, 8192, 16384]
    llm = [(1, 8192, 8192), (16, 8192, 8192), (128, 8192, 8192), (2048, 8192, 8192), (4096, 28672, 8192),
           (4096, 8192, 28672), (4096, 128256, 4096), (8192, 4096, 4096)]
    for name, dt in dtypes.items():
        torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        shapes = [(s, s, s) for s in squares if not (name in ("fp64", "fp32") and s > 8192)]
        if name in ("bf16", "fp16"):
            shapes += llm
        for m, n, k in (shapes[:2] if QUICK else shapes):
            a = torch.randn(m, k, device="cuda", dtype=dt)
            b = torch.randn(k, n, device="cuda", dtype=dt)
            t = timed(torch.matmul, a, b)
            rows.append({"op": "gemm", "dtype": name, "m": m, "n": n, "k": k, "s": t,
                         "tflops": 2 * m * n * k / t / 1e12, "bytes": (m * k + k * n + m * n) * a.element_size()})
    torch.backends.cuda.matmul.allow_tf32 = False
    # fp8 (e4m3, per-tensor scales) and int8 through the ops PyTorch exposes for them.
    for s in ([1024] if QUICK else [1024, 4096, 8192, 16384]):
        a = torch.randn(s, s, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(s, s, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        try:
            t = timed(functools.partial(torch._scaled_mm, a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
            rows.append({"op": "gemm", "dtype": "fp8", "m": s, "n": s, "k": s, "s": t, "tflops": 2 * s ** 3 / t / 1e12})
        except Exception as exc:
            rows.append({"op": "gemm", "dtype": "fp8", "m": s, "error": str(exc)[:300]})
        ai = torch.randint(-8, 8, (s, s), device="cuda", dtype=torch.int8)
        bi = torch.randint(-8, 8, (s, s), device="cuda", dtype=torch.int8)
        try:
            t = timed(torch._int_mm, ai, bi)
            rows.append({"op": "gemm", "dtype": "int8", "m": s, "n": s, "k": s, "s": t, "tops": 2 * s ** 3 / t / 1e12})
        except Exception as exc:
            rows.append({"op": "gemm", "dtype": "int8", "m": s, "error": str(exc)[:300]})
    for bsz, m, n, k in ([(64, 512, 512, 64)] if QUICK else
                         [(64, 512, 512, 64), (256, 1024, 1024, 128), (32, 4096, 4096, 128), (512, 128, 128, 128)]):
        a = torch.randn(bsz, m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(bsz, k, n, device="cuda", dtype=torch.bfloat16)
        t = timed(torch.bmm, a, b)
        rows.append({"op": "bmm", "dtype": "bf16", "batch": bsz, "m": m, "n": n, "k": k, "s": t,
                     "tflops": 2 * bsz * m * n * k / t / 1e12})
    return rows


def fwd_bwd(q, k, v, grad, causal: bool):
    return torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=causal), (q, k, v), grad)


def attention_rows() -> list[dict]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    shapes = [(4, 32, 4096, 4096, 128, True), (4, 32, 4096, 4096, 128, False), (1, 32, 16384, 16384, 128, True),
              (8, 16, 2048, 2048, 64, True), (32, 32, 1, 4096, 128, False)]
    for b, h, q_len, kv_len, d, causal in (shapes[:1] if QUICK else shapes):
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
            q = torch.randn(b, h, q_len, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(b, h, kv_len, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(b, h, kv_len, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            # causal: the lower triangle only (q_len == kv_len here)
            flops = 4 * b * h * q_len * kv_len * d * (0.5 if causal else 1.0)
            row = {"op": "sdpa", "backend": backend.name, "batch": b, "heads": h, "q_len": q_len, "kv_len": kv_len,
                   "head_dim": d, "causal": causal, "dtype": "bf16", "flops_fwd": flops}
            try:
                with sdpa_kernel(backend):
                    with torch.no_grad():
                        sdpa = functools.partial(F.scaled_dot_product_attention, is_causal=causal)
                        row["s_fwd"] = timed(sdpa, q, k, v)
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    grad = torch.randn_like(out)
                    if q_len > 1:
                        row["s_fwd_bwd"] = timed(fwd_bwd, q, k, v, grad, causal)
                row["tflops_fwd"] = flops / row["s_fwd"] / 1e12
                if "s_fwd_bwd" in row:
                    row["tflops_fwd_bwd"] = 3.5 * flops / row["s_fwd_bwd"] / 1e12  # bwd ~2.5x fwd's FLOPs
            except Exception as exc:
                row["error"] = str(exc).splitlines()[0][:300]
            rows.append(row)
    return rows


def bandwidth_rows() -> list[dict]:
    rows = []
    sizes = [1 << 20, 8 << 20, 32 << 20, 64 << 20, 256 << 20, 1 << 30, 4 << 30]
    for nbytes in (sizes[:2] if QUICK else sizes):
        x = torch.empty(nbytes // 4, device="cuda")
        y = torch.empty_like(x)
        x.fill_(1.0)
        rows.append({"op": "copy", "bytes": nbytes, "s": (t := timed(y.copy_, x)),
                     "gb_s": 2 * nbytes / t / 1e9})
        rows.append({"op": "fill", "bytes": nbytes, "s": (t := timed(y.fill_, 2.0)), "gb_s": nbytes / t / 1e9})
        rows.append({"op": "sum", "bytes": nbytes, "s": (t := timed(x.sum)), "gb_s": nbytes / t / 1e9})
        z = torch.empty_like(x)
        rows.append({"op": "add", "bytes": nbytes, "s": (t := timed(functools.partial(torch.add, out=z), x, y)),
                     "gb_s": 3 * nbytes / t / 1e9})
    n = 256 << 20 if QUICK else 1 << 30
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    for pinned in (True, False):
        host = torch.empty(n, dtype=torch.uint8, pin_memory=pinned)
        for op, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
            t = timed(dst.copy_, src, target_ms=100, batches=3)
            rows.append({"op": op, "pinned": pinned, "bytes": n, "s": t, "gb_s": n / t / 1e9})
    return rows


def kernel_rows() -> list[dict]:
    rows = []
    shape = (2048, 2048) if QUICK else (8192, 8192)
    x = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
    nbytes = x.numel() * x.element_size()
    ln = torch.nn.LayerNorm(shape[1], device="cuda", dtype=torch.bfloat16)
    rms = torch.nn.RMSNorm(shape[1], device="cuda", dtype=torch.bfloat16)
    for name, fn in (("gelu", lambda: F.gelu(x)), ("silu", lambda: F.silu(x)), ("softmax", lambda: x.softmax(-1)),
                     ("layernorm", lambda: ln(x)), ("rmsnorm", lambda: rms(x)), ("add_", lambda: x.add_(1.0)),
                     ("cross_entropy", lambda: F.cross_entropy(x.float()[:1024], torch.zeros(1024, dtype=torch.long,
                                                                                                device="cuda")))):
        rows.append({"op": name, "shape": list(shape), "dtype": "bf16", "s": (t := timed(fn)),
                     "gb_s_rw": 2 * nbytes / t / 1e9})
    # Launch overhead: per tiny kernel, from the host (eager) and on the GPU (a CUDA graph of 100 of them).
    tiny = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(2000 if not QUICK else 10):
        tiny.add_(1)
    torch.cuda.synchronize()
    rows.append({"op": "launch_eager", "s": (time.perf_counter() - t0) / (2000 if not QUICK else 10)})
    try:
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            for _ in range(3):
                tiny.add_(1)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            for _ in range(100):
                tiny.add_(1)
        rows.append({"op": "launch_graph", "s": timed(g.replay) / 100})
    except Exception as exc:
        rows.append({"op": "launch_graph", "error": str(exc)[:300]})
    return rows


def main() -> int:
    doc = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0)}
    for name, fn in (("bandwidth", bandwidth_rows), ("kernels", kernel_rows), ("gemm", gemm_rows),
                     ("attention", attention_rows)):
        t0 = time.monotonic()
        try:
            doc[name] = fn()
        except Exception as exc:
            doc[name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        doc[f"{name}_seconds"] = round(time.monotonic() - t0, 1)
        torch.cuda.empty_cache()
        print(json.dumps({name: doc[f"{name}_seconds"]}), file=sys.stderr)
    json.dump(doc, sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
