"""cuBLAS / cuBLASLt workspaces through the allocator model, as torch takes them (see workspace.py)."""

from __future__ import annotations

import gc
import threading

import pytest

from fakegpu.fakecuda.workspace import BlasConfig, HandlePool, Workspaces, parse_workspace_config
from fakegpu.profiles.workspace_profiles import builtin, cublas_workspace_bytes

MiB = 1 << 20
KiB = 1 << 10


def test_workspace_config_parsing():
    assert parse_workspace_config(":4096:8") == 32 * MiB
    assert parse_workspace_config(":4096:2:16:8") == 4096 * KiB * 2 + 16 * KiB * 8
    assert parse_workspace_config("garbage") is None
    config = BlasConfig.from_env({"TORCH_CUBLAS_WORKSPACE_CACHE": "1", "CUBLAS_WORKSPACE_CONFIG": ":16:8",
                                  "CUBLASLT_WORKSPACE_SIZE": "2048", "TORCH_CUBLASLT_UNIFIED_WORKSPACE": "0"})
    assert (config.cache, config.unified, config.chosen_override, config.lt_override) == (True, False, 128 * KiB,
                                                                                           2 * MiB)
    assert BlasConfig.from_env({}) == BlasConfig()


def _workspaces(torch_version: str, environ: dict[str, str], cc: tuple[int, int] = (9, 0)) -> Workspaces:
    over = builtin().overheads(cc, torch=torch_version)
    return Workspaces(BlasConfig.from_env(environ), lambda i, n: object(), lambda i, b: None, lambda i: over)


def test_releases_before_the_caching_switch_hold_separate_workspaces():
    # the switch's string is in 2.15.0's libtorch_cuda.so and in none of 2.10.0-2.14.0's (the workspace profiles'
    # pytorch-2.15 entry)
    assert [builtin().overheads((9, 0), torch=v).workspace_policy
            for v in ("2.10.0+cu128", "2.11.0+cu130", "2.14.1+dfsg", "2.15.0+cu132", "2.16.0.dev20270101",
                      "3.0.0")] == ["held", "held", "held", "per_call", "per_call", "per_call"]
    old = _workspaces("2.11.0+cu130", {"TORCH_CUBLAS_WORKSPACE_CACHE": "0"})
    assert (old.caching(0), old.unified(0)) == (True, False)  # 2.11 on an H200: a cuBLASLt workspace of its own
    assert (old.chosen_bytes(0), old.lt_bytes(0)) == (32 * MiB, 1 * MiB)
    assert _workspaces("2.11.0+cu130", {"TORCH_CUBLASLT_UNIFIED_WORKSPACE": "1"}).unified(0)
    new = _workspaces("2.15.0+cu132", {}, cc=(8, 0))
    assert (new.caching(0), new.unified(0), new.chosen_bytes(0)) == (False, True, 8320 * KiB)
    held = _workspaces("2.15.0+cu132", {"TORCH_CUBLAS_WORKSPACE_CACHE": "1", "CUBLASLT_WORKSPACE_SIZE": "65536"})
    assert held.caching(0) and held.lt_bytes(0) == 32 * MiB  # unified: torch caps 64 MiB at the cuBLAS workspace


def test_handle_pool_per_thread_and_autograd_thread():
    backward = threading.local()
    pool = HandlePool(lambda: getattr(backward, "on", False))
    main = pool.current(0)
    assert pool.current(0) == main and pool.current(1) == 0  # handles are per device
    backward.on = True
    engine = pool.current(0)
    backward.on = False
    assert engine != main and pool.created(0) == 2
    seen = []
    worker = threading.Thread(target=lambda: seen.append(pool.current(0)))
    worker.start()
    worker.join()
    del worker
    gc.collect()
    assert seen == [2]  # a third thread, a third handle; back in the pool when the thread ended
    again = threading.Thread(target=lambda: seen.append(pool.current(0)))
    again.start()
    again.join()
    assert seen == [2, 2] and pool.created(0) == 3


torch_tests = pytest.mark.torch


def _per_call_workspaces() -> bool:
    """torch 2.15 frees the cuBLAS workspace after each call unless TORCH_CUBLAS_WORKSPACE_CACHE=1; earlier
    releases have no such switch and always hold it. fakecuda tells them apart by the workspace profiles."""
    torch = pytest.importorskip("torch")
    return builtin().overheads((8, 0), torch=torch.__version__).workspace_policy == "per_call"


def _as_torch_211(monkeypatch) -> None:
    """Run fakecuda as it runs on torch 2.11 (the real H200 capture's release)."""
    from fakegpu.fakecuda import cuda_api

    monkeypatch.setattr(cuda_api, "torch_version", lambda: "2.11.0+cu130")


per_call_only = pytest.mark.skipif("not _per_call_workspaces()", reason="this torch always holds the workspace")


def _matmul_deltas(torch):
    a = torch.randn(64, 64, device="cuda")
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    c = a @ a
    return c, torch.cuda.memory_allocated() - base, torch.cuda.max_memory_allocated() - base


@torch_tests
@per_call_only
def test_first_matmul_takes_a_transient_workspace_by_default(fakecuda):
    torch = pytest.importorskip("torch")
    fakecuda("a100")
    _, kept, peak = _matmul_deltas(torch)
    ws = cublas_workspace_bytes((8, 0))  # 8 MiB + 128 KiB: a 1-10 MiB request, so a 20 MiB segment
    assert kept == 64 * 64 * 4  # only the product stays allocated
    assert peak == 64 * 64 * 4 + ws
    assert torch.cuda.memory_reserved() == 2 * MiB + 20 * MiB  # the small-pool segment and the workspace's
    assert torch.backends.cuda.cublas_workspace_size() == ws


