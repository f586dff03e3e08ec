"""One process across its fake devices: each thread's current device and stream, torch.cuda.comm, single-process
NCCL and nn.DataParallel (comm.py), checked against the same math on the CPU and against what CUDA's versions
allocate."""

from __future__ import annotations

import threading

import pytest

from tests.fakecuda.test_workspace import _per_call_workspaces

pytestmark = pytest.mark.torch


def _in_thread(fn):
    result: dict = {}

    def run() -> None:
        try:
            result["value"] = fn()
        except BaseException as error:  # handed to the test's thread
            result["error"] = error

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def test_each_thread_has_its_own_current_device_starting_on_device_0(fakecuda):
    torch = pytest.importorskip("torch")
    fakecuda("a100:4")
    torch.cuda.set_device(2)
    go, moved = threading.Event(), threading.Event()
    seen: dict = {}

    def worker() -> None:
        seen["start"] = torch.cuda.current_device()  # CUDA: a new host thread is on device 0
        torch.cuda.set_device(3)
        moved.set()
        go.wait(10)
        seen["after_main_moved"] = torch.cuda.current_device()
        seen["tensor"] = torch.empty(4, device="cuda").device

    t = threading.Thread(target=worker)
    t.start()
    assert moved.wait(10)
    assert torch.cuda.current_device() == 2  # the worker's set_device did not move this thread
    torch.cuda.set_device(1)
    go.set()
    t.join()
    assert seen == {"start": 0, "after_main_moved": 3, "tensor": torch.device("cuda", 3)}
    assert torch.cuda.current_device() == 1
    assert torch.empty(1, device="cuda").device == torch.device("cuda", 1)
    with torch.cuda.device(0):
        assert _in_thread(torch.cuda.current_device) == 0
        assert torch.accelerator.current_device_index() == 0
    assert torch.cuda.current_device() == 1


def test_each_thread_has_its_own_current_stream_and_allocates_from_its_pool(fakecuda):
    torch = pytest.importorskip("torch")
    fakecuda("a100:2")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert torch.cuda.current_stream() == side
        # another thread is on the default stream, and its blocks come from the default stream's pool
        assert _in_thread(lambda: torch.cuda.current_stream().stream_id) == 0
        x = torch.empty(1000, device="cuda")
        y = _in_thread(lambda: torch.empty(1000, device="cuda"))
    assert torch.cuda.current_stream().stream_id == 0
    segments = {seg["stream"] for seg in torch.cuda.memory_snapshot()}
    assert segments == {0, side.stream_id}
    del x, y


def test_with_stream_makes_it_current_for_the_thread_and_restores_the_previous(fakecuda):
    torch = pytest.importorskip("torch")
    fakecuda("a100:2")
    s1, s2 = torch.cuda.Stream(1), torch.cuda.Stream(1)
    with s1:
        assert torch.cuda.current_stream(1) == s1
        with s2:
            assert torch.cuda.current_stream(1) == s2
        assert torch.cuda.current_stream(1) == s1
        assert torch.cuda.current_stream(0).stream_id == 0
    assert torch.cuda.current_stream(1).stream_id == 0


