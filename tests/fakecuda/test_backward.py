"""The fake CUDA surface inside autograd's backward (backward.py), streams wired to the allocator's pools,
and the accelerator queries. Gradients are compared with the same code run on plain CPU torch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        # a cuda factory in a custom backward, and a C++-made gradient (plain) meeting a saved fake tensor
        return 2 * x * grad + torch.zeros(x.shape, device=x.device)


def hooked_step(dev: str) -> tuple[dict, torch.Tensor, list]:
    """One backward through every kind of Python code the engine calls back; returns grads and what hooks saw."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).to(dev)
    seen: list = []

    def module_hook(mod, grad_in, grad_out):
        seen.append(("module", str(torch.zeros(1, device=dev).device)))
        return (grad_in[0] + torch.zeros(grad_in[0].shape, device=dev),)

    def accumulated(param):
        seen.append(("accumulated", str(param.grad.device)))
        param.grad.add_(torch.ones(param.grad.shape, device=dev))

    def tensor_hook(grad):
        seen.append(("tensor", str(grad.device)))
        return grad + torch.zeros(3, 8, device=dev)[0]

    model[2].register_full_backward_hook(module_hook)
    model[0].weight.register_post_accumulate_grad_hook(accumulated)
    model[0].bias.register_hook(tensor_hook)
    x = torch.randn(5, 4).to(dev).requires_grad_()
    hidden = checkpoint(lambda t: model[1](model[0](t)) + torch.zeros(8, device=dev), x, use_reentrant=False)
    Square.apply(model[2](hidden)).sum().backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    return grads, x.grad, seen


def test_backward_hook_creates_a_cuda_tensor(fakecuda):
    fakecuda("a100")
    x = torch.randn(3, device="cuda", requires_grad=True)
    made = []

    def hook(grad):
        z = torch.zeros(3, device="cuda")
        made.append((z.device, grad.device, torch._C._len_torch_function_stack()))
        return grad + z

    x.register_hook(hook)
    (x * 2).sum().backward()
    assert made == [(torch.device("cuda", 0), torch.device("cuda", 0), 1)]
    assert x.grad.device == torch.device("cuda", 0) and torch.equal(x.grad.cpu(), torch.full((3,), 2.0))


def test_every_backward_callback_sees_fake_cuda_and_gradients_equal_cpu(fakecuda):
    ref_grads, ref_x, _ = hooked_step("cpu")
    fakecuda("a100")
    grads, x_grad, seen = hooked_step("cuda")
    assert sorted(seen) == [("accumulated", "cuda:0"), ("module", "cuda:0"), ("tensor", "cuda:0")]
    assert x_grad.device == torch.device("cuda", 0) and torch.allclose(x_grad.cpu(), ref_x)
    for name, g in grads.items():
        assert g.device == torch.device("cuda", 0)
        assert torch.allclose(g.cpu(), ref_grads[name]), name


def test_autograd_grad_and_double_backward_under_the_mode(fakecuda):
    fakecuda("a100")
    x = torch.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    (g,) = torch.autograd.grad((x ** 3).sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x)
    assert g.device == gg.device == torch.device("cuda", 0)
    assert torch.equal(gg.cpu(), torch.tensor([6.0, 12.0]))


SEEN: list = []  # what TwoDevices.backward received


class TwoDevices(torch.autograd.Function):
    """Outputs on two devices; backward reports what it receives, and picks its path by `grad.is_cuda` as kernel
    libraries do (the host path here gives twice the gradient, so taking it shows)."""

    @staticmethod
    def forward(ctx, a, b):
        return a * 3, b.to("cuda:1") + 1

    @staticmethod
    def backward(ctx, ga, gb):
        SEEN.append((ga.device, gb.device, bool(gb.count_nonzero())))
        scale = 3 if ga.is_cuda else 6
        return ga * scale, gb.to(ga.device)


