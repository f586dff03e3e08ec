"""cuBLAS / cuBLASLt workspaces through the allocator model, as torch 2.15 takes them (see workspace.py)."""

from __future__ import annotations

import pytest

from fakegpu.cuda_overheads import cublas_workspace_bytes
from fakegpu.fakecuda.workspace import BlasConfig, parse_workspace_config

MiB = 1 << 20
KiB = 1 << 10


def test_workspace_config_parsing():
    assert parse_workspace_config(":4096:8") == 32 * MiB
    assert parse_workspace_config(":4096:2:16:8") == 4096 * KiB * 2 + 16 * KiB * 8
    assert parse_workspace_config("garbage") is None
    config = BlasConfig.from_env({"TORCH_CUBLAS_WORKSPACE_CACHE": "1", "CUBLAS_WORKSPACE_CONFIG": ":16:8",
                                  "CUBLASLT_WORKSPACE_SIZE": "2048", "TORCH_CUBLASLT_UNIFIED_WORKSPACE": "0"})
    assert (config.caching, config.unified, config.chosen_override, config.lt_bytes) == (True, False, 128 * KiB,
                                                                                         2 * MiB)
    assert BlasConfig.from_env({}) == BlasConfig()


torch_tests = pytest.mark.torch


def _per_call_workspaces() -> bool:
    """torch 2.15 frees the cuBLAS workspace after each call unless TORCH_CUBLAS_WORKSPACE_CACHE=1; torch 2.10
    has no such switch and always holds it. fakecuda tells them apart by the workspace-size API (cuda_api.py)."""
    torch = pytest.importorskip("torch")
    return hasattr(torch._C, "_cuda_getCublasWorkspaceSize")


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
    if _per_call_workspaces():
        monkeypatch.delattr(torch._C, "_cuda_getCublasWorkspaceSize")  # look like torch 2.10
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
    # unified: cuBLASLt uses the cuBLAS workspace, nothing new beyond input and output
    assert torch.cuda.memory_allocated() - before <= 2 * 4 * 64 * 4 + 1024


@torch_tests
def test_workspace_counts_toward_out_of_memory(fakecuda):
    torch = pytest.importorskip("torch")
    fakecuda("a100")
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(30 * MiB / total)
    a = torch.empty(1024, 2048, device="cuda")  # 8 MiB in a 20 MiB segment
    with pytest.raises(torch.cuda.OutOfMemoryError, match=r"Tried to allocate 20\.00 MiB.*12\.00 MiB is allocated"):
        a @ a.t()  # the 4 MiB product fits the segment; the 8.125 MiB workspace needs a second 20 MiB one
