"""FSDP under fakecuda on 2 ranks (backend "nccl" on gloo): gradients and stepped parameters equal a
single-process CPU reference on the whole batch.

This file is also the worker script (`torchrun ... test_fsdp.py fsdp1 OUT`); it reuses test_distributed's
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
    INIT_TIMEOUT,
    RUN_TIMEOUT_S,
    WORLD,
    check,
    free_port,
    global_batch,
    make_model,
    read_results,
    worker_env,
)

nn = torch.nn
pytestmark = pytest.mark.torch
HERE = Path(__file__).resolve()
LR = 0.1


def reference() -> tuple[dict, dict]:
    """Plain CPU, one process, the whole batch: gradients, then parameters after one SGD step."""
    model = make_model()
    x, y = global_batch()
    nn.functional.mse_loss(model(x), y).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    torch.optim.SGD(model.parameters(), lr=LR).step()
    return grads, {name: p.detach().clone() for name, p in model.named_parameters()}


def run_torchrun(tmp_path: Path, kind: str) -> list[dict]:
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
        assert res["stats"]["reduce_scatter_tensor"]["calls"] >= 1
        assert res["stats"]["all_gather_into_tensor"]["calls"] >= 1
        assert res["peak_allocated"] > 0


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


def _plain(name: str) -> str:
    """A parameter's name in the unwrapped model."""
    return name.replace("_fsdp_wrapped_module.", "")


if __name__ == "__main__":
    kind, out = sys.argv[1], Path(sys.argv[2])
    import fakegpu.fakecuda as fc

    assert fc.is_active(), "the worker expects fakecuda on from the environment"
    result = {"fsdp1": _fsdp1_worker}[kind]()
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(result))
