"""torch.optim's per-step bookkeeping without the function mode (optim.py): same state, same memory, fewer calls."""

from __future__ import annotations

import contextlib

import pytest

pytestmark = pytest.mark.torch


def _optimizers(torch):
    return {
        "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2),
        "adam-amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True),
        "sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9),  # buffers made in the update
        "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=1e-2, momentum=0.5),
        "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=1e-2),
        "nadam": lambda ps: torch.optim.NAdam(ps, lr=1e-2),
        "adam-capturable": lambda ps: torch.optim.Adam(ps, lr=1e-2, capturable=True),  # steps on the device
    }


def _train(torch, make, steps: int = 3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).cuda()
    opt = make(model.parameters())
    x = torch.randn(8, 16, device="cuda")
    for _ in range(steps):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    return model, opt


@contextlib.contextmanager
def _through_the_mode():
    """Every call through FakeCudaMode, as before optim.py."""
    from fakegpu.fakecuda import optim

    only = optim._only
    optim._only = lambda mode: False
    try:
        yield
    finally:
        optim._only = only


def _state_faces(opt) -> list:
    return [(key, type(v).__name__, str(v.device)) for st in opt.state.values() for key, v in sorted(st.items())
            if hasattr(v, "device")]


@pytest.mark.parametrize("name", list(_optimizers(pytest.importorskip("torch"))))
def test_state_numbers_and_memory_are_those_of_the_mode(fakecuda, name):
    torch = pytest.importorskip("torch")

    fakecuda("a100")
    make = _optimizers(torch)[name]
    with _through_the_mode():
        _train(torch, make, steps=1)  # (a torch that holds cuBLAS's workspaces from their first GEMM keeps them)

    def run(through_the_mode: bool):
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with _through_the_mode() if through_the_mode else contextlib.nullcontext():
            model, opt = _train(torch, make)
        return model, opt, torch.cuda.memory_allocated() - base, torch.cuda.max_memory_allocated() - base

    model_ref, opt_ref, now_ref, peak_ref = run(True)
    faces_ref = _state_faces(opt_ref)
    del opt_ref
    model_ref.cpu()  # (frees its device memory; kept for the numbers)
    model, opt, now, peak = run(False)
    assert (now, peak) == (now_ref, peak_ref)
    # each state tensor's class and device as through the mode: on the device, or a CPU scalar where CUDA keeps one
    assert _state_faces(opt) == faces_ref
    assert any(d == "cuda:0" and cls == "FakeCudaTensor" for _, cls, d in faces_ref)
    for a, b in zip(model.parameters(), model_ref.parameters(), strict=True):  # the same numbers
        assert torch.equal(a.cpu(), b)


def test_a_step_makes_no_mode_call_per_parameter(fakecuda):
    torch = pytest.importorskip("torch")
    from fakegpu.fakecuda.mode import FakeCudaMode

    fakecuda("a100")
    layers = [torch.nn.Linear(8, 8) for _ in range(20)]
    model = torch.nn.Sequential(*layers).cuda()  # 40 parameters
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(2, 8, device="cuda")
    model(x).sum().backward()
    opt.step()  # (the state is made here)
    calls = []
    original = FakeCudaMode.__torch_function__

    def counting(self, func, types, args=(), kwargs=None):
        calls.append(func)
        return original(self, func, types, args, kwargs)

    FakeCudaMode.__torch_function__ = counting
    try:
        opt.step()
        opt.zero_grad()
        model.zero_grad()
    finally:
        FakeCudaMode.__torch_function__ = original
    assert len(calls) < 10, calls  # ~6 per parameter (p.grad, is_complex, the step's value, ...) before


def test_under_another_function_mode_the_step_goes_through_the_mode(fakecuda):
    """`with torch.device("cuda")` is a function mode that decides where a factory without a device makes its
    tensor: with it on the stack the bookkeeping stays under the mode, so the state is made where it was before."""
    torch = pytest.importorskip("torch")
    import fakegpu.fakecuda as fc
    from fakegpu.fakecuda import optim

    fakecuda("a100")

    def run():
        with torch.device("cuda"):
            assert not optim._only(fc._active["mode"])  # (the case under test)
            model = torch.nn.Linear(4, 4)
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
        return _state_faces(opt)

    got = run()
    with _through_the_mode():
        assert got == run()
    assert ("exp_avg", "FakeCudaTensor", "cuda:0") in got
