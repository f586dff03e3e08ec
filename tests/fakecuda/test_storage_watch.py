"""How the C++ hook sees a charged storage die (storage_watch.cpp): through its memory, not its Python object.

The storage's DataPtr is wrapped, so no Python object is made for it; the autograd engine then sums gradients in
place where it holds the only reference, as on CUDA. A resize or a move to shared memory swaps the memory of a
storage that lives on: it must stay charged and be released when it does die.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torch
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def extension():
    pytest.importorskip("torch")
    from fakegpu.fakecuda import extension

    extension.build()
    return extension.load()


@contextlib.contextmanager
def watched_through_python(extension):
    was = extension.set_watch_memory(False)
    try:
        yield
    finally:
        extension.set_watch_memory(was)


def _entry(t):
    return fc_live().get(t.untyped_storage()._cdata)


def test_an_output_is_watched_through_its_memory_and_released_when_it_dies(extension, fakecuda):
    torch = pytest.importorskip("torch")
    fakecuda("a100")
    x = torch.randn(1024, device="cuda")
    before = torch.cuda.memory_allocated()
    y = x * 2
    assert extension.watched(y) and _entry(y)[2] is None  # no weak reference: the memory is watched
    assert torch.cuda.memory_allocated() == before + 4096
    assert torch.equal(y, x * 2)  # the data is the storage's own, untouched by the wrapping
    del y
    assert torch.cuda.memory_allocated() == before
    with watched_through_python(extension):
        z = x * 3
    assert not extension.watched(z) and _entry(z)[2] is not None  # the weak reference, as before
    del z
    assert torch.cuda.memory_allocated() == before


def _backward_adds(torch, x) -> list[str]:
    from torch.profiler import profile

    y = (x * 3).exp() + (x * 5).sin()  # x's gradient arrives twice: the engine sums the two
    loss = y.sum()
    with profile() as prof:
        loss.backward()
    return sorted(e.name for e in prof.events() if e.name in ("aten::add", "aten::add_"))


def test_the_engine_sums_gradients_in_place_as_on_cuda(extension, fakecuda):
    """CUDA's engine adds a gradient into the one it holds when nothing else holds that one's storage. With the
    storages' Python objects made for the watch, the CPU engine never could, and summed every one out of place."""
    torch = pytest.importorskip("torch")
    fakecuda("a100")
    x = torch.randn(256, 256, device="cuda", requires_grad=True)
    assert _backward_adds(torch, x) == ["aten::add_"]
    expected = 3 * torch.exp(x.detach() * 3) + 5 * torch.cos(x.detach() * 5)
    assert torch.allclose(x.grad, expected)  # the sum's numbers are right
    x.grad = None
    with watched_through_python(extension):
        assert _backward_adds(torch, x) == ["aten::add"]


def test_gradients_the_python_rules_charge_are_summed_in_place_too(extension, fakecuda):
    """A sum the engine itself makes in backward is charged by the Python rules (accumulated_in_place), which
    looked each tensor up through `untyped_storage()`: the storage's Python object, made there, held the sum's
    storage for its life, so the next gradient for it was summed out of place on the CPU (a residual stream's, in
    every layer of a transformer). Looked up by address, it is summed in place, as the CPU alone and CUDA do."""
    torch = pytest.importorskip("torch")
    from torch import nn

    from fakegpu.fakecuda.dispatch import suspended
    from fakegpu.fakecuda.tensor import storage_key

    def adds(device: str) -> list[str]:
        from torch.profiler import profile

        torch.manual_seed(0)
        layer = nn.Linear(64, 64).to(device)
        x = torch.randn(8, 64, device=device, requires_grad=True)
        h = x
        for _ in range(2):
            h = h + layer(h)  # the first sum in backward adds an expanded gradient: out of place, a new tensor
        loss = h.sum()
        with profile() as prof:
            loss.backward()
        assert x.grad is not None and torch.isfinite(x.grad).all()
        return sorted(e.name for e in prof.events() if e.name in ("aten::add", "aten::add_"))

    fakecuda("a100")
    with torch._C.DisableTorchFunction(), suspended():
        on_cpu = adds("cpu")
    # (the layer is shared: AccumulateGrad sums its weight's and bias's second gradients out of place)
    assert on_cpu == ["aten::add", "aten::add", "aten::add", "aten::add_"]
    assert adds("cuda") == on_cpu
    y = torch.randn(16, device="cuda") * 2
    assert torch._C._storage_Use_Count(storage_key(y)) == 1  # looked up and charged, its storage held by y alone