@torch_tests
@per_call_only
def test_bias_linear_takes_the_cublaslt_workspace_for_the_call(fakecuda):
    # native mode (torch's own CublasHandlePool on simulated memory) measured: output + 1 MiB at the peak,
    # only the output left allocated, on every call
    torch = pytest.importorskip("torch")
    fakecuda("a100")
    layer = torch.nn.Linear(64, 64).cuda()
    x = torch.randn(8, 64, device="cuda")
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y = layer(x)
    assert torch.cuda.memory_allocated() - base == 8 * 64 * 4
    assert torch.cuda.max_memory_allocated() - base == 8 * 64 * 4 + 1 * MiB
    y2 = layer(x)
    assert torch.cuda.memory_allocated() - base == 2 * 8 * 64 * 4
    del y, y2


@torch_tests
def test_torch_without_the_caching_switch_holds_the_workspace(monkeypatch, fakecuda):  # undone after fakecuda
    torch = pytest.importorskip("torch")
    _as_torch_211(monkeypatch)
    monkeypatch.setenv("TORCH_CUBLAS_WORKSPACE_CACHE", "0")  # no switch: ignored, as that torch ignores it
    fakecuda("a100")
    _, kept, _ = _matmul_deltas(torch)
    assert kept == 64 * 64 * 4 + cublas_workspace_bytes((8, 0))


@torch_tests
@pytest.mark.parametrize(("profile", "cc"), [("h100", (9, 0)), ("t4", (7, 5))])
def test_cached_workspace_stays_allocated_after_the_first_matmul(fakecuda, monkeypatch, profile, cc):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TORCH_CUBLAS_WORKSPACE_CACHE", "1")
    fakecuda(profile)
    _, kept, _ = _matmul_deltas(torch)
    assert kept == 64 * 64 * 4 + cublas_workspace_bytes(cc)
    _, kept_again, _ = _matmul_deltas(torch)
    assert kept_again == 64 * 64 * 4  # one workspace per device, reused
    layer = torch.nn.Linear(64, 64).cuda()
    before = torch.cuda.memory_allocated()
    layer(torch.randn(4, 64, device="cuda"))
    # with the switch (2.15) cuBLASLt shares the cuBLAS workspace, nothing new beyond input and output; before
    # it (2.11 on the H200) cuBLASLt holds a 1 MiB workspace of its own
    lt = 0 if _per_call_workspaces() else 1 * MiB
    assert torch.cuda.memory_allocated() - before <= 2 * 4 * 64 * 4 + 1024 + lt


@torch_tests
def test_workspace_counts_toward_out_of_memory(fakecuda):
    torch = pytest.importorskip("torch")
    fakecuda("a100")
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(30 * MiB / total)
    a = torch.empty(1024, 2048, device="cuda")  # 8 MiB in a 20 MiB segment
    with pytest.raises(torch.cuda.OutOfMemoryError, match=r"Tried to allocate 20\.00 MiB.*12\.00 MiB is allocated"):
        a @ a.t()  # the 4 MiB product fits the segment; the 8.125 MiB workspace needs a second 20 MiB one


MiB32 = 32 * MiB


@torch_tests
def test_held_workspaces_per_handle_forward_and_backward(monkeypatch, fakecuda):
    # the real H200 with torch 2.11 (tests/data/gpu/h200/mem_workloads.json, linear_fwd_bwd): Linear's forward
    # leaves its output, a 32 MiB cuBLAS and a 1 MiB cuBLASLt workspace allocated; backward, on autograd's own
    # thread and so with its own handle, another 32 MiB cuBLAS workspace
    torch = pytest.importorskip("torch")
    _as_torch_211(monkeypatch)
    fakecuda("h200")
    layer = torch.nn.Linear(1024, 1024).cuda()
    x = torch.randn(256, 1024, device="cuda")
    base = torch.cuda.memory_allocated()
    y = layer(x)
    assert torch.cuda.memory_allocated() - base == 1 * MiB + MiB32 + 1 * MiB
    y.sum().backward()
    del y
    grads = 4 * MiB + 4096
    assert torch.cuda.memory_allocated() - base == 2 * MiB32 + 1 * MiB + grads
    layer(x).sum().backward()  # both threads' handles hold theirs already
    assert torch.cuda.memory_allocated() - base == 2 * MiB32 + 1 * MiB + grads
    torch._C._cuda_clearCublasWorkspaces()
    assert torch.cuda.memory_allocated() - base == grads



@torch_tests
def test_a_user_workspace_profile_sets_the_context_and_the_workspace(fakecuda, monkeypatch, tmp_path):
    # FAKEGPU_WORKSPACE_PROFILES: the user's entries before the built-in ones (420 MiB and 8320 KiB on an A100)
    torch = pytest.importorskip("torch")
    mine = tmp_path / "mine.yaml"
    mine.write_text("format: 1\nentries:\n  - name: ours\n    match: {compute_capability: '8.0'}\n    figures:\n"
                    "      context_created: {value: 500MiB, source: our A100}\n"
                    "      cublas_workspace: {value: 16MiB, source: our A100}\n")
    monkeypatch.setenv("FAKEGPU_WORKSPACE_PROFILES", str(mine))
    fakecuda("a100")
    a = torch.ones(64, 64, device="cuda")
    free, total = torch.cuda.mem_get_info()
    assert total - free - torch.cuda.memory_reserved() == (500 + 74) * MiB  # the built-in first-launch growth
    # (torch.backends.cuda.cublas_workspace_size, 2.15's public face of it, is not in 2.10)
    assert torch._C._cuda_getCublasWorkspaceSize() == 16 * MiB
    del a
