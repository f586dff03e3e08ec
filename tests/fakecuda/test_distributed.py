"""torch.distributed backend "nccl" under fakecuda: real collectives on gloo, DDP gradients equal a reference.

Multi-process tests run this file as the worker script (`torchrun ... test_distributed.py ddp OUT`, or plain
`python test_distributed.py collectives OUT` with tcp:// rendezvous). Workers switch fakecuda on the way the
image does, from FAKEGPU_RUNTIME/FAKEGPU_DEVICES through an interpreter-start hook (a sitecustomize here), and
write what they saw as JSON. Every subprocess has a timeout and every group an init timeout: nothing can hang.
"""

from __future__ import annotations

import datetime
import inspect
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.launcher import python_hook_dir

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
nn = torch.nn

pytestmark = pytest.mark.torch
# torch 2.10 has no ProcessGroup.register_pre_hook, the hook collective statistics are counted by
COUNTS_COLLECTIVES = hasattr(dist.ProcessGroup, "register_pre_hook")
# torch 2.15 registers its builtin backends as plugins; in 2.10 "nccl" is a branch of _new_process_group_helper
NCCL_IS_PLUGIN = "_backend_type" in inspect.signature(dist.Backend.register_backend).parameters
# The pre-hook's op name for all_gather_into_tensor / reduce_scatter_tensor: 2.15's gloo tags them ALLGATHER_BASE /
# REDUCE_SCATTER_BASE, 2.14's (Debian's CPU build) ALLGATHER / REDUCE_SCATTER, with the same tensors as the list
# forms, so the statistics can only say all_gather / reduce_scatter there. Checked on those two releases.
BASE_OPS_TAGGED = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 15)
GATHER_INTO_TENSOR = "all_gather_into_tensor" if BASE_OPS_TAGGED else "all_gather"
REDUCE_SCATTER_TENSOR = "reduce_scatter_tensor" if BASE_OPS_TAGGED else "reduce_scatter"

HERE = Path(__file__).resolve()
INIT_TIMEOUT = datetime.timedelta(seconds=60)
RUN_TIMEOUT_S = 240
WORLD = 2


def skip_without_libuv_store() -> None:
    """torchrun needs TCPStore's libuv server: its rendezvous (static and c10d) asks for it with no switch in 2.14.1.

    Debian's CPU build of torch has no libuv, so torchrun fails there with or without fakecuda (plain
    init_process_group takes USE_LIBUV=0 or ?use_libuv=0 instead, which the tcp:// tests here honour).
    """
    try:
        dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=10), use_libuv=True)
    except dist.DistStoreError as exc:
        if "without libuv" not in str(exc):
            raise
        pytest.skip("this torch is built without libuv, which torchrun's rendezvous requires")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))


def global_batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)


# -- in-process: a one-rank group over tcp://


@pytest.fixture
def one_rank_group(fakecuda):
    fakecuda("a100:2")
    from fakegpu.fakecuda.distributed import reset_collective_stats

    reset_collective_stats()
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                            timeout=INIT_TIMEOUT)
    yield
    dist.destroy_process_group()


def test_nccl_group_reports_nccl_and_keeps_fake_cuda_results(one_rank_group):
    from fakegpu.fakecuda.distributed import collective_stats

    assert dist.get_backend() == "nccl" and dist.get_backend_config() == "cuda:nccl"
    assert dist.is_nccl_available()
    assert isinstance(torch.cuda.nccl.version(), tuple) and torch.cuda.nccl.version()[0] >= 2
    t = torch.arange(4.0, device="cuda:1")
    assert torch.cuda.nccl.is_available([t])
    dist.all_reduce(t)
    out = torch.empty(4, device="cuda:1")
    dist.all_gather_into_tensor(out, t)
    parts = [torch.empty(4, device="cuda:1")]
    dist.all_gather(parts, t)
    red = torch.empty(4, device="cuda:1")
    dist.reduce_scatter_tensor(red, t)
    dist.broadcast(t, src=0)
    dist.barrier()
    for x in (t, out, parts[0], red):
        assert x.device == torch.device("cuda", 1) and x.is_cuda
        assert torch.equal(x.cpu(), torch.arange(4.0))
    if not COUNTS_COLLECTIVES:
        assert collective_stats() == {}
        return
    stats = collective_stats()
    assert stats["all_reduce"] == {"calls": 1, "bytes": 16}
    # all_gather (list form) adds its own call, counted under all_gather either way
    assert stats[GATHER_INTO_TENSOR]["bytes"] == 16 * stats[GATHER_INTO_TENSOR]["calls"]
    assert stats[GATHER_INTO_TENSOR]["calls"] == (1 if BASE_OPS_TAGGED else 2)
    assert stats[REDUCE_SCATTER_TENSOR]["calls"] == 1 and stats["barrier"]["calls"] == 1


