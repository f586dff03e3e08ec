"""fakecuda's dropout (fused.FusedDropout): CUDA's native_dropout memory with the CPU build's fast math.

The kernel must be ATen's native_dropout bit for bit (values, NaN and signed zeros, strides, the CPU generator's
state after, the gradient) and must charge exactly what the native_dropout path charges; both are checked here
against that path itself, run by the same fakecuda with the fast kernel turned off.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.torch


def _bits(t):
    """A tensor's exact bit patterns (NaN payloads and the sign of zeros included), for bitwise comparison."""
    import torch

    return t.contiguous().view({torch.float32: torch.int32, torch.float64: torch.int64}[t.dtype])


def _inputs(torch, dtype, layout: str):
    g = torch.Generator().manual_seed(7)
    base = torch.randn(6, 40, 33, generator=g, dtype=dtype)
    flat = base.view(-1)
    flat[::17] = 0.0
    flat[1::19] = -0.0
    flat[2::23] = float("nan")
    flat[3::29] = float("inf")
    flat[4::31] = float("-inf")
    if layout == "contiguous":
        return base
    if layout == "transposed":  # dense, not contiguous: the mask and output follow its layout
        return base.transpose(0, 2)
    if layout == "strided":  # not dense: the outputs are contiguous
        return base[:, ::2, 1::3]
    if layout == "channels_last":
        return torch.randn(4, 8, 9, 10, generator=g, dtype=dtype).to(memory_format=torch.channels_last)
    return base[0, 0, 0]  # a 0-dim tensor


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided", "channels_last", "scalar"])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_fused_dropout_is_atens_native_dropout_bit_for_bit(fakecuda, dtype, layout, p):
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, dtype)
    host = _inputs(torch, dtype, layout)
    grad_host = torch.randn(host.shape, dtype=dtype, generator=torch.Generator().manual_seed(3))
    grad_host.view(-1)[::13] = -0.0
    # ATen's own kernels, plain CPU, before fakecuda is on
    torch.manual_seed(11)
    ref_out, ref_mask = torch.native_dropout(host, p, True)
    ref_state = torch.get_rng_state()
    ref_grad = torch.ops.aten.native_dropout_backward(grad_host, ref_mask, 1.0 / (1.0 - p))

    fakecuda("a100")
    x = host.to("cuda").requires_grad_()
    torch.manual_seed(11)
    out = torch.nn.functional.dropout(x, p, training=True)
    assert torch.equal(torch.get_rng_state(), ref_state)  # the same draws, no more, no fewer
    assert type(out.grad_fn).__name__ == "NativeDropoutBackward0"
    assert out.device == torch.device("cuda", 0) and out.dtype == dtype
    assert out.stride() == ref_out.stride()
    assert torch.equal(_bits(out.detach().cpu()), _bits(ref_out))
    # the node's own gradient, as it leaves backward (`.grad` would be fitted to x's layout by AccumulateGrad)
    (got,) = torch.autograd.grad(out, x, grad_host.to("cuda"))
    assert got.stride() == ref_grad.stride()
    assert torch.equal(_bits(got.cpu()), _bits(ref_grad))


def _stats_through_a_step(torch, dtype):
    """The allocator's counters and its blocks in address order at each point of a dropout's life, from a fresh
    device (the blocks' order is the order the kernel allocated them in)."""
    from fakegpu.fakecuda import _active

    allocator = _active["runtime"].devices[0].allocator

    def point():
        blocks = [[(size, state == "active_allocated") for _ptr, size, _req, state, *_ in seg]
                  for seg in allocator.segment_table()]
        return torch.cuda.memory_stats(), blocks

    torch.manual_seed(0)
    x = torch.randn(300, 500, device="cuda", dtype=dtype, requires_grad=True)
    points = [point()]
    y = torch.nn.functional.dropout(x, 0.2, training=True)
    points.append(point())
    (y * 2).sum().backward()
    points.append(point())
    del y
    points.append(point())
    with torch.no_grad():  # no graph: the mask is freed as the op returns
        z = torch.nn.functional.dropout(x, 0.5, training=True)
    points.append(point())
    return points, z.cpu(), x.grad.cpu()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_dropout_charges_what_native_dropout_charges(fakecuda, monkeypatch, dtype):
    torch = pytest.importorskip("torch")
    from fakegpu.fakecuda import fused

    dtype = getattr(torch, dtype)
    runs = []
    for kernels in (fused.DROPOUT_DTYPES, ()):  # the fast kernel, then ATen's native_dropout
        monkeypatch.setattr(fused, "DROPOUT_DTYPES", kernels)
        import fakegpu.fakecuda as fc

        fakecuda("a100")
        runs.append(_stats_through_a_step(torch, dtype))
        fc.deactivate()
    (fast, fast_z, fast_grad), (native, native_z, native_grad) = runs
    for a, b in zip(fast, native, strict=True):
        assert a == b  # every counter: allocations, frees, segments, peaks, at every point
    stats, blocks = fast[1]
    assert stats["allocation.all.current"] == fast[0][0]["allocation.all.current"] + 2  # the mask and the output
    if dtype == torch.float32:  # both from the small pool's segment, in the kernel's order: mask, then output
        assert [b for seg in blocks for b in seg if b[1]][-2:] == [(150016, True), (600064, True)]
    assert torch.equal(fast_z, native_z) and torch.equal(fast_grad, native_grad)


def test_half_types_take_native_dropout(fakecuda, monkeypatch):
    torch = pytest.importorskip("torch")
    from fakegpu.fakecuda import fused

    def refuse(*_args):
        raise AssertionError("the fast kernel rounds half types otherwise than ATen")

    monkeypatch.setattr(fused, "dropout", refuse)
    fakecuda("a100")
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(64, 64, device="cuda", dtype=dtype, requires_grad=True)
        y = torch.nn.functional.dropout(x, 0.3, training=True)
        y.float().sum().backward()
        assert type(y.grad_fn).__name__ == "NativeDropoutBackward0" and x.grad.dtype == dtype


def test_fused_dropout_on_a_lost_gpu_raises_torchs_error(fakecuda, monkeypatch):
    """A GPU a fault plan took off the bus refuses the dropout as it refuses any op: with PyTorch's error for it,
    not the model's internal exception."""
    torch = pytest.importorskip("torch")
    from fakegpu.fakecuda import _active
    from fakegpu.fakecuda.errors import ModelGPULost

    fakecuda("a100")
    x = torch.randn(64, 64, device="cuda", requires_grad=True)
    runtime = _active["runtime"]

    def lost(index, *_args):
        raise ModelGPULost(index)

    monkeypatch.setattr(runtime, "ran", lost)
    with pytest.raises(getattr(torch, "AcceleratorError", RuntimeError)) as caught:
        torch.nn.functional.dropout(x, 0.3, training=True)
    assert not isinstance(caught.value, ModelGPULost)