def test_comm_broadcast_scatter_gather_reduce_match_the_host_math_and_devices(fakecuda):
    torch = pytest.importorskip("torch")
    from torch.cuda import comm

    fakecuda("a100:3")
    x = torch.arange(12.0, device="cuda:0").reshape(4, 3)
    copies = comm.broadcast(x, [0, 1, 2])
    assert copies[0] is x  # the source device's output is the input itself, as CUDA's
    assert [c.device.index for c in copies] == [0, 1, 2]
    assert all(torch.equal(c.cpu(), x.cpu()) for c in copies)

    chunks = comm.scatter(x, [0, 1, 2], chunk_sizes=[1, 1, 2])
    assert [c.device.index for c in chunks] == [0, 1, 2] and [c.shape[0] for c in chunks] == [1, 1, 2]
    assert chunks[0].data_ptr() == x.data_ptr()  # a chunk on the source device is a view
    host_chunks = comm.scatter(x.cpu(), [1, 2])  # from the host: every chunk copied
    assert [c.device.index for c in host_chunks] == [1, 2]
    assert torch.equal(torch.cat([c.cpu() for c in host_chunks]), x.cpu())

    gathered = comm.gather(chunks, dim=0, destination=2)
    assert gathered.device == torch.device("cuda", 2) and torch.equal(gathered.cpu(), x.cpu())
    on_host = comm.gather(chunks, dim=0, destination="cpu")
    assert on_host.device.type == "cpu" and torch.equal(on_host, x.cpu())

    with pytest.raises(IndexError, match="Dimension out of range"):
        comm.gather([torch.tensor(1.0, device="cuda:0"), torch.tensor(2.0, device="cuda:1")], dim=0)
    with pytest.raises(RuntimeError, match="at index 1 has invalid shape"):
        comm.gather([x, torch.zeros(2, 5, device="cuda:1")], dim=0)

    parts = [torch.full((5,), float(i + 1), device=f"cuda:{i}") for i in range(3)]
    total = comm.reduce_add(parts, destination=1)
    assert total.device.index == 1 and torch.equal(total.cpu(), torch.full((5,), 6.0))
    with pytest.raises(RuntimeError, match="devices\\[0\\]: 1"):
        comm.broadcast_coalesced([x], [1, 2])  # CUDA's own message


def test_broadcast_coalesced_hands_out_views_of_one_bucket_per_device(fakecuda):
    torch = pytest.importorskip("torch")
    from torch.cuda import comm

    fakecuda("a100:2")
    tensors = [torch.randn(100, device="cuda:0"), torch.randn(3, 7, device="cuda:0"),
               torch.arange(10, device="cuda:0"), torch.randn(50, device="cuda:0")]
    before = torch.cuda.memory_allocated(1)
    out = comm.broadcast_coalesced(tensors, [0, 1])
    assert out[0] == tensors
    assert [t.shape for t in out[1]] == [t.shape for t in tensors]
    assert [t.dtype for t in out[1]] == [t.dtype for t in tensors]
    assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(out[1], tensors, strict=True))
    floats = [t for t in out[1] if t.dtype == torch.float32]
    assert len({t.untyped_storage().data_ptr() for t in floats}) == 1  # one float bucket
    # device 1 holds one block per bucket (float32: 171 floats, int64: 10), rounded to 512 bytes each
    assert torch.cuda.memory_allocated(1) - before == 1024 + 512


def test_single_process_nccl_collectives(fakecuda):
    torch = pytest.importorskip("torch")
    from torch.cuda import nccl

    fakecuda("a100:2")  # (a CPU-only build too: fakecuda answers as a CUDA build with NCCL)
    a, b = torch.tensor([1.0, 5.0], device="cuda:0"), torch.tensor([3.0, 2.0], device="cuda:1")
    assert nccl.is_available([a, b])
    nccl.all_reduce([a, b])
    assert a.tolist() == b.tolist() == [4.0, 7.0]
    out = torch.empty(2, device="cuda:1")
    nccl.reduce([a, b], output=out, root=1)
    assert out.tolist() == [8.0, 14.0]
    c, d = torch.tensor([9.0, 1.0], device="cuda:0"), torch.zeros(2, device="cuda:1")
    nccl.broadcast([c, d], root=0)
    assert d.tolist() == [9.0, 1.0]
    outs = [torch.empty(4, device=f"cuda:{i}") for i in range(2)]
    nccl.all_gather([c, d], outs)
    assert outs[1].tolist() == [9.0, 1.0, 9.0, 1.0]
    e, f = torch.arange(4.0, device="cuda:0"), torch.arange(4.0, device="cuda:1")
    halves = [torch.empty(2, device=f"cuda:{i}") for i in range(2)]
    nccl.reduce_scatter([e, f], halves, op=2)  # max
    assert halves[0].tolist() == [0.0, 1.0] and halves[1].tolist() == [2.0, 3.0]
    with pytest.raises(RuntimeError, match="unique devices"):
        nccl.all_reduce([a, torch.zeros(2, device="cuda:0")])


def _model(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 4))