def test_device_id_binding_and_subgroups(fakecuda):
    # torchtitan-style setup: the default group bound to a device, then a subgroup (which c10d may split from it)
    fakecuda("a100:2")
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                            timeout=INIT_TIMEOUT, device_id=torch.device("cuda", 1))
    try:
        sub = dist.new_group([0])
        t = torch.ones(2, device="cuda:1")
        dist.all_reduce(t, group=sub)
        assert dist.get_backend(sub) == "nccl" and t.device == torch.device("cuda", 1)
        dist.barrier()  # c10d makes its barrier tensor on the bound device: a CUDA allocation without fakecuda
    finally:
        dist.destroy_process_group()


def test_deactivate_gives_torch_its_nccl_back(fakecuda):
    from torch.distributed import distributed_c10d as c10d
    from torch.distributed.distributed_c10d import Backend

    from fakegpu.fakecuda import distributed

    before = Backend._plugins.get("NCCL")
    # a CPU build of torch has no ProcessGroupNCCL at all
    helper, pg_class = c10d._new_process_group_helper, getattr(c10d, "ProcessGroupNCCL", None)
    barrier = dist.ProcessGroup.barrier
    fakecuda("a100")
    if NCCL_IS_PLUGIN:
        assert Backend._plugins["NCCL"].creator_fn is distributed._create_nccl_on_gloo
    else:
        assert c10d._new_process_group_helper is not helper
    assert dist.ProcessGroup.barrier is not barrier
    import fakegpu.fakecuda as fc

    fc.deactivate()
    assert Backend._plugins.get("NCCL") == before
    assert Backend.backend_capability["nccl"] == ["cuda"]
    assert c10d._new_process_group_helper is helper and getattr(c10d, "ProcessGroupNCCL", None) is pg_class
    assert dist.ProcessGroup.barrier == barrier  # torch's pybind method again (bound the same way)
    fakecuda("a100")  # the fixture deactivates once more; a second deactivate is a no-op


def test_collective_stats_use_the_larger_buffer_per_call():
    from fakegpu.fakecuda.distributed import CollectiveStats

    stats = CollectiveStats()
    stats.record("all_gather_into_tensor", 64)
    stats.record("all_gather_into_tensor", 64)
    assert stats.snapshot() == {"all_gather_into_tensor": {"calls": 2, "bytes": 128}}
    stats.reset()
    assert stats.snapshot() == {}


# -- two processes


def worker_env(tmp_path: Path, devices: str = "a100:2") -> dict[str, str]:
    """The environment a fakegpu/pytorch image gives a process: fakecuda on from interpreter start."""
    hook = python_hook_dir(tmp_path)  # the interpreter-start hook `fakegpu run --mode fakecuda` uses
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "MASTER_", "RANK", "LOCAL_"))}
    env.update(FAKEGPU_RUNTIME="fakecuda", FAKEGPU_DEVICES=devices, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(hook), env.get("PYTHONPATH")])))
    return env


def read_results(out: Path) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]


def check(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]


@pytest.mark.slow
def test_ddp_two_ranks_under_torchrun_match_single_process_gradients(tmp_path):
    skip_without_libuv_store()
    out = tmp_path / "out"
    out.mkdir()
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--nproc-per-node", str(WORLD), "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), str(HERE), "ddp", str(out)]
    check(subprocess.run(cmd, env=worker_env(tmp_path), capture_output=True, text=True, timeout=RUN_TIMEOUT_S))
    ranks = read_results(out)

    model = make_model()  # the reference: one process, plain CPU, the whole global batch
    x, y = global_batch()
    nn.functional.mse_loss(model(x), y).backward()
    for r, res in enumerate(ranks):
        assert res["backend"] == "nccl" and res["device_count"] == 2
        assert res["param_device"] == f"cuda:{r}" and res["grad_device"] == f"cuda:{r}"
        for name, p in model.named_parameters():
            assert torch.allclose(torch.tensor(res["grads"][name]), p.grad, atol=1e-6), (r, name)
        if not COUNTS_COLLECTIVES:
            continue
        # DDP's bucket all-reduce is issued from C++; the group's hook still counts it
        assert res["stats"]["all_reduce"]["calls"] >= 1
        assert res["stats"]["all_reduce"]["bytes"] >= sum(p.numel() * 4 for p in model.parameters())
        assert res["stats"]["broadcast"]["calls"] >= 1  # DDP's initial sync of module states


