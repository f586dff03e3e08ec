"""On the machine's real Docker Engine: NVIDIA_VISIBLE_DEVICES naming a MIG device of the host's inventory, by
its MIG-<uuid> or as GPU:MIG. The container's device table holds the parent GPU with that one MIG device at its
host placement, and CUDA in the container (the injected libcuda, through ctypes) sees one device with the
slice's memory and SMs. A MIG index past the GPU's last fails the start, naming the MIG devices there are.
Expected values come from `fakegpu.devices`."""

from __future__ import annotations

import json

import pytest

from fakegpu.devices.mig import MIB
from tests.container.conftest import LABEL, SITE_CONFIG, docker, run
from tests.container.test_nvidia_env_docker import state_folders

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("fakegpu_runtime")]
SPEC = "a100:1:mig=3g.40gb+2g.20gb+1g.10gb"
# CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT in cuda.h.
PROBE = r"""
import ctypes, json, os
rows = [dict(f.split("=", 1) for f in line.rstrip("\n").split("\t")[1:])
        for line in open(os.environ["FAKEGPU_DEVICE_TABLE"]) if line.startswith("device\t")]
cu = ctypes.CDLL("libcuda.so.1")
n = ctypes.c_int()
assert cu.cuInit(0) == 0 and cu.cuDeviceGetCount(ctypes.byref(n)) == 0
cuda = []
for i in range(n.value):
    dev, mem, sms = ctypes.c_int(), ctypes.c_size_t(), ctypes.c_int()
    name = ctypes.create_string_buffer(256)
    assert cu.cuDeviceGet(ctypes.byref(dev), i) == 0 and cu.cuDeviceGetName(name, 256, dev) == 0
    assert cu.cuDeviceTotalMem_v2(ctypes.byref(mem), dev) == 0
    assert cu.cuDeviceGetAttribute(ctypes.byref(sms), 16, dev) == 0
    cuda.append([name.value.decode(), mem.value, sms.value])
print(json.dumps({"table": [[r["uuid"], r.get("mig.layout")] for r in rows], "cuda": cuda}))
"""


@pytest.fixture
def inventory(host_inventory):
    return host_inventory(SPEC)


def _two_g(inventory):
    (mig,) = [m for m in inventory[0].mig if m.profile.name == "2g.20gb"]
    return mig


@pytest.mark.parametrize(("entry", "injection"), [("uuid", "runtime"), ("0:1", "runtime"), ("0:1", "hook")])
def test_one_mig_device_is_what_the_container_sees(inventory, entry, injection):
    if injection != "runtime":
        from fakegpu_hook.settings import update_config

        update_config(str(SITE_CONFIG), {"injection": injection})
    mig = _two_g(inventory)
    assert mig.index == 1  # 0:1 names it: NVML numbers the MIG devices by GPU instance ID
    value = mig.uuid if entry == "uuid" else entry
    result = run("-e", f"NVIDIA_VISIBLE_DEVICES={value}", "--", "python3", "-c", PROBE)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["table"] == [[inventory[0].uuid, f"2g.20gb@{mig.start}"]]
    assert seen["cuda"] == [[f"{inventory[0].profile.name} MIG 2g.20gb", mig.profile.memory_mib * MIB,
                             mig.profile.sm_count]]
    # The A100 80GB's 2g.20gb, as `nvidia-smi mig -lgip` lists it.
    assert (mig.profile.memory_mib, mig.profile.sm_count) == (19968, 28)


def test_a_mig_index_past_the_last_fails_the_start(inventory):
    before = state_folders()
    result = run("-e", "NVIDIA_VISIBLE_DEVICES=0:3", "--", "true")
    assert result.returncode != 0
    assert "NVIDIA_VISIBLE_DEVICES: device '0:3': GPU 0 has MIG devices 0:0..0:2" in result.stderr
    assert state_folders() <= before
    assert docker("ps", "-aq", "--filter", f"label={LABEL}").stdout.strip() == ""