@pytest.mark.parametrize("inputs_on", ["cuda", "cpu"])
def test_data_parallel_trains_as_the_same_model_on_one_device(fakecuda, inputs_on):
    torch = pytest.importorskip("torch")
    data = [(torch.randn(12, 16), torch.randn(12, 4)) for _ in range(3)]

    # the reference: the same steps on the host, the batch whole (BatchNorm's statistics differ per replica,
    # so the reference runs each replica's share of the batch through the same module, as DataParallel does)
    reference = _model(torch)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    ref_losses = []
    for x, y in data:
        outs = [reference(xs) for xs in x.chunk(3)]
        loss = torch.nn.functional.mse_loss(torch.cat(outs), y)
        ref_opt.zero_grad()
        loss.backward()
        ref_opt.step()
        ref_losses.append(loss.item())

    fakecuda("a100:3")
    model = _model(torch).cuda()
    dp = torch.nn.DataParallel(model)
    opt = torch.optim.SGD(dp.parameters(), lr=0.1)
    losses, left = [], []
    for x, y in data:
        out = dp(x.to(inputs_on))
        assert out.device == torch.device("cuda", 0)
        loss = torch.nn.functional.mse_loss(out, y.cuda())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        left.append((torch.cuda.memory_allocated(1), torch.cuda.memory_allocated(2)))
    assert losses == pytest.approx(ref_losses, rel=1e-5)
    assert all(p.grad.device == torch.device("cuda", 0) for p in model.parameters())
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.allclose(mine.detach().cpu(), theirs.detach(), atol=1e-6)
    # replicas and their activations are gone after each step: the parameters, gradients and momentum-free SGD
    # state live on device 0; devices 1 and 2 keep only the cuBLAS workspaces a torch before 2.15 holds per
    # (handle, stream): the first step's worker threads give their handles back when they end and autograd
    # takes them for backward, the second step's workers make one more each, and from then on nothing grows
    assert left[1] == left[2]
    assert (left[0] == left[1] == (0, 0)) == _per_call_workspaces()
    assert torch.cuda.max_memory_allocated(1) > 0 and torch.cuda.max_memory_allocated(2) > 0


def test_data_parallel_replicas_hold_their_parameters_in_one_bucket_per_device(fakecuda):
    torch = pytest.importorskip("torch")
    fakecuda("a100:2")
    model = torch.nn.Linear(64, 64).cuda()  # 4160 floats: 16640 bytes, one bucket
    dp = torch.nn.DataParallel(model)
    seen = {}

    def probe(module, args, out):
        seen[out.device.index] = torch.cuda.memory_allocated(out.device.index)

    model.register_forward_hook(probe)
    x = torch.randn(8, 64, device="cuda")
    dp(x)
    # what stays: a cuBLAS workspace where this torch holds it (before 2.15), else nothing
    held = torch.cuda.memory_allocated(1)
    assert (held == 0) == _per_call_workspaces()
    # device 1: the bucket (16896 bytes, 512-byte granules), its input chunk (4 x 64 floats) and its output
    assert seen[1] - held == 16896 + 1024 + 1024


def test_parallel_apply_workers_run_on_their_devices(fakecuda):
    torch = pytest.importorskip("torch")
    from torch.nn.parallel import parallel_apply

    fakecuda("a100:2")

    class Where(torch.nn.Module):
        def forward(self, x):
            return torch.tensor([torch.cuda.current_device(), torch.cuda.current_stream().device_index],
                                device="cuda") + x.sum() * 0

    inputs = [torch.zeros(1, device="cuda:0"), torch.zeros(1, device="cuda:1")]
    out = parallel_apply([Where(), Where()], inputs, devices=[0, 1])
    assert [o.device.index for o in out] == [0, 1]
    assert [o.tolist() for o in out] == [[0.0, 0.0], [1.0, 1.0]]
    assert torch.cuda.current_device() == 0


def test_fakegpu_capabilities_lists_the_collectives_among_fakecudas_surface():
    pytest.importorskip("torch")
    from fakegpu.fakecuda.surface import surface

    found = surface()
    assert found["available"]
    entries = {(e["owner"], e["name"]): e["public"] for e in found["entry_points"]}
    assert entries[("torch._C", "_broadcast_coalesced")] is False
    assert entries[("torch._C", "_nccl_reduce")] is False
    assert entries[("torch.nn.parallel._functions", "_get_stream")] is False  # (a private module's)
    assert entries[("torch.cuda", "set_device")] is True