def test_custom_function_backward_gets_gradients_on_its_outputs_devices(fakecuda):
    """A custom Function's backward receives its gradients as CUDA's would be: on each forward output's device,
    the zeros the engine makes for an output that got no gradient included (charged there, as CUDA allocates
    them); the gradient of a host output stays on the host."""
    import fakegpu.fakecuda as fc

    fakecuda("a100:2")
    SEEN.clear()
    a = torch.ones(4, device="cuda:0", requires_grad=True)
    b = torch.ones(256, 256, device="cuda:0", requires_grad=True)
    x, y = TwoDevices.apply(a, b)
    assert (x.device, y.device) == (torch.device("cuda", 0), torch.device("cuda", 1))
    torch.cuda.reset_peak_memory_stats(1)
    before = torch.cuda.memory_allocated(1)
    x.sum().backward()  # y gets no gradient: the engine hands backward zeros of y's shape
    assert SEEN == [(torch.device("cuda", 0), torch.device("cuda", 1), False)]
    assert torch.equal(a.grad.cpu(), torch.full((4,), 3.0)) and b.grad.device == torch.device("cuda", 0)
    # the zeros took y's bytes on cuda:1
    assert torch.cuda.max_memory_allocated(1) >= before + 256 * 256 * 4

    class Host(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.cpu() * 2

        @staticmethod
        def backward(ctx, g):
            Host.got = g.device
            return g.to("cuda:0") * 2

    t = torch.ones(3, device="cuda:0", requires_grad=True)
    Host.apply(t).sum().backward()
    assert Host.got == torch.device("cpu") and t.grad.device == torch.device("cuda", 0)
    fc.deactivate()
    # plain torch again: nothing noted
    p = torch.ones(2, requires_grad=True)
    (p * 2).sum().backward()
    assert not hasattr((p * 1).grad_fn, "_fc_devices")


def test_device_mismatch_still_raised_outside_backward(fakecuda):
    fakecuda("a100")
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(3, device="cuda") + torch.ones(3)


def test_deactivate_restores_autograd_entry_points(fakecuda):
    import fakegpu.fakecuda as fc

    engine = torch.autograd.graph._engine_run_backward
    push = torch._C._autograd._push_saved_tensors_default_hooks
    fakecuda("a100")
    assert torch.autograd._engine_run_backward is not engine
    fc.deactivate()
    assert torch.autograd.graph._engine_run_backward is engine and torch.autograd._engine_run_backward is engine
    assert torch._C._autograd._push_saved_tensors_default_hooks is push
    fakecuda("a100")


# -- streams and the allocator's per-stream pools


def test_blocks_come_from_the_current_streams_pool(fakecuda):
    rt = fakecuda("a100")
    side = torch.cuda.Stream()
    assert isinstance(side, torch.Stream) and isinstance(side, torch.cuda.Stream)
    with torch.cuda.stream(side):
        assert torch.cuda.current_stream() == side
        a = torch.empty(1000, device="cuda")
    del a  # its block is cached in the side stream's pool
    b = torch.empty(1000, device="cuda")  # the default stream cannot reuse it: a second 2 MiB segment
    assert torch.cuda.memory_reserved() == 2 * (2 * 2**20)
    segments = {blk[4] for seg in rt.devices[0].allocator.segment_table() for blk in seg}
    assert segments == {0, side.stream_id}
    del b


def _states(allocator) -> list[str]:
    return [blk[3] for seg in allocator.segment_table() for blk in seg]


def test_record_stream_keeps_the_block_until_the_next_allocation(fakecuda):
    rt = fakecuda("a100")
    alloc = rt.devices[0].allocator
    side = torch.cuda.Stream()
    x = torch.empty(256, device="cuda")
    x.record_stream(torch.cuda.current_stream())  # its own stream: nothing to track
    x.record_stream(side)
    del x
    assert torch.cuda.memory_allocated() == 0 and _states(alloc) == ["active_awaiting_free", "inactive"]
    y = torch.empty(256, device="cuda")  # the host-run fake's side stream is idle: reclaimed, then reused
    assert _states(alloc) == ["active_allocated", "inactive"] and torch.cuda.memory_reserved() == 2 * 2**20
    del y
    with pytest.raises(RuntimeError, match="unknown parameter type"):  # torch's parser: a torch.Stream only
        torch.empty(1, device="cuda").record_stream(object())


def test_accelerator_queries_say_cuda(fakecuda):
    fakecuda("a100")
    assert torch._C._get_accelerator() == torch.device("cuda")
    assert torch.accelerator.current_accelerator() == torch.device("cuda")
    assert torch.get_device_module() is torch.cuda
    assert isinstance(torch.accelerator.current_stream(), torch.Stream)


def _weight_sized_allocations(requested, run) -> list[int]:
    with requested() as sizes:
        run()
    return sizes


def test_engine_adds_into_the_held_gradient_only(fakecuda, requested):
    # InputBuffer::accumulate adds in place into the gradient it already holds (the first to arrive) when it
    # holds the only reference, never into the arriving one. A real H200 (torch 2.11, GPT-2's tied embedding and
    # LM head) shows it: the head's gradient arrives first as a transposed view, so the embedding's is added to it
    # out of place, a third weight-sized tensor
    fakecuda("h200")
    weight = nn.Parameter(torch.randn(1000, 64, device="cuda"))
    tokens = torch.randint(0, 1000, (4, 8), device="cuda")
    nbytes = 1000 * 64 * 4

    def tied():
        hidden = nn.functional.embedding(tokens, weight)
        nn.functional.linear(hidden, weight).sum().backward()

    assert _weight_sized_allocations(requested, tied).count(nbytes) == 3
    weight.grad = None
    x = torch.randn(2048, 256, device="cuda", requires_grad=True)

    loss = (x.relu() + x.sigmoid()).sum()

    def two_branches():  # the first gradient qualifies: summed in place, no third tensor
        loss.backward()

    assert _weight_sized_allocations(requested, two_branches).count(2048 * 256 * 4) == 2
