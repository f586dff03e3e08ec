"""Where fakecuda charges memory (dispatch.py) and CUDA's kernel choices (kernels.py, fused.py).

The figures these tests expect are CUDA's: what native mode (PyTorch's real CUDA path on simulated memory)
allocates for the same calls; tests/memory_fidelity compares whole programs against native mode itself.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.torch
MiB = 1 << 20


def test_gradients_made_in_backward_are_charged_before_python_reads_them(fakecuda):
    torch = pytest.importorskip("torch")
    fakecuda("a100")
    layer = torch.nn.Linear(256, 256, bias=False).cuda()
    x = torch.randn(64, 256, device="cuda")
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    layer(x).square().mean().backward()
    # torch releases without TORCH_CUBLAS_WORKSPACE_CACHE (before 2.15) hold the cuBLAS workspace after a product
    from fakegpu.fakecuda import _active

    held = sum(nbytes for _, nbytes in _active["runtime"].workspaces.cublas.values())
    # the weight gradient, made by the autograd engine in C++, is held without anyone reading .grad
    assert torch.cuda.memory_allocated() - before - held == 256 * 256 * 4
    # at the peak: output, its square, the square's gradient, the weight gradient, and a cuBLAS workspace
    assert torch.cuda.max_memory_allocated() - before > 256 * 256 * 4 + 2 * 64 * 256 * 4


def test_copies_to_the_cpu_and_to_another_device_are_charged_where_they_land(fakecuda):
    torch = pytest.importorskip("torch")
    fakecuda("a100:2")
    x = torch.randn(1024, 256, device="cuda:0")  # 1 MiB
    on0 = torch.cuda.memory_allocated(0)
    host = x.cpu()
    assert torch.cuda.memory_allocated(0) == on0 and host.device.type == "cpu"
    other = x.to("cuda:1")
    assert torch.cuda.memory_allocated(0) == on0
    assert torch.cuda.memory_allocated(1) == MiB and other.device == torch.device("cuda", 1)
    buffer = torch.empty(1024, 256)
    buffer.copy_(x)  # written in place on the host: nothing new on the device
    assert torch.cuda.memory_allocated(0) == on0


def test_dropout_keeps_a_bool_mask_as_cuda_does(fakecuda):
    torch = pytest.importorskip("torch")
    fakecuda("a100")
    x = torch.randn(1024, 1024, device="cuda", requires_grad=True)  # 4 MiB
    before = torch.cuda.memory_allocated()
    y = torch.nn.functional.dropout(x, 0.25, training=True)
    assert torch.cuda.memory_allocated() - before == 4 * MiB + MiB  # output + one byte per element
    assert type(y.grad_fn).__name__ == "NativeDropoutBackward0"
    kept = (y != 0).float().mean().item()
    assert 0.7 < kept < 0.8
    y.sum().backward()
    # y != 0 is the mask only where x != 0: CPU randn gives an exact 0.0 (Box-Muller with u1 == 1) in about one
    # 1M-element draw of 20, and a kept zero reads as dropped; there the gradient is either 0 or 1/0.75
    nonzero = x.detach() != 0
    assert torch.equal(x.grad[nonzero], ((y != 0).float() / 0.75)[nonzero])
    at_zero = x.grad[~nonzero]
    assert bool(((at_zero == 0) | (at_zero == torch.ones(1, device="cuda") / 0.75)).all())


@pytest.mark.parametrize("keep_graph", [True, False], ids=["math-graph-kept", "forward-recomputed"])
@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
def test_fused_attention_has_the_math_paths_numbers(fakecuda, dropout_p, keep_graph, monkeypatch):
    torch = pytest.importorskip("torch")
    from fakegpu.fakecuda import fused

    if not keep_graph:  # weights above the limit: backward runs the forward again from the saved RNG state
        monkeypatch.setattr(fused, "KEEP_GRAPH_ELEMENTS", 0)
    F = torch.nn.functional
    fakecuda("a100")
    g = torch.Generator().manual_seed(0)
    cpu = [torch.randn(2, 4, 64, 32, generator=g) for _ in range(3)]
    grad = torch.randn(2, 4, 64, 32, generator=g)
    ref_in = [t.clone().requires_grad_() for t in cpu]
    torch.manual_seed(7)
    ref = F.scaled_dot_product_attention(*ref_in, dropout_p=dropout_p, is_causal=True)  # CPU tensors: CPU math
    ref.backward(grad)
    fake_in = [t.cuda().requires_grad_() for t in cpu]
    torch.manual_seed(7)  # fake CUDA draws from the CPU generator: the same dropout mask
    out = F.scaled_dot_product_attention(*fake_in, dropout_p=dropout_p, is_causal=True)
    assert type(out.grad_fn).__name__ == "FusedAttentionBackward" and out.device.type == "cuda"
    torch.testing.assert_close(out.cpu(), ref.detach())
    out.backward(grad.cuda())
    for fake, plain in zip(fake_in, ref_in, strict=True):
        torch.testing.assert_close(fake.grad.cpu(), plain.grad)


@pytest.mark.parametrize("mask", ["float", "bool", "causal", "none"])
def test_fused_attention_with_dropout_computes_the_cpu_math_paths_numbers_bit_for_bit(fakecuda, mask, monkeypatch):
    """With dropout the kept math path is run op by op (fused._MathPath) and its backward written out: output,
    gradients and the generator's state after the dropout draw must equal the CPU's own SDPA (its math path, through
    autograd) exactly, on inputs in multi-head attention's layout (heads split from a (L, B, E) projection). float32:
    CUDA's fused kernels take no float64, which goes to CUDA's math path, the CPU's own."""
    torch = pytest.importorskip("torch")
    from fakegpu.fakecuda import fused

    F = torch.nn.functional
    dt = torch.float32
    explicit = []
    original = fused._MathPath.gradients
    monkeypatch.setattr(fused._MathPath, "gradients", lambda self, *a: explicit.append(1) or original(self, *a))
    fakecuda("a100")
    g = torch.Generator().manual_seed(0)
    b, h, lq, d = 3, 4, 37, 16
    cpu = [torch.randn(lq, b, h * d, generator=g, dtype=dt).view(lq, b * h, d).transpose(0, 1).view(b, h, lq, d)
           for _ in range(3)]
    attn_mask = {"float": torch.randn(lq, lq, generator=g, dtype=dt), "bool": torch.rand(lq, lq, generator=g) > 0.3,
                 "causal": None, "none": None}[mask]
    grad = torch.randn(b, h, lq, d, generator=g, dtype=dt)

    def run(inputs, m):
        leaves = [t.detach().requires_grad_() for t in inputs]
        torch.manual_seed(7)
        out = F.scaled_dot_product_attention(*leaves, attn_mask=m, dropout_p=0.25, is_causal=mask == "causal")
        out.backward(grad.to(out.device))
        return [t.cpu() for t in (out.detach(), *(x.grad for x in leaves), torch.rand(3))]

    with fused.suspended(), torch._C.DisableTorchFunction():
        ref = run(cpu, attn_mask)  # plain CPU tensors: the CPU's own SDPA, its math path
    got = run([t.cuda() for t in cpu], None if attn_mask is None else attn_mask.cuda())
    assert explicit == [1]
    for name, a, e in zip(["output", "dq", "dk", "dv", "next draws"], got, ref, strict=True):
        assert torch.equal(a, e), name