@pytest.mark.slow
def test_collectives_across_two_processes_over_tcp(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = worker_env(tmp_path)
    url = f"tcp://127.0.0.1:{free_port()}"
    procs = [subprocess.Popen([sys.executable, str(HERE), "collectives", str(out), url, str(r)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(WORLD)]
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=RUN_TIMEOUT_S)
            check(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, res in enumerate(read_results(out)):
        assert res["all_reduce"] == [3.0, 3.0, 3.0] and res["avg"] == [0.5, 0.5]
        assert res["broadcast"] == [0.0, 0.0]
        assert res["all_gather"] == [[0.0, 0.0], [1.0, 1.0]]
        assert res["all_gather_into_tensor"] == [0.0, 0.0, 1.0, 1.0]
        # input on every rank is [0, 1, 2, 3] + rank: summed [1, 3, 5, 7], rank r keeps half r
        assert res["reduce_scatter_tensor"] == [[1.0, 3.0], [5.0, 7.0]][r]
        assert res["recv"] == ([] if r == 0 else [42.0, 42.0])
        assert set(res["devices"]) == {f"cuda:{r}"}
        if not COUNTS_COLLECTIVES:
            continue
        assert res["stats"]["all_reduce"] == {"calls": 2, "bytes": 12 + 8}
        assert res["stats"][REDUCE_SCATTER_TENSOR] == {"calls": 1, "bytes": 16}
        assert res["stats"]["barrier"]["calls"] == 1
        assert res["stats"]["send" if r == 0 else "recv"] == {"calls": 1, "bytes": 8}


# -- the workers (run as a script by the tests above)


def _ddp_worker(out: Path) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from fakegpu.fakecuda.distributed import collective_stats

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", timeout=INIT_TIMEOUT)  # env:// from torchrun
    device = f"cuda:{local}"
    model = DDP(make_model().to(device), device_ids=[local])
    x, y = global_batch()
    # each rank its shard of the global batch: DDP's averaged gradient is then the full-batch gradient
    nn.functional.mse_loss(model(x[rank::world].to(device)), y[rank::world].to(device)).backward()
    params = dict(model.module.named_parameters())
    result = {
        "backend": dist.get_backend(), "device_count": torch.cuda.device_count(),
        "param_device": str(params["0.weight"].device), "grad_device": str(params["0.weight"].grad.device),
        "grads": {name: p.grad.cpu().tolist() for name, p in params.items()},
        "stats": collective_stats(),
    }
    dist.destroy_process_group()
    return result


def _collectives_worker(out: Path, url: str, rank: int) -> dict:
    from fakegpu.fakecuda.distributed import collective_stats

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=url, rank=rank, world_size=WORLD, timeout=INIT_TIMEOUT)
    dev = torch.device("cuda", rank)
    res: dict = {}
    t = torch.full((3,), float(rank + 1), device=dev)
    dist.all_reduce(t)
    avg = torch.full((2,), float(rank), device=dev)
    dist.all_reduce(avg, op=dist.ReduceOp.AVG)  # NCCL has AVG; FSDP2 reduce-scatters with it
    b = torch.full((2,), float(rank), device=dev)
    dist.broadcast(b, src=0)
    parts = [torch.empty(2, device=dev) for _ in range(WORLD)]
    dist.all_gather(parts, torch.full((2,), float(rank), device=dev))
    flat = torch.empty(2 * WORLD, device=dev)
    dist.all_gather_into_tensor(flat, torch.full((2,), float(rank), device=dev))
    half = torch.empty(2, device=dev)
    dist.reduce_scatter_tensor(half, torch.arange(4.0, device=dev) + rank)
    dist.barrier()
    got = torch.zeros(2, device=dev)
    if rank == 0:
        dist.send(torch.full((2,), 42.0, device=dev), dst=1)
    else:
        dist.recv(got, src=0)
    outputs = [t, avg, b, *parts, flat, half, got]
    res.update(all_reduce=t.cpu().tolist(), avg=avg.cpu().tolist(), broadcast=b.cpu().tolist(),
               all_gather=[p.cpu().tolist() for p in parts],
               all_gather_into_tensor=flat.cpu().tolist(), reduce_scatter_tensor=half.cpu().tolist(),
               recv=got.cpu().tolist() if rank == 1 else [], devices=sorted({str(o.device) for o in outputs}),
               stats=collective_stats())
    dist.destroy_process_group()
    return res


def _main(argv: list[str]) -> None:
    kind, out = argv[0], Path(argv[1])
    import fakegpu.fakecuda as fc

    assert fc.is_active(), "the worker expects fakecuda on from the environment"
    if kind == "ddp":
        rank, result = int(os.environ["RANK"]), _ddp_worker(out)
    else:
        rank = int(argv[3])
        result = _collectives_worker(out, argv[2], rank)
    (out / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    _main(sys.argv[1:])
