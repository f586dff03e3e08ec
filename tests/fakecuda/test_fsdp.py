"""FSDP under fakecuda on 2 ranks (backend "nccl" on gloo): gradients and stepped parameters equal a
single-process CPU reference on the whole batch. FSDP1 (FullyShardedDataParallel) and FSDP2 (fully_shard, whose
parameters are DTensors: dtensor.py).

This file is also the worker script (`torchrun ... test_fsdp.py fsdp1|fsdp2 OUT`); it reuses test_distributed's
environment, timeouts and model. FSDP1 depends on backward.py (its post-backward hooks allocate on `cuda`
from inside the autograd engine) and on record_stream reaching the allocator (mode.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a torchrun worker script, the repository root is not on the path
    sys.path.insert(0, str(ROOT))

from tests.fakecuda.test_distributed import (  # noqa: E402
    COUNTS_COLLECTIVES,
    INIT_TIMEOUT,
    RUN_TIMEOUT_S,
    WORLD,
    check,
    free_port,
    global_batch,
    make_model,
    read_results,
    skip_without_libuv_store,
    worker_env,
)

nn = torch.nn
pytestmark = pytest.mark.torch
HERE = Path(__file__).resolve()
LR = 0.1
STEPS = 2
MAX_NORM = 0.5  # below the gradient norm of this model and batch, so clipping scales every gradient


def reference() -> tuple[dict, dict]:
    """Plain CPU, one process, the whole batch: gradients, then parameters after one SGD step."""
    model = make_model()
    x, y = global_batch()
    nn.functional.mse_loss(model(x), y).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    torch.optim.SGD(model.parameters(), lr=LR).step()
    return grads, {name: p.detach().clone() for name, p in model.named_parameters()}


def reference_adamw() -> tuple[dict, dict]:
    """The FSDP2 run's recipe on plain CPU, one process, the whole batch: first-step gradients, then
    parameters after STEPS AdamW steps with gradient clipping."""
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    x, y = global_batch()
    grads = {}
    for step in range(STEPS):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        if step == 0:
            grads = {name: p.grad.clone() for name, p in model.named_parameters()}
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        opt.step()
    return grads, {name: p.detach().clone() for name, p in model.named_parameters()}


def run_torchrun(tmp_path: Path, kind: str) -> list[dict]:
    skip_without_libuv_store()
    out = tmp_path / "out"
    out.mkdir()
    env = worker_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(ROOT)])
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--nproc-per-node", str(WORLD), "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), str(HERE), kind, str(out)]
    check(subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S))
    return read_results(out)


@pytest.mark.slow
def test_fsdp1_two_ranks_match_single_process(tmp_path):
    grads, params = reference()
    for r, res in enumerate(run_torchrun(tmp_path, "fsdp1")):
        assert res["backend"] == "nccl"
        assert set(res["param_devices"]) == {f"cuda:{r}"} and set(res["grad_devices"]) == {f"cuda:{r}"}
        for name in grads:
            assert torch.allclose(torch.tensor(res["grads"][name]), grads[name], atol=1e-6), (r, name)
            assert torch.allclose(torch.tensor(res["params"][name]), params[name], atol=1e-6), (r, name)
        assert res["peak_allocated"] > 0
        if COUNTS_COLLECTIVES:
            assert res["stats"]["reduce_scatter_tensor"]["calls"] >= 1
            assert res["stats"]["all_gather_into_tensor"]["calls"] >= 1


@pytest.mark.slow
def test_fully_shard_two_ranks_match_single_process(tmp_path):
    grads, params = reference_adamw()
    total = sum(p.numel() for p in make_model().parameters())
    for r, res in enumerate(run_torchrun(tmp_path, "fsdp2")):
        assert res["backend"] == "nccl" and res["dtensor"]
        # DTensor parameters, their local shards, gradients and AdamW states all on the rank's fake device
        assert res["devices"] == {kind: [f"cuda:{r}"] for kind in ("param", "local", "grad", "state")}
        for name in grads:
            assert torch.allclose(torch.tensor(res["grads"][name]), grads[name], atol=1e-6), (r, name)
            assert torch.allclose(torch.tensor(res["params"][name]), params[name], atol=1e-6), (r, name)
        assert res["local_numel"] < total <= WORLD * res["local_numel"]  # each rank holds its shard only
        # shards, gradients and optimizer states are charged to the allocator model; every block comes back
        assert res["stats_current"] == res["allocated"] >= res["shard_bytes"] > 0
        assert res["peak"] >= res["allocated"]
        assert res["released"] == 0
        if COUNTS_COLLECTIVES:
            assert res["stats"]["reduce_scatter_tensor"]["calls"] == STEPS * 2  # one per parameter group
            assert res["stats"]["all_gather_into_tensor"]["calls"] >= 1


# -- the worker


def _fsdp1_worker() -> dict:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    from fakegpu.fakecuda.distributed import collective_stats

    rank, local, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", timeout=INIT_TIMEOUT)
    inner = make_model()
    inner[0] = FSDP(inner[0], device_id=local, use_orig_params=True)  # two FSDP units: nested and root
    model = FSDP(inner, device_id=local, use_orig_params=True)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = global_batch()
    nn.functional.mse_loss(model(x[rank::world].cuda()), y[rank::world].cuda()).backward()
    local_params = [p for p in model.parameters() if p.numel()]
    result = {"backend": dist.get_backend(), "param_devices": sorted({str(p.device) for p in local_params}),
              "grad_devices": sorted({str(p.grad.device) for p in local_params if p.grad is not None})}
    with FSDP.summon_full_params(model, with_grads=True):
        result["grads"] = {_plain(n): p.grad.cpu().tolist() for n, p in model.named_parameters()}
    opt.step()
    with FSDP.summon_full_params(model):
        result["params"] = {_plain(n): p.detach().cpu().tolist() for n, p in model.named_parameters()}
    result.update(stats=collective_stats(), peak_allocated=torch.cuda.max_memory_allocated())
    dist.destroy_process_group()
    return result


def _fsdp2_worker() -> dict:
    import gc

    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    from fakegpu.fakecuda.distributed import collective_stats

    rank, local, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", timeout=INIT_TIMEOUT)
    baseline = torch.cuda.memory_allocated()
    model = make_model().cuda()
    fully_shard(model[0])  # two parameter groups: the first Linear, and the root with the rest
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    x, y = global_batch()
    xs, ys = x[rank::world].cuda(), y[rank::world].cuda()
    params = dict(model.named_parameters())
    result: dict = {"backend": dist.get_backend(), "dtensor": all(isinstance(p, DTensor) for p in params.values())}
    for step in range(STEPS):
        opt.zero_grad()
        nn.functional.mse_loss(model(xs), ys).backward()
        if step == 0:
            result["grads"] = {n: p.grad.full_tensor().cpu().tolist() for n, p in params.items()}
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        opt.step()
    result["params"] = {n: p.full_tensor().cpu().tolist() for n, p in params.items()}
    states = [t for p in params.values() for t in (opt.state[p]["exp_avg"], opt.state[p]["exp_avg_sq"])]
    shards = [t.to_local() for p in params.values() for t in (p, p.grad)] + [t.to_local() for t in states]
    result.update(
        devices={"param": sorted({str(p.device) for p in params.values()}),
                 "local": sorted({str(p.to_local().device) for p in params.values()}),
                 "grad": sorted({str(p.grad.device) for p in params.values()}),
                 "state": sorted({str(t.device) for t in states})},
        local_numel=sum(p.to_local().numel() for p in params.values()),
        shard_bytes=sum(t.untyped_storage().nbytes() for t in {id(t): t for t in shards}.values()),
        allocated=torch.cuda.memory_allocated(), peak=torch.cuda.max_memory_allocated(),
        stats_current=torch.cuda.memory_stats()["allocated_bytes.all.current"], stats=collective_stats())
    del model, opt, params, states, shards, xs, ys
    gc.collect()
    torch._C._cuda_clearCublasWorkspaces()
    result["released"] = torch.cuda.memory_allocated() - baseline
    dist.destroy_process_group()
    return result


def _plain(name: str) -> str:
    """A parameter's name in the unwrapped model."""
    return name.replace("_fsdp_wrapped_module.", "")


if __name__ == "__main__":
    kind, out = sys.argv[1], Path(sys.argv[2])
    import fakegpu.fakecuda as fc

    assert fc.is_active(), "the worker expects fakecuda on from the environment"
    result = {"fsdp1": _fsdp1_worker, "fsdp2": _fsdp2_worker}[kind]()
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(result))