def test_fused_attention_memory_is_the_same_whether_backward_keeps_or_recomputes_the_math(fakecuda, monkeypatch):
    """Keeping the CPU math path's graph for backward (small weights) is host memory only: every allocator number,
    the gradients and the RNG stream after the step equal those of running the forward again in backward."""
    torch = pytest.importorskip("torch")
    import fakegpu.fakecuda as fc
    from fakegpu.fakecuda import fused

    results = []
    for limit in (fused.KEEP_GRAPH_ELEMENTS, 0):
        monkeypatch.setattr(fused, "KEEP_GRAPH_ELEMENTS", limit)
        fc.activate("a100")  # a fresh allocator model for each
        torch.manual_seed(3)
        q, k, v = (torch.randn(2, 4, 128, 32, device="cuda", requires_grad=True) for _ in range(3))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.2, is_causal=True)
        assert type(out.grad_fn).__name__ == "FusedAttentionBackward"
        out.sum().backward()
        results.append((torch.cuda.memory_stats(), [t.grad.cpu() for t in (q, k, v)], torch.rand(4)))
        del q, k, v, out
        fc.deactivate()
    (kept_stats, kept_grads, kept_next), (again_stats, again_grads, again_next) = results
    assert kept_stats["allocated_bytes.all.peak"] > 0 and kept_stats == again_stats
    for a, b in zip(kept_grads, again_grads, strict=True):
        assert torch.equal(a, b)
    assert torch.equal(kept_next, again_next)  # neither path leaves the generator elsewhere


