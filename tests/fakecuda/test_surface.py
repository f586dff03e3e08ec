"""The CUDA surface fakecuda shows a PyTorch program: devices, properties, memory, errors as torch raises them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from fakegpu.fakecuda.allocator import round_size  # noqa: E402
from fakegpu.fakecuda.config import AllocatorConfig  # noqa: E402
from fakegpu.profiles import load_catalog  # noqa: E402

pytestmark = pytest.mark.torch
MiB = 1 << 20


def test_devices_and_properties_come_from_the_profile(fakecuda):
    fakecuda("a100:2")
    a100 = load_catalog().get("a100")
    assert torch.cuda.is_available() and torch.cuda.device_count() == 2
    assert torch.cuda.get_device_name(1) == a100.name
    assert torch.cuda.get_device_capability() == a100.compute_capability
    props = torch.cuda.get_device_properties(0)
    assert props.total_memory == a100.cuda_total_bytes
    assert props.multi_processor_count == a100.sm_count
    assert props.L2_cache_size == a100.data["l2_cache_bytes"]
    assert (props.major, props.minor) == a100.compute_capability
    assert props.uuid != torch.cuda.get_device_properties(1).uuid
    assert repr(props).startswith(f"_CudaDeviceProperties(name='{a100.name}', major=8, minor=0, total_memory=")
    free, total = torch.cuda.mem_get_info()
    assert total == a100.cuda_total_bytes and free < total


def test_memory_allocated_after_model_to_cuda_is_the_rounded_parameter_sizes(fakecuda):
    fakecuda("a100")
    model = nn.Sequential(nn.Linear(100, 300), nn.Linear(300, 7))
    sizes = [p.numel() * p.element_size() for p in model.parameters()]
    model.to("cuda")
    expected = sum(round_size(n, AllocatorConfig()) for n in sizes)
    # 120000 B -> 120320; 1200 -> 1536; 8400 -> 8704; 28 -> 512
    assert expected == 120320 + 1536 + 8704 + 512
    assert torch.cuda.memory_allocated() == expected
    assert torch.cuda.memory_reserved() == 2 * MiB  # all four fit one small-pool segment
    stats = torch.cuda.memory_stats()
    assert stats["allocated_bytes.all.current"] == expected
    assert stats["requested_bytes.all.current"] == sum(sizes)
    assert stats["allocation.small_pool.current"] == 4
    assert stats["segment.all.current"] == 1
    del model
    assert torch.cuda.memory_allocated() == 0  # storages freed with their tensors
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() == 0


def test_peaks_and_reset(fakecuda):
    fakecuda("a100")
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")   # 20 MiB segment
    del x
    assert torch.cuda.max_memory_allocated() == 3 * MiB and torch.cuda.memory_allocated() == 0
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_allocated() == 0
    assert torch.cuda.max_memory_reserved() == 20 * MiB
    assert "PyTorch CUDA memory summary, device ID 0" in torch.cuda.memory_summary()


def test_out_of_memory_raises_torchs_error_with_its_message(fakecuda):
    fakecuda("a100")
    torch.cuda.set_per_process_memory_fraction(64 * MiB / torch.cuda.get_device_properties(0).total_memory)
    keep = torch.empty(40 * MiB, dtype=torch.uint8, device="cuda")
    with pytest.raises(torch.cuda.OutOfMemoryError) as info:
        torch.empty(30 * MiB, dtype=torch.uint8, device="cuda")
    message = str(info.value)
    assert message.startswith("CUDA out of memory. Tried to allocate 30.00 MiB. GPU 0 has a total capacity of ")
    assert "Of the allocated memory 40.00 MiB is allocated by PyTorch" in message
    assert torch.cuda.memory_stats()["num_ooms"] == 1
    assert keep.is_cuda


def test_invalid_device_ordinal(fakecuda):
    fakecuda("a100:2")
    for call in (lambda: torch.zeros(1, device="cuda:2"), lambda: torch.cuda.set_device(5),
                 lambda: torch.ones(2).to("cuda:3")):
        with pytest.raises(RuntimeError, match="CUDA error: invalid device ordinal"):
            call()
    with pytest.raises(AssertionError, match="Invalid device id"):
        torch.cuda.get_device_properties(2)


def test_tensors_on_different_devices(fakecuda):
    fakecuda("a100:2")
    a = torch.ones(4, device="cuda:0")
    with pytest.raises(RuntimeError, match="found at least two devices, cuda:0 and cuda:1"):
        a + torch.ones(4, device="cuda:1")
    with pytest.raises(RuntimeError, match="found at least two devices, cuda:0 and cpu"):
        torch.matmul(a, torch.ones(4))
    assert (a + torch.tensor(2.0)).device == torch.device("cuda:0")  # a 0-dim CPU tensor mixes, as in torch


def test_tensor_face(fakecuda):
    fakecuda("a100:2")
    x = torch.arange(6.0).cuda()
    assert x.is_cuda and x.device == torch.device("cuda:0") and x.get_device() == 0
    assert repr(x) == "tensor([0., 1., 2., 3., 4., 5.], device='cuda:0')"
    y = x.to("cuda:1")
    assert y.device.index == 1 and y is not x and x.to("cuda:0") is x
    back = y.cpu()
    assert type(back) is torch.Tensor and not back.is_cuda and back.tolist() == x.tolist()
    with pytest.raises(TypeError, match="can't convert cuda:0 device type tensor to numpy"):
        x.numpy()
    with torch.cuda.device(1):
        assert torch.empty(1, device="cuda").device.index == 1
    with torch.device("cuda:1"):
        assert torch.zeros(2).device.index == 1


def test_events_record_host_time(fakecuda):
    fakecuda("a100")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.randn(256, 256, device="cuda") @ torch.randn(256, 256, device="cuda")
    end.record()
    torch.cuda.synchronize()
    assert end.elapsed_time(start) < 0 < start.elapsed_time(end)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        assert torch.cuda.current_stream() == s
    assert torch.cuda.current_stream() == torch.cuda.default_stream()


@pytest.mark.torch
def test_to_takes_copy_positionally_as_torch_does(fakecuda):
    # found by the op database (tests/memory_fidelity): Tensor.to(device, dtype, non_blocking, copy)
    torch = pytest.importorskip("torch")
    fakecuda("a100")
    x = torch.randn(4, 4, device="cuda")
    y = x.to("cuda", torch.float32, False, True)
    assert y.device.type == "cuda" and y.data_ptr() != x.data_ptr() and torch.equal(y, x)
    assert x.to("cuda", torch.float32, False, False) is x
    z = x.to("cpu", torch.float64, False, True)
    assert z.device.type == "cpu" and z.dtype == torch.float64


def test_what_the_op_database_ran_on_the_h200(fakecuda):
    # samples of PyTorch's op database that ran on a real H200 (torch 2.11, tests/data/gpu/h200/mem_opdb.json)
    # and failed or differed under fakecuda
    fakecuda("h200")
    x = torch.randn(3, 4, device="cuda", requires_grad=True)
    y = x.to("cpu")  # autograd over a graph that crosses devices (op database `to`)
    (grad,) = torch.autograd.grad(y, x, torch.ones_like(y))
    assert grad.device == torch.device("cuda:0")
    # Python inside a handled function makes tensors with device=input.device (fractional_max_pool2d's random
    # samples, svd_lowrank's test matrix): made on the CPU and charged, not sent to the absent driver
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    out = nn.functional.fractional_max_pool2d(torch.randn(1, 2, 8, 8, device="cuda"), 2, output_size=(4, 4))
    assert out.device == torch.device("cuda:0") and out.shape == (1, 2, 4, 4)
    assert torch.cuda.memory_stats()["allocation.all.allocated"] - before == 4  # input, samples, output, indices
    assert torch.svd_lowrank(torch.randn(6, 5, device="cuda"), q=2)[0].device == torch.device("cuda:0")
    with pytest.raises(RuntimeError, match="tensor_split expected tensor_indices_or_sections to be on cpu, but "
                                           "it's on cuda:0"):
        torch.tensor_split(torch.arange(6, device="cuda"), torch.tensor([2], device="cuda"))
    assert len(torch.tensor_split(torch.arange(6, device="cuda"), torch.tensor([2]))) == 2
    # inference batch norm called as the ATen op: CUDA's kernel returns a mean and inverse std per channel
    weight, bias, mean, var = (torch.ones(2, device="cuda") for _ in range(4))
    out, save_mean, save_invstd = torch.native_batch_norm(torch.randn(3, 2, 4, device="cuda"), weight, bias, mean,
                                                          var, False, 0.1, 1e-5)
    assert save_mean.shape == save_invstd.shape == (2,) and save_mean.device == torch.device("cuda:0")
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    nn.BatchNorm2d(2).cuda().eval()(torch.randn(3, 2, 4, 4, device="cuda"))
    # parameters, buffers and input (2 + 3 + 1), the output: cuDNN's inference keeps no statistics
    assert torch.cuda.memory_stats()["allocation.all.allocated"] - before == 7


def test_activation_freezes_what_exists_and_deactivate_gives_it_back(fakecuda):
    import gc

    import fakegpu.fakecuda as fc

    gc.unfreeze()
    before = len(gc.get_objects())
    fakecuda("a100")
    # torch's and the interpreter's objects are out of the collector's passes while fakecuda runs
    assert before > 10000 and gc.get_freeze_count() > 0.9 * before and len(gc.get_objects()) < 0.1 * before
    fc.deactivate()
    assert gc.get_freeze_count() == 0
    # someone else's freeze (the zygote's preload) is left as it was
    gc.freeze()
    frozen = gc.get_freeze_count()
    try:
        fakecuda("a100")
        fc.deactivate()
        assert gc.get_freeze_count() > 0.9 * frozen  # (frozen objects can still die of their refcount)
    finally:
        gc.unfreeze()


def test_torch_compile_runs_eagerly_under_either_hook_and_says_so_once(fakecuda, monkeypatch):
    torch = pytest.importorskip("torch")
    import warnings

    import fakegpu.fakecuda as fc

    compile_before = torch.compile
    for hook in ("auto", "python"):  # auto: the C++ hook where built, which is no dispatch mode for dynamo to see
        monkeypatch.setenv("FAKEGPU_FAKECUDA_HOOK", hook)
        fakecuda("a100")
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).cuda()
        x = torch.randn(16, 32, device="cuda")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled = torch.compile(model)

            @torch.compile(mode="reduce-overhead")
            def double(t):
                return t * 2

            model.compile()
        assert compiled is model and double(x).is_cuda
        assert [str(w.message) for w in caught].count(
            "fakecuda runs torch.compile'd code eagerly (no kernels are generated for the fake GPU): memory and "
            "time figures are eager mode's") == 1
        before = torch.cuda.memory_allocated()
        model(x).sum().backward()  # (tracing for the CUDA device the tensors report would abort the process)
        assert model[0].weight.grad.is_cuda and torch.cuda.memory_allocated() > before
        fc.deactivate()
    assert torch.compile is compile_before
    # one function object per replaced name: dynamo keys its handlers by function
    fakecuda("a100")
    assert torch.cuda.current_stream is not torch.accelerator.current_stream
    assert torch.cuda.synchronize is not torch.accelerator.synchronize
