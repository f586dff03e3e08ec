"""DTensor on a cuda mesh under fakecuda (dtensor.py), and storage resizes through the allocator model (FSDP's
way of freeing parameters). One process; the 2-rank fully_shard run is in test_fsdp.py."""

from __future__ import annotations

import pytest

from tests.fakecuda.test_distributed import INIT_TIMEOUT, free_port

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

pytestmark = pytest.mark.torch
MiB = 1 << 20


@pytest.fixture
def mesh(fakecuda):
    fakecuda("a100:2")
    from torch.distributed.device_mesh import init_device_mesh

    torch.cuda.set_device(1)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                            timeout=INIT_TIMEOUT)
    yield init_device_mesh("cuda", (1,))
    dist.destroy_process_group()


def test_dtensor_results_keep_fake_local_shards(mesh):
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    dev = torch.device("cuda", 1)
    dt = distribute_tensor(torch.randn(64, 64, device=dev), mesh, [Shard(0)])
    # results of DTensor ops wrap local tensors that C++ made; each one is badged on its way out of the mode
    for out in (dt * 2, dt.detach(), torch.nn.Parameter(dt), torch.zeros_like(dt), *dt.split(32), dt @ dt.t()):
        assert isinstance(out, DTensor)
        assert out.device == dev and out.is_cuda and not out.is_cpu and out.get_device() == 1
        assert out.to_local().device == dev
    del out
    assert dt.to("cuda:1") is dt and dt.cuda(1) is dt  # already there: no copy, as in torch
    before = torch.cuda.memory_allocated(dev)
    doubled = dt * 2
    assert torch.cuda.memory_allocated(dev) - before == 64 * 64 * 4  # the new local shard is charged
    del doubled
    assert torch.cuda.memory_allocated(dev) == before
    full = dt.full_tensor()
    assert full.device == dev and torch.equal(full.cpu(), dt.to_local().cpu())


def test_from_local_moves_to_the_mesh_device_and_a_cpu_mesh_stays_cpu(mesh):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate

    on_cuda = DTensor.from_local(torch.ones(4), mesh, [Replicate()])  # torch moves the local tensor to the mesh's
    assert on_cuda.device == torch.device("cuda", 1) and on_cuda.to_local().is_cuda
    on_cpu = DTensor.from_local(torch.ones(4), init_device_mesh("cpu", (1,)), [Replicate()])
    assert on_cpu.device == torch.device("cpu") and not on_cpu.is_cuda and on_cpu.get_device() == -1
    assert (on_cpu * 2).device == torch.device("cpu")


def test_deactivate_takes_the_cuda_face_off_dtensor(fakecuda):
    from torch.distributed.tensor import DTensor

    fakecuda("a100")
    assert "device" in DTensor.__dict__
    import fakegpu.fakecuda as fc

    fc.deactivate()
    assert not {"device", "is_cuda", "is_cpu", "get_device"} & set(DTensor.__dict__)


def test_storage_resize_goes_through_the_allocator(fakecuda):
    fakecuda("a100")
    x = torch.empty(MiB, device="cuda")  # 4 MiB
    x.untyped_storage().resize_(0)  # FSDP's free_storage
    assert torch.cuda.memory_allocated() == 0 and x.untyped_storage().nbytes() == 0
    x.untyped_storage().resize_(8 * MiB)
    assert torch.cuda.memory_allocated() == torch.cuda.max_memory_allocated() == 8 * MiB
    x.untyped_storage().resize_(2 * MiB)  # CUDA's resize: new block, copy, old block freed
    assert torch.cuda.memory_allocated() == 2 * MiB and torch.cuda.max_memory_allocated() == 10 * MiB
    empty = torch.empty(0, device="cuda")  # a zero-byte storage is tracked too, so growing it is charged
    empty.untyped_storage().resize_(1024)
    assert torch.cuda.memory_allocated() == 2 * MiB + 1024
    del empty
    assert torch.cuda.memory_allocated() == 2 * MiB
    total = torch.cuda.get_device_properties(0).total_memory
    with pytest.raises(torch.cuda.OutOfMemoryError):  # sized before anything changes, as CUDA's resize
        x.untyped_storage().resize_(total)
    assert torch.cuda.memory_allocated() == 2 * MiB and x.untyped_storage().nbytes() == 2 * MiB


def test_fully_shard_cpu_offload_keeps_shards_on_the_cpu(mesh):
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    from tests.fakecuda.test_distributed import global_batch, make_model

    reference = make_model()
    x, y = global_batch()
    torch.nn.functional.mse_loss(reference(x), y).backward()
    model = make_model()
    fully_shard(model, offload_policy=CPUOffloadPolicy(pin_memory=False))
    out = model(x.cuda())  # FSDP2 copies each shard to the mesh's device, cuda:1, for the all-gather
    assert out.device == torch.device("cuda", 1)
    torch.nn.functional.mse_loss(out, y.cuda()).backward()
    for (name, p), ref in zip(model.named_parameters(), reference.parameters(), strict=True):
        # real FSDP2 keeps offloaded shards and their gradients on the CPU, under a cuda mesh
        assert p.device == p.grad.device == p.to_local().device == torch.device("cpu"), name
        assert torch.allclose(p.grad.full_tensor(), ref.grad, atol=1e-6), name


def test_fully_shard_mixed_precision_computes_in_bf16_on_the_device(mesh):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from tests.fakecuda.test_distributed import global_batch, make_model

    model = make_model().cuda()
    fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    out = model(global_batch()[0].cuda())
    assert out.dtype == torch.bfloat16 and out.device == torch.device("cuda", 1)
    out.float().sum().backward()
    for p in model.parameters():  # sharded parameters and gradients stay float32
        assert p.dtype == p.grad.dtype == torch.float32 and p.grad.device == torch.device("cuda", 1)
