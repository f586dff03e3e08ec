"""torch.save / torch.load(map_location=...) of fake CUDA tensors, Module.to round trips, pinned memory."""

from __future__ import annotations

import io

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


def saved(obj) -> io.BytesIO:
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


@pytest.mark.parametrize(("map_location", "expected"), [
    (None, "cuda:0"),
    ("cuda:1", "cuda:1"),
    ("cpu", "cpu"),
    (torch.device("cuda", 1), "cuda:1"),
    ({"cuda:0": "cuda:1"}, "cuda:1"),
    ({"cuda:0": "cpu"}, "cpu"),
])
def test_state_dict_round_trip_with_map_location(fakecuda, map_location, expected):
    fakecuda("a100:2")
    model = nn.Linear(4, 3).cuda()
    state = torch.load(saved(model.state_dict()), map_location=map_location)
    for name, tensor in state.items():
        assert str(tensor.device) == expected and tensor.is_cuda == (expected != "cpu")
        assert torch.equal(tensor.cpu(), getattr(model, name).detach().cpu())
    if expected == "cuda:1":
        assert torch.cuda.memory_allocated(1) == 2 * 512  # the loaded weight and bias, charged where they land


def test_checkpoint_is_tagged_cuda_as_a_gpu_run_writes_it(fakecuda):
    import fakegpu.fakecuda as fc

    fakecuda("a100")
    buf = saved({"w": torch.ones(3, device="cuda")})
    fc.deactivate()
    try:
        # plain CPU torch, no fakecuda: torch's own refusal to load CUDA storages
        with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device"):
            torch.load(buf)
        buf.seek(0)
        assert torch.load(buf, map_location="cpu")["w"].tolist() == [1.0, 1.0, 1.0]
    finally:
        fakecuda("a100")


def test_load_to_a_missing_ordinal_raises_torchs_error(fakecuda):
    fakecuda("a100:2")
    buf = saved(torch.ones(2, device="cuda"))
    with pytest.raises(RuntimeError, match=r"on CUDA device 2 but torch\.cuda\.device_count\(\) is 2"):
        torch.load(buf, map_location="cuda:2")


def test_whole_module_and_optimizer_state(fakecuda):
    fakecuda("a100:2")
    model = nn.Linear(4, 3).cuda(1)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 4, device="cuda:1")).sum().backward()
    opt.step()
    clone = torch.load(saved(model), weights_only=False)
    assert isinstance(clone.weight, nn.Parameter) and clone.weight.device == torch.device("cuda:1")
    state = torch.load(saved(opt.state_dict()), map_location="cuda:0")["state"][0]
    assert {k: v.device for k, v in state.items()} == dict.fromkeys(("step", "exp_avg", "exp_avg_sq"),
                                                                        torch.device("cuda:0"))


def test_module_to_round_trips(fakecuda):
    fakecuda("a100:2")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    model.to("cuda:1")
    assert all(t.device == torch.device("cuda:1") for t in model.state_dict().values())
    assert torch.cuda.memory_allocated(1) > 0
    model.to(torch.float16).to(torch.float32)
    model.cpu()
    assert torch.cuda.memory_allocated(1) == 0  # nothing of the model is left on the device
    model.to(torch.device("cuda", 0)).to("cpu")
    for name, tensor in model.state_dict().items():
        assert type(tensor) is torch.Tensor and not tensor.is_cuda
        assert torch.allclose(tensor, reference[name], atol=1e-3)
    assert all(type(p) is nn.Parameter for p in model.parameters())


def test_pinned_memory(fakecuda):
    fakecuda("a100")
    host = torch.randn(16)
    assert not host.is_pinned()
    pinned = host.pin_memory()
    assert pinned.is_pinned() and pinned[4:].is_pinned() and pinned is not host
    assert pinned.pin_memory() is pinned
    assert torch.equal(pinned, host)
    assert torch.empty(4, pin_memory=True).is_pinned()
    assert torch.zeros(2, 2, pin_memory=True).sum().item() == 0
    on_device = pinned.to("cuda", non_blocking=True)
    assert on_device.is_cuda and not on_device.is_pinned()
    assert torch.cuda.memory_allocated() == 512  # pinned host memory is not device memory
    with pytest.raises(RuntimeError, match=r"cannot pin 'torch\.cuda\.FloatTensor' only dense CPU tensors"):
        on_device.pin_memory()


def test_dataloader_pin_memory(fakecuda):
    fakecuda("a100")
    data = torch.utils.data.TensorDataset(torch.randn(8, 3), torch.arange(8))
    loader = torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True)
    batches = list(loader)
    assert len(batches) == 2 and all(x.is_pinned() and y.is_pinned() for x, y in batches)


def test_dataloader_workers_pin_on_their_own_thread_and_training_runs(fakecuda):
    # with workers, DataLoader pins on a thread of its own, where fakecuda's mode is not on: torch's own pin_memory
    # asked the driver there ("Found no NVIDIA driver")
    import threading

    import fakegpu.fakecuda as fc

    fakecuda("a100")
    data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
    loader = torch.utils.data.DataLoader(data, batch_size=16, num_workers=2, pin_memory=True)
    model = torch.nn.Linear(16, 4).cuda()
    for x, y in loader:
        assert x.is_pinned() and y.is_pinned() and not x.is_cuda
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
    assert model.weight.grad.is_cuda and torch.cuda.memory_allocated() > 0
    on_thread = []
    worker = threading.Thread(target=lambda: on_thread.append(torch.randn(3).pin_memory().is_pinned()))
    worker.start()
    worker.join()
    assert on_thread == [True]
    fc.deactivate()
    assert "pin_memory" not in torch.Tensor.__dict__ and "is_pinned" not in torch.Tensor.__dict__