@pytest.mark.parametrize("dropout_p", [0.0, 0.2])
def test_fused_attention_under_non_reentrant_checkpoint_recomputes_with_the_same_numbers(fakecuda, dropout_p):
    """torch.utils.checkpoint (non-reentrant, as transformers' gradient checkpointing uses it) counts the tensors
    forward saved against those its recomputation saves; the kept math graph's tensors passed its hooks and it
    raised CheckpointError (12 against 5). Under saved-tensor hooks backward recomputes the math instead."""
    torch = pytest.importorskip("torch")
    from torch.utils.checkpoint import checkpoint

    F = torch.nn.functional
    fakecuda("a100")
    torch.manual_seed(3)
    base = [torch.randn(2, 4, 64, 32, device="cuda") for _ in range(3)]
    grads = []
    for checkpointed in (False, True):
        q, k, v = (t.clone().requires_grad_() for t in base)

        def attention(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)

        torch.manual_seed(11)
        out = checkpoint(attention, q, k, v, use_reentrant=False) if checkpointed else attention(q, k, v)
        out.square().sum().backward()
        grads.append([t.grad.cpu() for t in (q, k, v)])
    for plain, recomputed in zip(*grads, strict=True):
        torch.testing.assert_close(recomputed, plain)


def test_fused_attention_saves_a_logsumexp_not_the_weights(fakecuda):
    torch = pytest.importorskip("torch")
    fakecuda("a100")
    q, k, v = (torch.randn(8, 4, 256, 64, device="cuda", requires_grad=True) for _ in range(3))  # 2 MiB each
    before = torch.cuda.memory_allocated()
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    # fp32 on an A100 is the memory-efficient kernel: output + logsumexp (B, H, L rounded up to 32, float32)
    # + from torch 2.15 its philox seed and offset (int64 device scalars without dropout, one 512-byte block
    # each); the math path would keep 8 x 4 x 256 x 256 weights (8 MiB) and their softmax
    from fakegpu.fakecuda.releases import EFFICIENT_ATTENTION_DEVICE_RNG, release

    rng = 2 * 512 if release(torch.__version__) >= EFFICIENT_ATTENTION_DEVICE_RNG else 0
    assert torch.cuda.memory_allocated() - before == 2 * MiB + 8 * 4 * 256 * 4 + rng
    # the kernel writes (B, L, H, D): the usual merge of the heads is a view
    assert out.transpose(1, 2).reshape(8, 256, 256).data_ptr() == out.data_ptr()


def test_attention_backend_follows_cuda_rules(fakecuda):
    torch = pytest.importorskip("torch")
    from fakegpu.fakecuda import _active
    from fakegpu.fakecuda.kernels import cuda_sdpa_backend

    fakecuda("a100:1,t4:1")
    mode = _active["mode"]

    def pick(device: int, dtype, mask=None, head=64):
        q = torch.empty(2, 4, 16, head, dtype=dtype)
        return cuda_sdpa_backend(mode, device, q, q, q, mask, 0.0, False, False)

    assert pick(0, torch.bfloat16) == "flash"
    assert pick(0, torch.float32) == "efficient"
    assert pick(0, torch.float16, mask=torch.zeros(16, 16)) == "efficient"
    assert pick(1, torch.float16) == "efficient"  # T4 (sm75): no flash
    assert pick(1, torch.bfloat16) == "math"  # and no bf16 kernel
    assert pick(0, torch.float16, head=60) == "math"  # fused kernels want head sizes in multiples of 8
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.MATH]):
        assert pick(0, torch.bfloat16) == "math"


