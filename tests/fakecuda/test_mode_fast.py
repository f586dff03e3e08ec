"""FakeCudaMode's common path in C++ (mode_fast.cpp) against the Python method it stands in for (mode.py).

Every test here needs the C++ extension (`make fakecuda-ext`); their names say `cxx` so that runs without it
(the Debian CPU-only image) deselect them. The rest of the fakecuda suite runs through whichever path the
process has, so it covers both."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch


@pytest.fixture
def cxx_mode(fakecuda):
    from fakegpu.fakecuda import extension

    try:
        extension.load()
    except extension.ExtensionUnavailable as exc:
        pytest.fail(f"the C++ extension is not built for this torch (make fakecuda-ext): {exc}")
    import fakegpu.fakecuda as fc

    fakecuda("a100:2")
    mode = fc._active["mode"]
    assert "__torch_function__" in mode.__dict__, "activate() did not put the C++ common path on the mode"
    return mode


@contextlib.contextmanager
def python_path(mode) -> Iterator[None]:
    """The mode's Python method alone for the block (as without the extension)."""
    fast = mode.__dict__.pop("__torch_function__")
    try:
        yield
    finally:
        mode.__torch_function__ = fast


@contextlib.contextmanager
def python_calls() -> Iterator[list[str]]:
    """The names of the functions FakeCudaMode.__torch_function__ was called for, in Python, meanwhile."""
    from fakegpu.fakecuda.mode import FakeCudaMode

    code = FakeCudaMode.__torch_function__.__code__
    seen: list[str] = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is code:
            seen.append(getattr(frame.f_locals["func"], "__name__", "?"))

    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)


def program() -> list:
    """A mix of the common path and of calls it must hand back; what each gave, as comparable values."""
    a = torch.arange(6.0, device="cuda:1").reshape(2, 3)
    b = torch.ones(2, 3, device="cuda:1")
    out = torch.empty(2, 3, device="cuda:1")
    host = torch.arange(3.0)
    got: list = []

    def note(x):
        if isinstance(x, torch.Tensor):
            got.append((type(x).__name__, str(x.device), x.dtype, x.cpu().tolist()))
        elif isinstance(x, (tuple, list)):
            got.append((type(x).__name__, [note_one(t) for t in x]))
        else:
            got.append(x)

    def note_one(t):
        return (type(t).__name__, str(t.device), t.cpu().tolist()) if isinstance(t, torch.Tensor) else t

    note(a * 2 + b)                                   # common path, fresh results
    note(torch.add(a, b, alpha=3))                    # keyword arguments
    note(torch.mul(a, b, out=out))                    # out= (a fake tensor among the keywords)
    note(a.max(dim=1))                                # a named tuple of two results
    note(torch.split(a, 1))                           # a tuple of views
    note(torch.stack([a, b]))                         # tensors in a list argument
    note(a + torch.tensor(2.0))                       # a zero-dim CPU tensor mixes with CUDA
    note(a.shape[0] + a.dim())                        # queries
    note(host * 2)                                    # no fake tensor: a plain CPU result
    note(a.to("cuda:0"))                              # a handler
    note(torch.zeros(2, device="cuda:0"))             # a device= factory
    note(b.add_(1))                                   # in place on a fake tensor
    for bad in (lambda: a + torch.ones(2, 3, device="cuda:0"), lambda: a + torch.ones(2, 3)):
        with pytest.raises(RuntimeError) as raised:
            bad()
        note(str(raised.value))
    with torch.autocast("cuda"):
        note((a @ b.T).dtype)                         # autocast: the Python path's casts
    note([torch.cuda.memory_allocated(i) for i in range(2)])
    return got


def test_cxx_common_path_gives_what_the_python_path_gives(cxx_mode):
    import fakegpu.fakecuda as fc

    fast = program()
    fc.deactivate()
    fc.activate("a100:2")
    with python_path(fc._active["mode"]):
        slow = program()
    assert fast == slow
    assert "Expected all tensors to be on the same device" in fast[-4] and "cuda:1 and cpu" in fast[-3]
    assert fast[-2] == torch.float16


def test_cxx_common_path_leaves_python_out_of_common_calls_only(cxx_mode):
    a = torch.ones(4, device="cuda")
    with python_calls() as seen:
        b = a * 2 + a
        c = torch.relu(b).sum()
    assert seen == [] and type(c).__name__ == "FakeCudaTensor" and c.item() == 12.0
    # the results' storages charged to their device, as the Python path charges them
    live = cxx_mode.tracker.live
    assert live[c.untyped_storage()._cdata][0] == 0 and live[b.untyped_storage()._cdata][0] == 0
    with python_calls() as seen:
        a.cpu()
        torch.ones(2, device="cuda")
    assert seen == ["cpu", "ones"]


def test_cxx_common_path_leaves_with_deactivate(cxx_mode):
    import fakegpu.fakecuda as fc

    fc.deactivate()
    assert "__torch_function__" not in cxx_mode.__dict__ and cxx_mode.retired
    fc.activate("a100")
    assert "__torch_function__" in fc._active["mode"].__dict__