def test_a_resized_storage_stays_charged_and_watched(extension, fakecuda):
    torch = pytest.importorskip("torch")
    fakecuda("a100")
    x = torch.arange(256, dtype=torch.float32, device="cuda")
    before, entries = torch.cuda.memory_allocated(), len(fc_live())
    y = x * 1  # 1 KiB, charged in 512-byte granules
    y.resize_(1024)  # CPU's resize swaps the storage's memory for a larger one
    assert extension.watched(y) and torch.equal(y[:256], x)  # the hook watched it again after the op
    storage = y.untyped_storage()
    storage.resize_(8192)  # through tracker.resize: a new block of the new size
    assert extension.watched(y) and torch.cuda.memory_allocated() == before + 8192
    storage.resize_(0)  # FSDP's free: no memory to wrap, so its Python object is watched
    assert torch.cuda.memory_allocated() == before and not extension.watched(y) and _entry(y)[2] is not None
    del y, storage
    assert torch.cuda.memory_allocated() == before and len(fc_live()) == entries


def fc_live() -> dict:
    import fakegpu.fakecuda as fc

    return fc._active["charges"].rules.live


def test_a_storage_moved_to_shared_memory_is_released_when_it_dies(extension, fakecuda):
    pytest.importorskip("torch")
    from multiprocessing.reduction import ForkingPickler

    import torch
    import torch.multiprocessing  # (registers the tensor and storage reductions)

    fakecuda("a100")
    x = torch.randn(1024, device="cuda")
    before, entries = torch.cuda.memory_allocated(), len(fc_live())
    y = x * 2
    y.share_memory_()  # (a storage method, not an op: fakecuda's wrapper of it watches the storage again)
    z = x + 1
    assert y.is_shared() and not extension.watched(y)  # shared memory keeps its own DataPtr, which its owners read
    assert torch.cuda.memory_allocated() == before + 2 * 4096
    del y
    assert torch.cuda.memory_allocated() == before + 4096
    w = x * 4
    w.share_memory_()
    del w  # dies before any op ran: released at its death all the same
    assert torch.cuda.memory_allocated() == before + 4096 and len(fc_live()) == entries + 1
    v = x * 5  # and through torch.multiprocessing's pickling, which moves the storage itself
    ForkingPickler.dumps(v)
    assert v.is_shared() and not extension.watched(v)
    del v
    assert torch.cuda.memory_allocated() == before + 4096 and len(fc_live()) == entries + 1
    z.add_(1)


def test_watched_storages_alive_at_exit_or_in_a_forked_child_end_quietly(extension, tmp_path):
    script = tmp_path / "exit.py"
    script.write_text(
        "import os, torch\n"
        "import fakegpu.fakecuda as fc\n"
        "fc.activate('a100')\n"
        "ext = fc._active['charges'].ext\n"
        "x = torch.randn(4096, device='cuda', requires_grad=True)\n"
        "kept = [(x * i).exp() for i in range(8)]\n"
        "assert all(ext.watched(t) for t in kept)\n"
        "before = torch.cuda.memory_allocated()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    del kept\n"
        "    ok = torch.cuda.memory_allocated() == before - 8 * 4096 * 4\n"
        "    os._exit(0 if ok else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "assert os.waitstatus_to_exitcode(status) == 0, status\n"
        "assert torch.cuda.memory_allocated() == before\n"
        "sum(t.sum() for t in kept).backward()\n"
        "print('done')\n"  # and exit with everything alive, fakecuda still active
    )
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "FAKEGPU_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "done"
    assert "Exception ignored" not in proc.stderr and "Error" not in proc.stderr, proc.stderr[-3000:]


def test_a_lazy_clone_shares_the_watched_memory_until_both_are_gone(extension, fakecuda):
    """torch clones copy-on-write only memory whose DataPtr is the allocator's plain kind (its context is its
    address): the wrapper keeps that, so _lazy_clone works as on CUDA; the original's block goes back when the last
    storage holding its memory dies."""
    torch = pytest.importorskip("torch")
    fakecuda("a100")
    x = torch.randn(1024, device="cuda")
    before = torch.cuda.memory_allocated()
    for first in ("original", "clone"):
        y = x * 2
        z = y._lazy_clone()
        assert torch.equal(z, x * 2) and z.is_cuda
        charged = torch.cuda.memory_allocated()
        held = {"original": y, "clone": z}
        del y, z
        held.pop(first)
        if first == "original":  # its memory is the clone's too: its block stays until the clone goes
            assert torch.cuda.memory_allocated() == charged
        else:
            assert torch.cuda.memory_allocated() == charged - 4096
        held.clear()
        assert torch.cuda.memory_allocated() == before