def test_efficient_attention_backward_copies_the_output_gradient_only_when_needed(fakecuda, requested):
    # the kernel reads the output's gradient as a contiguous (B, L, H, D) tensor: another layout (a (B, H, L, D)
    # one; the H200's sdpa_causal_fp32, whose gradient is a sum's expanded one) is copied, one that already is
    # (GPT-2's, its heads merged by transpose + reshape before the projection) is not: the H200's GPT-2 backward
    # (torch 2.11) has one q-sized buffer fewer
    torch = pytest.importorskip("torch")

    fakecuda("a100")
    b, h, n, d = 4, 4, 128, 64
    size = b * h * n * d * 4

    def q_sized_in_backward(weights) -> int:
        q, k, v = (torch.randn(b, h, n, d, device="cuda", requires_grad=True) for _ in range(3))
        loss = (torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) * weights).sum()
        with requested() as sizes:
            loss.backward()  # the product's gradient (q-sized, in the weights' layout), then the kernel's buffers
        return sizes.count(size)

    # dq, dk, dv (written (B, L, H, D), so AccumulateGrad copies each into its leaf's layout: 3 more) and the
    # kernel's second buffer
    blhd = torch.randn(b, n, h, d, device="cuda").transpose(1, 2)
    assert q_sized_in_backward(blhd) == 1 + 4 + 3
    assert q_sized_in_backward(torch.randn(b, h, n, d, device="cuda")) == 1 + 5 + 3  # and the gradient's copy


def _as_release(monkeypatch, version: str, cudnn: int = 91900) -> None:
    """fakecuda as it runs on another torch release with another cuDNN runtime (the H200 capture's: torch 2.11,
    cuDNN 9.19), on a CUDA 13 build."""
    from fakegpu.fakecuda import cuda_api, kernels

    monkeypatch.setattr(cuda_api, "torch_version", lambda: version)
    monkeypatch.setattr(kernels, "_cudnn_version", lambda: cudnn)
    monkeypatch.setattr("torch.version.cuda", "13.0")


def test_attention_prefers_cudnn_on_hopper_with_a_recent_cudnn(fakecuda, monkeypatch):
    # a real H200 with torch 2.11.0+cu130 and cuDNN 9.19 ran bf16 attention on cuDNN; native mode (torch's own
    # choice on simulated devices) agrees for 2.11 and 2.15, and keeps flash on an A100
    torch = pytest.importorskip("torch")
    from fakegpu.fakecuda import _active, kernels
    from fakegpu.fakecuda.kernels import cuda_sdpa_backend

    _as_release(monkeypatch, "2.11.0+cu130")
    fakecuda("h200:1,a100:1")
    mode = _active["mode"]

    def pick(device: int, dtype, head=64, dropout=0.0):
        q = torch.empty(2, 4, 16, head, dtype=dtype)
        return cuda_sdpa_backend(mode, device, q, q, q, None, dropout, True, False)

    assert pick(0, torch.bfloat16) == "cudnn" and pick(0, torch.float16) == "cudnn"
    assert pick(1, torch.bfloat16) == "flash"
    assert pick(0, torch.float32) == "efficient"
    assert pick(0, torch.bfloat16, head=256) == "flash"  # cuDNN 9.19: head sizes up to 128
    assert pick(0, torch.bfloat16, dropout=0.1) == "cudnn"  # 2.11 takes any dropout; 2.15 sixteenths only
    _active["runtime"].torch_release = (2, 15)
    assert pick(0, torch.bfloat16, dropout=0.1) == "flash" and pick(0, torch.bfloat16, dropout=0.125) == "cudnn"
    monkeypatch.setattr(kernels, "_cudnn_version", lambda: 91500)
    assert pick(0, torch.bfloat16) == "flash"  # preferred only above cuDNN 9.15
    monkeypatch.setattr(kernels, "_cudnn_version", lambda: 91900)
    monkeypatch.setenv("TORCH_CUDNN_SDPA_DEPRIORITIZED", "1")
    assert pick(0, torch.bfloat16) == "flash"


