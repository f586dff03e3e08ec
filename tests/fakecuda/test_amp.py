"""AMP on fake CUDA: torch.autocast("cuda") follows CUDA's cast rules; GradScaler runs on the fake device."""

from __future__ import annotations

import sys
import types
import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


def cuda_autocast_lists():
    """torch's own CUDA autocast test list (what test_cuda.py checks on real GPUs), built on fake cuda tensors.

    Its module imports torch's test harness (expecttest, numpy) only for two names; a stub stands in for them.
    """
    name = "torch.testing._internal.common_utils"
    saved = sys.modules.get(name)
    if saved is None:
        stub = types.ModuleType(name)
        stub.TEST_WITH_ROCM, stub.TestCase = False, object
        sys.modules[name] = stub
    try:
        from torch.testing._internal.autocast_test_lists import AutocastTestLists

        return AutocastTestLists("cuda")
    finally:
        if saved is None:
            sys.modules.pop(name, None)
            sys.modules.pop("torch.testing._internal.autocast_test_lists", None)


# Kernels that exist only for real CUDA (cuDNN entry points): nothing to run them on the CPU.
CUDA_ONLY = {"cudnn_convolution", "cudnn_convolution_transpose"}


def run_op(op, args, module, kwargs=None, method=False):
    if method:
        return getattr(args[0], op)(*args[1:], **(kwargs or {}))
    return getattr(module, op)(*args, **(kwargs or {}))


@pytest.mark.filterwarnings("ignore::UserWarning")  # the list calls deprecated forms (chain_matmul, cross)
def test_torchs_cuda_autocast_list_gets_cudas_dtypes(fakecuda):
    fakecuda("a100")
    lists = cuda_autocast_lists()
    cases = []
    for op, args, *rest in lists.torch_fp16:
        if op == "einsum":  # torch's entry does not run (a 4-d equation on matrices; test_cuda skips it)
            args = ("ij,jk->ik", *rest[0])
        cases.append((op, args, torch, None, False, torch.float16))
    for op, args, *rest in lists.torch_fp32:
        cases.append((op, args, torch, rest[0] if rest else None, False, torch.float32))
    cases += [(op, args, torch._C._nn, None, False, torch.float16) for op, args in lists.nn_fp16]
    cases += [(op, args, torch._C._nn, None, False, torch.float32) for op, args in lists.nn_fp32]
    cases += [(op, args, torch._C._linalg, None, False, torch.float16) for op, args in lists.linalg_fp16]
    cases += [(op, args, None, None, True, torch.float16) for op, args in lists.methods_fp16]
    cases += [(op, args, None, None, True, torch.float32) for op, args in lists.methods_fp32]
    cases += [(op, args, torch, None, False, torch.float32) for op, args in lists.torch_need_autocast_promote]
    cases += [(op, args, torch, None, False, out) for op, args, out in lists.torch_expect_builtin_promote]
    cases += [(op, args, None, None, True, out) for op, args, out in lists.methods_expect_builtin_promote]
    wrong = []
    for op, args, module, kwargs, method, want in cases:
        if op in CUDA_ONLY:
            continue
        with torch.autocast("cuda", dtype=torch.float16):
            out = run_op(op, args, module, kwargs, method)
        out = out[0] if isinstance(out, tuple) else out
        if not isinstance(out, torch.Tensor):  # torch.equal answers a Python bool
            continue
        if out.dtype != want or not out.is_cuda:
            wrong.append((op, out.dtype, want))
    assert not wrong and len(cases) > 100
    for op, args, module in lists.banned:
        with pytest.raises(RuntimeError, match=r"binary_cross_entropy and torch\.nn\.BCELoss are unsafe to autocast"):
            with torch.autocast("cuda"):
                getattr(module, op)(*args)


def test_autocast_rules_are_cudas_not_cpus(fakecuda):
    fakecuda("a100")
    x = torch.randn(4, 4, device="cuda")
    w = torch.randn(4, 4, device="cuda", dtype=torch.float64)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("cuda") and not torch.is_autocast_enabled("cpu")
        assert (x @ x).dtype == torch.bfloat16
        assert torch.softmax(x, 0).dtype == torch.float32
        assert torch.softmax(x, 0, dtype=torch.float64).dtype == torch.float64   # explicit dtype= wins
        assert (w @ w).dtype == torch.float64                                      # float64 is never cast
        assert (torch.ones(4, 4) @ torch.ones(4, 4)).dtype == torch.float32        # CPU tensors are not cast
        assert nn.functional.cross_entropy(x @ x, torch.zeros(4, dtype=torch.long, device="cuda")).dtype == \
            torch.float32
        # CPU autocast puts layer_norm in bf16-able territory differently; CUDA runs it in float32
        assert nn.functional.layer_norm((x @ x), (4,)).dtype == torch.float32
    assert (x @ x).dtype == torch.float32
    with torch.autocast("cuda"):
        assert (x @ x).dtype == torch.float16  # the default CUDA autocast dtype


