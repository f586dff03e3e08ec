"""Real pynvml against the MIG surface of libnvidia-ml.so.1: MIG mode, MIG device handles and what they answer,
checked against the placement fakegpu/devices/mig.py computes for the same spec."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.devices.spec import resolve_devices

from .conftest import NativeEnv

pytestmark = pytest.mark.native

MIG_WALK = Path(__file__).with_name("pynvml_mig_walk.py")
LAYOUT_SPEC = "a100:1:mig=3g.40gb+2g.20gb+1g.10gb"
MIB = 1 << 20
# What a MIG device handle answers; every other query pynvml_walk.py asks a whole GPU is refused.
MIG_ANSWERS = {"name", "uuid", "index", "memory", "memory_v2", "compute_mode", "attributes", "is_mig",
               "gpu_instance_id", "compute_instance_id", "parent_index", "by_uuid", "by_uuid_index"}


def mig_walk(native: NativeEnv, spec: str) -> dict:
    out = subprocess.run([sys.executable, str(MIG_WALK)], capture_output=True, text=True, env=native.env(spec),
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def layout_walk(native_build: Path, test_catalog, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list]:
    state = tmp_path_factory.mktemp("state")
    result = mig_walk(NativeEnv(catalog=test_catalog[0], state_dir=state), f"{LAYOUT_SPEC},h100,l4-24gb")
    return result, resolve_devices(f"{LAYOUT_SPEC},h100,l4-24gb", "0", test_catalog[1])


def test_mig_mode_and_device_count(layout_walk) -> None:
    result, devices = layout_walk
    a100 = result["boards"][0]
    assert a100["mig_mode"] == {"value": [1, 1]}
    assert a100["max_mig"] == {"value": devices[0].profile.data["mig"]["max_instances"]} == {"value": 7}
    found = [i for i, r in enumerate(a100["by_index"]) if "value" in r]
    assert found == [0, 1, 2] == [m.index for m in devices[0].mig]
    # Within the board's maximum an empty slot is not there; past it the index is bad.
    assert [r.get("error") for r in a100["by_index"][3:7]] == ["NVMLError_NotFound"] * 4
    assert a100["by_index"][7] == a100["by_index"][8] == {"error": "NVMLError_InvalidArgument"}


def test_mig_devices_match_the_placement(layout_walk) -> None:
    result, devices = layout_walk
    parent = devices[0]
    migs = result["boards"][0]["mig"]
    assert len(migs) == len(parent.mig) == 3
    for got, want in zip(migs, parent.mig, strict=True):
        p = want.profile
        v = {k: a.get("value") for k, a in got.items()}
        assert v["name"] == f"NVIDIA A100-SXM4-80GB MIG {p.name}"
        assert v["uuid"] == v["by_uuid"] == want.uuid and v["uuid"].startswith("MIG-")
        assert v["index"] == v["by_uuid_index"] == want.index
        assert v["is_mig"] == 1 and v["parent_index"] == parent.index
        assert v["gpu_instance_id"] == want.gi_id and v["compute_instance_id"] == 0
        assert v["memory"] == {"total": p.memory_mib * MIB, "used": 0, "free": p.memory_mib * MIB}
        assert v["memory_v2"]["total"] == p.memory_mib * MIB and v["memory_v2"]["used"] == 0
        assert v["attributes"] == {
            "multiprocessorCount": p.sm_count, "sharedCopyEngineCount": p.copy_engines,
            "sharedDecoderCount": p.decoders, "sharedEncoderCount": p.encoders, "sharedJpegCount": p.jpeg,
            "sharedOfaCount": p.ofa, "gpuInstanceSliceCount": p.compute_slices,
            "computeInstanceSliceCount": p.compute_slices, "memorySizeMB": p.memory_mib}
    # The catalog's A100 80GB sizes, as `nvidia-smi mig -lgip` prints them.
    assert [m["memory"]["value"]["total"] // MIB for m in migs] == [40192, 19968, 9728]
    assert [m["gpu_instance_id"]["value"] for m in migs] == [1, 5, 13]


def test_mig_handles_refuse_whole_gpu_queries(layout_walk) -> None:
    result, _ = layout_walk
    for got in result["boards"][0]["mig"]:
        answered = {k for k, a in got.items() if "value" in a}
        assert answered == MIG_ANSWERS
        refused = {a["error"] for k, a in got.items() if k not in MIG_ANSWERS}
        assert refused == {"NVMLError_NotSupported"}


def test_whole_gpu_is_no_mig_device(layout_walk) -> None:
    result, _ = layout_walk
    for board in result["boards"]:
        assert board["is_mig"] == {"value": 0}
        assert board["gpu_instance_id"] == board["compute_instance_id"] == {"error": "NVMLError_NotSupported"}
        assert board["attributes"] == {"error": "NVMLError_NotSupported"}
        assert board["parent_of_whole"] == {"error": "NVMLError_InvalidArgument"}
    assert result["by_unknown_mig_uuid"] == {"error": "NVMLError_NotFound"}


def test_boards_without_a_layout(layout_walk) -> None:
    result, _ = layout_walk
    h100, l4 = result["boards"][1], result["boards"][2]
    # MIG capable, mode off: no MIG device can exist (NVIDIA/go-nvml#60: the maximum is 0 then).
    assert h100["mig_mode"] == {"value": [0, 0]} and h100["max_mig"] == {"value": 0}
    assert h100["mig"] == [] and {r["error"] for r in h100["by_index"]} == {"NVMLError_InvalidArgument"}
    assert l4["mig_mode"] == {"error": "NVMLError_NotSupported"} and l4["max_mig"] == {"value": 0}
    assert l4["mig"] == [] and {r["error"] for r in l4["by_index"]} == {"NVMLError_NotSupported"}