def test_cudnn_attention_memory_as_on_the_h200(fakecuda, monkeypatch):
    # the H200's trace (tests/data/gpu/h200/mem_workloads.json, sdpa_causal_bf16): philox seed and offset, the
    # output, a float32 logsumexp, a <= 512-byte workspace for the call; backward dq, dk, dv and one workspace
    # of a float32 dq accumulator, per-row sums and <= 512 bytes
    torch = pytest.importorskip("torch")
    _as_release(monkeypatch, "2.11.0+cu130")
    fakecuda("h200")
    q, k, v = (torch.randn(8, 8, 512, 64, device="cuda").bfloat16().requires_grad_() for _ in range(3))
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    kept = 2 * 512 + 4 * MiB + 8 * 8 * 512 * 4
    assert torch.cuda.memory_allocated() - base == kept
    assert torch.cuda.max_memory_allocated() - base == kept + 512
    assert out.is_contiguous()  # cuDNN writes q's layout
    grad = torch.ones_like(out)
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    grads = torch.autograd.grad(out, (q, k, v), grad)
    assert torch.cuda.max_memory_allocated() - base == 3 * 4 * MiB + 8520192
    assert all(g.is_contiguous() for g in grads)


def test_efficient_attention_keeps_no_rng_on_the_device_before_2_15(fakecuda, monkeypatch):
    torch = pytest.importorskip("torch")
    _as_release(monkeypatch, "2.11.0+cu130")
    fakecuda("a100")
    q, k, v = (torch.randn(8, 4, 256, 64, device="cuda", requires_grad=True) for _ in range(3))
    before = torch.cuda.memory_allocated()
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.cuda.memory_allocated() - before == 2 * MiB + 8 * 4 * 256 * 4  # 2.15 adds 2 x 512
    del out


def test_optimizers_default_to_foreach_on_fake_cuda(fakecuda):
    torch = pytest.importorskip("torch")
    from torch.optim.optimizer import _default_to_fused_or_foreach

    fakecuda("a100")
    params = [torch.nn.Parameter(torch.randn(4, 4, device="cuda")) for _ in range(2)]
    assert _default_to_fused_or_foreach(params, differentiable=False, use_fused=False) == (False, True)
    before = torch.cuda.memory_allocated()
    for p in params:
        p.grad = torch.ones_like(p)
    opt = torch.optim.AdamW(params)
    opt.step()
    assert torch.cuda.memory_allocated() > before  # the state lives on the fake device too


def test_ops_that_update_buffers_in_place_still_charge_their_fresh_outputs(fakecuda):
    torch = pytest.importorskip("torch")
    fakecuda("a100")
    bn = torch.nn.BatchNorm2d(16).cuda()
    x = torch.randn(8, 16, 32, 32, device="cuda", requires_grad=True)
    before = torch.cuda.memory_allocated()
    running = bn.running_mean.data_ptr()
    y = bn(x)  # writes running_mean / running_var in place, returns output + saved mean and inverse std
    # native mode measured 525,312: the output and two 512-byte blocks; the running stats are not new
    assert torch.cuda.memory_allocated() - before == y.numel() * 4 + 2 * 512
    assert bn.running_mean.data_ptr() == running


def test_copies_between_host_and_device_take_cudas_device_buffers(fakecuda):
    # the H200 (torch 2.11, op database `to`): a non-blocking float32 -> float64 copy to the host converts on the
    # device first (625 float64s: 5120 bytes there for the call); a blocking one converts on the host
    torch = pytest.importorskip("torch")
    fakecuda("h200")
    x = torch.randn(5, 5, 5, 5, device="cuda")

    def peak_of(fn) -> int:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        return torch.cuda.max_memory_allocated() - base

    assert peak_of(lambda: x.to("cpu", torch.float64, non_blocking=True)) == 5120
    assert peak_of(lambda: x.to("cpu", torch.float64)) == 0
    assert peak_of(lambda: x.cpu()) == 0  # one dtype, one layout: a plain cudaMemcpy
    host = torch.randn(5, 5, 5, 5, dtype=torch.float64).to(memory_format=torch.channels_last)
    # to the device in another dtype and a channels-last layout: written through a contiguous device buffer
    assert peak_of(lambda: host.to("cuda", torch.float32)) == 2 * 2560
    assert peak_of(lambda: host.to("cuda")) == 5120  # same dtype, same layout on both sides: direct
    dst = torch.empty(5, 5, 5, 5, device="cuda").to(memory_format=torch.channels_last)
    assert peak_of(lambda: dst.copy_(host)) == 2560