def test_autocast_casts_are_charged_to_the_device(fakecuda):
    fakecuda("a100")
    x = torch.randn(512, 512, device="cuda")
    torch.mm(x, x)  # a torch that holds the cuBLAS workspace (2.10) takes it here, not in the measured product
    with torch.autocast("cuda", dtype=torch.float16):
        before = torch.cuda.memory_allocated()
        y = torch.mm(x, x)
        # two half copies of x (one per operand, no weight cache for non-leaf tensors) are freed again;
        # the half result stays
        assert torch.cuda.memory_allocated() - before == 512 * 512 * 2
        assert y.dtype == torch.float16


def train_scaled(device: str, steps: int = 4, poison_step: int | None = None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler(device, init_scale=1024.0, growth_interval=2)
    x, y = torch.randn(32, 8, device=device), torch.randint(0, 2, (32,), device=device)
    scales, losses = [], []
    for step in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        if step == poison_step:
            model[0].weight.grad[0, 0] = float("inf")
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        losses.append(loss.item())
    return losses, scales, [p.detach().cpu() for p in model.parameters()]


def test_grad_scaler_matches_the_cpu_scaler(fakecuda):
    ref_losses, ref_scales, ref_params = train_scaled("cpu", poison_step=1)
    fakecuda("a100")
    losses, scales, params = train_scaled("cuda", poison_step=1)
    assert losses == pytest.approx(ref_losses, rel=1e-6)
    # the poisoned step is skipped and the scale backs off; two clean steps later it grows again
    assert scales == ref_scales == [1024.0, 512.0, 512.0, 1024.0]
    for p, q in zip(params, ref_params, strict=True):
        assert torch.allclose(p, q, rtol=1e-6, atol=1e-7)


def test_grad_scaler_state_lives_on_the_fake_device(fakecuda):
    fakecuda("a100:2")
    torch.cuda.set_device(1)
    model = nn.Linear(4, 4).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.cuda.amp.GradScaler is deprecated, still works
        scaler = torch.cuda.amp.GradScaler(init_scale=1024.0)
    with torch.autocast("cuda"):
        loss = model(torch.randn(2, 4, device="cuda")).float().sum()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    assert scaler._scale.device == torch.device("cuda:1")
    found = scaler._per_optimizer_states[id(opt)]["found_inf_per_device"]
    assert list(found) == [torch.device("cuda:1")]
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 1024.0  # no inf: the scale is kept until growth_interval clean steps


def test_bf16_support_below_compute_capability_8(fakecuda):
    # torch 2.15's is_bf16_supported(): capability >= 8.0, else (including_emulation=True, the default) whether
    # a bfloat16 tensor can be created on the device, which it can on a T4. torch's autocast raises
    # "Current CUDA Device does not support bfloat16..." only when is_bf16_supported() is False.
    fakecuda("t4")
    assert torch.cuda.get_device_capability() == (7, 5)
    assert torch.cuda.is_bf16_supported() is True
    assert torch.cuda.is_bf16_supported(including_emulation=False) is False
    x = torch.randn(4, 4, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert (x @ x).dtype == torch.bfloat16


def test_bf16_autocast_raises_torchs_error_when_the_device_cannot_hold_bf16(fakecuda, monkeypatch):
    fakecuda("t4")
    monkeypatch.setattr(torch.cuda, "_check_bf16_tensor_supported", lambda device: False)
    with pytest.raises(RuntimeError, match=r"Current CUDA Device does not support bfloat16\. Please switch dtype"):
        torch.autocast("cuda", dtype=torch.bfloat16)
    torch.autocast("cuda", dtype=torch.float16)  # float16 stays allowed


def test_parameter_casts_are_cached_for_the_autocast_region(fakecuda):
    # CUDA autocast casts a parameter once per region and keeps the copy until the outermost region ends
    fakecuda("a100")
    lin = nn.Linear(1024, 1024, bias=False).cuda()  # 4 MiB of float32 weight, a 2 MiB float16 copy
    x = torch.randn(8, 1024, device="cuda")
    with torch.no_grad():
        base = torch.cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.float16):
            a = lin(x)
            with_one = torch.cuda.memory_allocated() - base
            b = lin(x)
            with_two = torch.cuda.memory_allocated() - base
            assert a.dtype is torch.float16 and b.dtype is torch.float16
        after = torch.cuda.memory_allocated() - base
    out = 8 * 1024 * 2
    # the first call: the cached weight copy and the output (and, on torch builds that hold it, the cuBLAS
    # workspace); the second reuses the weight copy; the region's end frees it
    assert with_one >= 2 * 1024 * 1024 + out
    assert with_two - with_one < 1024 * 1024
    assert with_two - after == 2 * 1024 * 1024
