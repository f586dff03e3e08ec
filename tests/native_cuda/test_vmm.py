"""CUDA virtual memory management and stream-ordered pools in native mode: the driver calls through ctypes (statuses
of misuse included), then unmodified torch with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True and
backend:cudaMallocAsync (torch 2.15 on the CUDA 13 libraries, torch 2.10 on the CUDA 12 ones)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.profiles.workspace_profiles import cuda_context_bytes, lazy_context_bytes, non_pytorch_bytes
from tests.native_cuda.conftest import run_fakegpu
from tests.subprocess_torch import all_of, reports, stdout_json

pytestmark = [pytest.mark.native]

SCRIPTS = Path(__file__).parent / "scripts"
SMI = Path(__file__).resolve().parents[2] / "native" / "build" / "bin" / "nvidia-smi"
MiB = 1 << 20
SUCCESS, INVALID_VALUE, OUT_OF_MEMORY, INVALID_DEVICE, NOT_PERMITTED = 0, 1, 2, 101, 800
A100_TOTAL = 84986036224
A100_CAPACITY = A100_TOTAL - cuda_context_bytes((8, 0))  # less the context as created
# A process that has launched kernels and run cuBLAS holds a larger context (lazy loading, the workspace profiles)
A100_WORKED_CAPACITY = A100_TOTAL - non_pytorch_bytes((8, 0))


def probe(env: dict[str, str]) -> dict:
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "vmm_probe.py")], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_vmm_calls_and_their_errors(cuda_env) -> None:
    out = probe(cuda_env)
    assert out["free0"] == A100_CAPACITY
    assert out["gran_min"] == [SUCCESS, 2 * MiB] and out["gran_rec"] == [SUCCESS, 2 * MiB]
    assert out["gran_bad_device"] == INVALID_VALUE
    assert out["reserve"] == [SUCCESS, 0]  # aligned to the granularity
    assert out["reserve_unaligned"] == INVALID_VALUE
    # cuMemCreate: size in granules, a real device, no fabric handles without IMEX; charged at creation
    assert out["create_unaligned"] == INVALID_VALUE
    assert out["create_bad_device"] == INVALID_DEVICE
    assert out["create_fabric"] == NOT_PERMITTED
    assert out["create"] == SUCCESS and out["free_after_create"] == 4 * MiB
    # cuMemMap: offset 0, aligned, a live handle, inside a reservation, not over another mapping
    for key in ("map_offset", "map_unaligned", "map_bad_handle", "map_too_big", "map_outside_reservation"):
        assert out[key] == INVALID_VALUE, key
    assert out["map"] == SUCCESS
    assert out["map_again"] == INVALID_VALUE
    # cuMemSetAccess: only over mapped ranges, known flags, real devices
    assert out["access_not_mapped"] == INVALID_VALUE
    assert out["access_bad_flags"] == INVALID_VALUE
    assert out["access_bad_device"] == INVALID_DEVICE
    assert out["access"] == SUCCESS and out["get_access"] == [SUCCESS, 3]


def test_vmm_contents_lookups_and_release(cuda_env) -> None:
    out = probe(cuda_env)
    assert out["h2d"] == out["d2d"] == out["d2h"] == SUCCESS and out["roundtrip"] is True
    # the bytes belong to the handle: a second mapping shows them, and costs no capacity (4 MiB + a 4 MiB cudaMalloc)
    assert out["alias_map"] == SUCCESS and out["alias_same_bytes"] is True
    assert out["free_after_alias"] == 8 * MiB
    assert (out["ptr_type"], out["ptr_device"]) == (2, 0)  # CU_MEMORYTYPE_DEVICE on device 0
    assert out["rt_attrs"] == [0, 2]  # cudaMemoryTypeDevice
    assert out["range"] == SUCCESS and (out["range_start"], out["range_size"]) == (2 * MiB, 4 * MiB)
    assert out["range_joined"] == [2 * MiB, 6 * MiB]  # adjacent mappings of one reservation
    assert out["cuMemFree_on_mapping"] == INVALID_VALUE
    assert out["props"] == [SUCCESS, 0]
    assert out["retain"] == [SUCCESS, True] and out["retain_unmapped"] == INVALID_VALUE
    assert out["unmap_part"] == INVALID_VALUE  # only whole mappings
    assert out["unmap_unmapped"] == INVALID_VALUE
    assert out["address_free_mapped"] == INVALID_VALUE
    # released while mapped: the pages stay charged until the last mapping goes
    assert out["release_mapped"] == SUCCESS and out["free_after_release_mapped"] == 10 * MiB
    assert out["release_again"] == INVALID_VALUE
    assert out["unmap_two"] == SUCCESS and out["unmap_alias"] == SUCCESS
    assert out["free_after_unmap"] == 4 * MiB  # only the cudaMalloc'ed buffer is left
    assert out["address_free_wrong_size"] == INVALID_VALUE and out["address_free"] == SUCCESS


def test_vmm_capacity_and_threads(cuda_env) -> None:
    out = probe(cuda_env)
    assert out["oom"] == OUT_OF_MEMORY
    assert out["fill"] == [SUCCESS, A100_CAPACITY % (2 * MiB)]  # filled to the last whole granule
    assert out["oom_one_more"] == OUT_OF_MEMORY
    assert out["threads_errors"] == 0 and out["threads_leak"] == 0
    assert out["fork_child"] == 0 and out["fork_parent_leak"] == 0


def test_stream_ordered_pool(cuda_env) -> None:
    out = probe(cuda_env)
    assert out["pool_get"] == SUCCESS and out["pool_is_current"] is True
    assert out["malloc_async"] == out["malloc_async_2"] == SUCCESS
    # 1 MiB + 1 byte and 3 MiB: used rounds to 512 bytes, the reserve grows in 2 MiB units, charged to the device
    assert out["pool_after_alloc"] == [6 * MiB, 4 * MiB + 512, 6 * MiB]
    assert out["pool_ptr_type"] == 2 and out["pool_roundtrip"] is True
    assert out["free_async"] == SUCCESS
    assert out["pool_after_free"] == [6 * MiB, 3 * MiB, 4 * MiB + 512]  # the reserve stays until a sync
    assert out["pool_after_sync"] == [4 * MiB, 4 * MiB]  # release threshold 0: trimmed to what is in use
    assert out["set_threshold"] == SUCCESS
    assert out["pool_kept"] == [4 * MiB, 0]  # above the threshold nothing goes back at a sync
    assert out["trim"] == SUCCESS and out["pool_after_trim"] == [0, 0, 6 * MiB]
    assert out["set_high_nonzero"] == INVALID_VALUE and out["reset_high"] == [SUCCESS, 0]
    assert out["set_current_ro"] == INVALID_VALUE
    assert out["malloc_async_oom"] == 2  # cudaErrorMemoryAllocation
    assert out["pool_bad"] == INVALID_VALUE


def test_accounting_mode_keeps_no_bytes(cuda_env) -> None:
    out = probe({**cuda_env, "FAKEGPU_MEMORY": "accounting"})
    assert out["h2d"] == out["d2h"] == SUCCESS
    assert out["roundtrip"] is False and out["roundtrip_zeros"] is True
    assert out["free_after_create"] == 4 * MiB and out["oom_one_more"] == OUT_OF_MEMORY


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize("conf", ["expandable_segments:True", "backend:cudaMallocAsync"])
def test_torch_alloc_conf(cuda_build, torch_python, conf, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", conf)
    rep = tmp_path / "rep"
    proc = run_fakegpu(
        [
            "--devices",
            "a100",
            "--mode",
            "native",
            "--report-dir",
            str(rep),
            "--",
            torch_python,
            str(SCRIPTS / "alloc_conf_step.py"),
            str(SMI),
        ],
        complete=all_of(stdout_json(), reports(rep)),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["backend"] == ("native" if conf.startswith("expandable") else "cudaMallocAsync")
    growth = out["growth"]
    assert all(r % (2 * MiB) == 0 for r in growth) and growth == sorted(growth) and growth[-1] > growth[0]
    assert 256 * MiB < growth[-1] < 300 * MiB  # 259 MiB of tensors, expanded in granules, not whole blocks
    step = out["step"]
    assert step["total"] == A100_TOTAL
    assert step["free"] == A100_WORKED_CAPACITY - step["reserved"]  # mem_get_info agrees with torch's reserve
    assert out["stats_reserved"] == step["reserved"]
    # nvidia-smi counts the process's context and everything the allocator holds (MiB)
    assert out["smi_used_mib"] == (step["reserved"] + non_pytorch_bytes((8, 0))) // MiB
    oom = out["oom"]
    assert oom["chunks"] == 7  # 7 x 10 GiB fit in 78.7 GiB, an 8th raises torch.OutOfMemoryError
    assert oom["free"] == A100_WORKED_CAPACITY - oom["reserved"]
    assert out["after_empty"]["free"] == A100_WORKED_CAPACITY - out["after_empty"]["reserved"]
    assert out["after_empty"]["reserved"] < 100 * MiB  # empty_cache gave the 70 GiB back
    (report,) = rep.glob("fakegpu-native-*.json")
    data = json.loads(report.read_text())
    # none of the allocator's memory calls is a not-supported stub
    unsupported = [name for calls in data["unsupported"].values() for name in calls if "Mem" in name]
    assert unsupported == []
    dev = data["devices"][0]
    assert out["max_reserved"] <= dev["peak_bytes"] <= dev["capacity_bytes"] == A100_WORKED_CAPACITY


TWO_DEVICES = """
import json, torch
a = torch.ones(5 << 20, device="cuda:0")  # device 0's context is current from here on
b = a.to("cuda:1")
c = torch.empty(40 << 20, dtype=torch.uint8, device="cuda:1")
print(json.dumps({"devices": [str(b.device), str(c.device)],
                  "reserved": [torch.cuda.memory_reserved(i) for i in (0, 1)],
                  "free": [torch.cuda.mem_get_info(i)[0] for i in (0, 1)]}))
"""


@pytest.mark.torch
@pytest.mark.parametrize("conf", ["", "expandable_segments:True", "backend:cudaMallocAsync"])
def test_torch_second_device(cuda_build, torch_python, conf, monkeypatch) -> None:
    """Switching to device 1 once device 0's context is current (cudaSetDevice must not follow the driver's
    current context back to 0); each device's account holds its own allocator's memory."""
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", conf)
    args = ["--devices", "a100:2", "--mode", "native", "--", torch_python, "-c", TWO_DEVICES]
    proc = run_fakegpu(args, complete=stdout_json())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["devices"] == ["cuda:1", "cuda:1"]
    assert out["reserved"][1] >= 60 * MiB
    # device 0 ran torch.ones' fill kernel, device 1 only copies: its context has not grown
    first_launch = lazy_context_bytes((8, 0), "first_launch")
    assert out["free"] == [A100_CAPACITY - first_launch - out["reserved"][0], A100_CAPACITY - out["reserved"][1]]
