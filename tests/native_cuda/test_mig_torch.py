"""PyPI's CUDA torch on one MIG slice (CUDA_VISIBLE_DEVICES=MIG-<uuid>), in native mode and in fakecuda: one device
with the slice's memory and SMs, out of memory at the slice's capacity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakegpu.devices import resolve_devices
from tests.native_cuda.conftest import run_fakegpu
from tests.subprocess_torch import stdout_json

pytestmark = [pytest.mark.native, pytest.mark.torch]

SPEC = "a100:mig=3g.40gb+2g.20gb+1g.10gb,h100"
PROBE = Path(__file__).resolve().parents[1] / "data" / "probes" / "mig_slice.py"


@pytest.mark.parametrize("mode", ["native", "fakecuda"])
def test_one_mig_slice(cuda_build, torch_python, mode: str) -> None:
    slice_ = resolve_devices(SPEC)[0].mig[1]  # the 2g.20gb
    assert slice_.profile.name == "2g.20gb"
    proc = run_fakegpu(["--devices", SPEC, "--mode", mode, "--", "env", f"CUDA_VISIBLE_DEVICES={slice_.uuid}",
                        torch_python, str(PROBE)], complete=stdout_json())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["count"] == 1
    (dev,) = out["devices"]
    assert dev["name"] == "NVIDIA A100-SXM4-80GB MIG 2g.20gb"
    assert dev["total"] == 19968 << 20
    assert dev["sms"] == 28
    free, total = dev["mem_get_info"]
    assert total == 19968 << 20 and 0 < free < total
    assert out["oom"] and "out of memory" in out["oom"] and "19.50 GiB" in out["oom"], out["oom"]
