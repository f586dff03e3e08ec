"""nvitop's library API (Device, MigDevice) on a board in MIG mode: a real client finds the MIG devices through
NVML alone (MIG mode, the maximum count, handles by index and by UUID, parents) and reads their memory."""

from __future__ import annotations

import importlib.util
import json

import pytest

from fakegpu.devices.spec import resolve_devices

from .conftest import IN_CI, NativeEnv

pytestmark = pytest.mark.native

SPEC = "a100:1:mig=3g.40gb+2g.20gb+1g.10gb,h100"
LIST = """
import json
from nvitop import Device, MigDevice
out = []
for d in Device.all():
    out.append({"name": d.name(), "mig_mode": d.is_mig_mode_enabled(),
                "mig": [{"name": m.name(), "uuid": m.uuid(), "total": m.memory_total(), "used": m.memory_used(),
                         "gi": m.gpu_instance_id(), "ci": m.compute_instance_id(), "index": list(m.index)}
                        for m in d.mig_devices()]})
first = out[0]["mig"][0]["uuid"]
print(json.dumps({"devices": out, "all_mig": [m.uuid() for m in MigDevice.all()],
                  "by_uuid": [Device(uuid=first).name(), list(Device(uuid=first).index)]}))
"""


@pytest.fixture(scope="module")
def nvitop_present() -> None:
    if importlib.util.find_spec("nvitop") is None:
        if IN_CI:
            pytest.fail("nvitop is missing: it is in the test extras")
        pytest.skip("nvitop is not installed (pip install nvitop; it is in the test extras)")


def test_nvitop_lists_mig_devices(nvitop_present, native: NativeEnv, test_catalog) -> None:
    out = native.python(LIST, devices=SPEC)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    a100 = resolve_devices(SPEC, "0", test_catalog[1])[0]
    assert [d["mig_mode"] for d in got["devices"]] == [True, False]
    assert got["devices"][1]["mig"] == []
    assert got["devices"][0]["mig"] == [
        {"name": f"NVIDIA A100-SXM4-80GB MIG {m.profile.name}", "uuid": m.uuid, "total": m.profile.memory_bytes,
         "used": 0, "gi": m.gi_id, "ci": 0, "index": [0, m.index]} for m in a100.mig]
    assert got["all_mig"] == [m.uuid for m in a100.mig]
    assert got["by_uuid"] == ["NVIDIA A100-SXM4-80GB MIG 3g.40gb", [0, 0]]
