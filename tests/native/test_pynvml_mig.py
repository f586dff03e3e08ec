"""Real pynvml against the MIG surface of libnvidia-ml.so.1: MIG mode, MIG device handles and what they answer,
GPU and compute instances, profiles, placements and capacity, checked against what fakegpu/devices/mig.py
computes for the same spec."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.devices.mig import MigBoard, remaining_capacity
from fakegpu.devices.spec import resolve_devices

from .conftest import NativeEnv

pytestmark = pytest.mark.native

MIG_WALK = Path(__file__).with_name("pynvml_mig_walk.py")
LAYOUT_SPEC = "a100:1:mig=3g.40gb+2g.20gb+1g.10gb"
MIB = 1 << 20
# What a MIG device handle answers; every other query pynvml_walk.py asks a whole GPU is refused.
# A MIG handle also lists the processes in its instance (nvml.h: per-instance process queries take MIG handles).
MIG_ANSWERS = {"name", "uuid", "index", "memory", "memory_v2", "bar1", "compute_mode", "attributes", "is_mig",
               "gpu_instance_id", "compute_instance_id", "parent_index", "by_uuid", "by_uuid_index",
               "compute_procs", "compute_procs_v2", "compute_procs_v3", "graphics_procs", "graphics_procs_v2",
               "graphics_procs_v3"}


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
    # BAR1 split by memory slices less a MiB, nothing used: the R570 nvidia-smi MIG table of an A100 80GB split
    # 3g.40gb+2g.20gb+1g.10gb (ztouchnetworks/k8s-dra-driver-gpu README.md) shows 65535, 32767 and 16383 MiB.
    assert [(m["bar1"]["value"]["bar1Total"] // MIB, m["bar1"]["value"]["bar1Used"]) for m in migs] == \
        [(65535, 0), (32767, 0), (16383, 0)]


def test_mig_handles_refuse_whole_gpu_queries(layout_walk) -> None:
    result, _ = layout_walk
    for got in result["boards"][0]["mig"]:
        answered = {k for k, a in got.items() if "value" in a}
        assert answered == MIG_ANSWERS
        refused = {a["error"] for k, a in got.items() if k not in MIG_ANSWERS}
        assert refused == {"NVMLError_NotSupported"}


def test_parent_in_mig_mode_answers_no_whole_gpu_utilization(layout_walk) -> None:
    result, _ = layout_walk
    in_mig, off = (
        {k for k, a in board["whole"].items() if a.get("error") == "NVMLError_NotSupported"}
        for board in result["boards"][:2])
    # nvml.h: not supported on MIG-enabled GPUs; the H100 with MIG mode off (no fans either) answers them.
    assert in_mig - off == {"utilization", "encoder_util", "decoder_util", "process_utilization", "remapped_rows",
                            "num_cores"}
    assert off <= in_mig


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


def test_gpu_instance_profiles(layout_walk) -> None:
    result, devices = layout_walk
    board = MigBoard.of(devices[0].profile)
    got = result["boards"][0]["profiles"]
    by_constant = {str(p.nvml_profile): p for p in board.profiles}
    for key, answer in got.items():
        if key not in by_constant:
            # The header's forward-compatible walk ends at the first INVALID_ARGUMENT.
            want = "NVMLError_InvalidArgument" if int(key) >= 18 else "NVMLError_NotSupported"
            assert answer == {"error": want}, key
            continue
        p = by_constant[key]
        v = answer["value"]
        assert v["name"] == f"MIG {p.name}" and v["id"] == p.id
        assert (v["sliceCount"], v["instanceCount"], v["multiprocessorCount"], v["memorySizeMB"]) == \
            (p.compute_slices, p.instances, p.sm_count, p.memory_mib)
        assert (v["copyEngineCount"], v["decoderCount"], v["encoderCount"], v["jpegCount"], v["ofaCount"]) == \
            (p.copy_engines, p.decoders, p.encoders, p.jpeg, p.ofa)
        assert answer["v1"] == {k: x for k, x in v.items() if k not in ("version", "name")}
        assert answer["by_id"] == {"value": v}
        assert answer["placements"] == [[s, p.size] for s in p.starts]
        assert answer["create"] == "NVMLError_NoPermission"
    assert set(by_constant) <= set(got) and got["18"] == {"error": "NVMLError_InvalidArgument"}


def test_gpu_and_compute_instances(layout_walk) -> None:
    result, devices = layout_walk
    a100 = result["boards"][0]
    want = {m.gi_id: m for m in devices[0].mig}
    assert sorted(g["id"] for g in a100["gis"]) == sorted(want)
    assert {int(k) for k, v in a100["by_id"].items() if "value" in v} == set(want)
    assert {v["error"] for v in a100["by_id"].values() if "error" in v} == {"NVMLError_NotFound"}
    for gi in a100["gis"]:
        m = want[gi["id"]]
        p = m.profile
        assert gi["profile_id"] == p.id and gi["placement"] == [m.start, p.size] and gi["parent_index"] == 0
        # One compute instance spanning the GPU instance (`-cgi ... -C`); its placement covers the GPU instance's
        # slots, as `nvidia-smi mig -lci` shows "0:4" for a 3g.40gb and "0:2" for an H100 1g.24gb (aminmsalimi/migops
        # tests/test_h100_ci_parser.py).
        assert gi["cis"] == [{"id": 0, "profile_id": gi["cis"][0]["profile_id"], "placement": [0, p.size],
                              "parent_index": 0, "gi_id": m.gi_id}]
        spanning = gi["ci_profiles"][str(gi["cis"][0]["profile_id"])]
        assert spanning["value"]["sliceCount"] == p.compute_slices
        assert spanning["value"]["multiprocessorCount"] == p.sm_count
        assert spanning["value"]["name"] == f"MIG {p.name}"
        offered = {k: v for k, v in gi["ci_profiles"].items() if "value" in v}
        assert all(v["remaining"] == 0 for v in offered.values())  # the spanning one leaves no room
        assert all(v["value"]["sliceCount"] <= p.compute_slices for v in offered.values())
        assert gi["ci_profiles"]["9"] == {"error": "NVMLError_InvalidArgument"}
        assert gi["ci_by_id_0"] == {"value": 0} and gi["ci_by_id_1"] == {"error": "NVMLError_NotFound"}
        assert gi["create_ci"] == gi["destroy_gi"] == gi["destroy_ci"] == "NVMLError_NoPermission"
    # The 3g.40gb GPU instance offers 1c.3g.40gb and 2c.3g.40gb beside the spanning profile.
    three = next(g for g in a100["gis"] if g["profile_id"] == 9)
    assert {v["value"]["name"] for v in three["ci_profiles"].values() if "value" in v} == \
        {"MIG 1c.3g.40gb", "MIG 2c.3g.40gb", "MIG 3g.40gb"}


def test_changes_are_refused_and_mig_off_boards_list_nothing(layout_walk) -> None:
    result, _ = layout_walk
    a100, h100, l4 = result["boards"]
    assert a100["set_mig_mode"] == h100["set_mig_mode"] == "NVMLError_NoPermission"
    assert l4["set_mig_mode"] == "NVMLError_NotSupported"
    # MIG mode off: profiles, placements and capacity are board facts (a real H200 with MIG off answers each
    # profile's whole instance count, tests/data/gpu/h200/nvml.json); instances need MIG mode.
    for answer in (a for a in h100["profiles"].values() if "value" in a):
        assert answer["placements"] and answer["gis"] == {"error": "NVMLError_NotSupported"}
        assert answer["remaining"] == {"value": answer["value"]["instanceCount"]}
    assert {v["error"] for v in h100["by_id"].values()} == {"NVMLError_NotSupported"}
    assert {a["error"] for a in l4["profiles"].values()} == {"NVMLError_NotSupported"}


# Layouts that leave room of different shapes on both MIG boards of the test catalog.
CAPACITY_SPEC = ",".join(f"{board}:1:mig={layout}" for board, layout in (
    ("a100", "3g.40gb"), ("a100", "1g.10gb*3"), ("a100", "2g.20gb+1g.20gb"), ("a100", "1g.10gb+me@6"),
    ("a100", "4g.40gb"), ("a100", "7g.80gb"), ("h100", "3g.40gb+1g.10gb"), ("h100", "2g.20gb*2")))


def test_remaining_capacity_matches_mig_py(native: NativeEnv, test_catalog) -> None:
    result = mig_walk(native, CAPACITY_SPEC)
    devices = resolve_devices(CAPACITY_SPEC, "0", test_catalog[1])
    seen = set()
    for device, got in zip(devices, result["boards"], strict=True):
        board = MigBoard.of(device.profile)
        for p in board.profiles:
            want = remaining_capacity(device.mig, board, p)
            assert got["profiles"][str(p.nvml_profile)]["remaining"] == {"value": want}, (device.mig_layout, p)
            seen.add(want)
    assert seen >= {0, 1, 2, 3}  # the layouts exercise real room, not only full boards
    # The 4g.40gb GPU instance's compute instance profiles as a real A100 80GB lists them (`nvidia-smi mig -lcip`):
    # 1c.4g.40gb ID 0 (4 instances, 14 SMs), 2c.4g.40gb ID 1 (2, 28), 4g.40gb ID 3 (1, 56); 4 CE, 2 DEC shared.
    (four,) = result["boards"][4]["gis"]
    offered = {k: v["value"] for k, v in four["ci_profiles"].items() if "value" in v}
    assert {k: (v["name"], v["instanceCount"], v["multiprocessorCount"]) for k, v in offered.items()} == {
        "0": ("MIG 1c.4g.40gb", 4, 14), "1": ("MIG 2c.4g.40gb", 2, 28), "3": ("MIG 4g.40gb", 1, 56)}
    assert {(v["sharedCopyEngineCount"], v["sharedDecoderCount"]) for v in offered.values()} == {(4, 2)}
    # A100 with 3g.40gb at slices 0-3: one more 3g.40gb, one 2g.20gb (it starts at 0, 2 or 4 only) and three
    # 1g.10gb (no profile of one slice starts at slice 7).
    first = result["boards"][0]["profiles"]
    assert (first["2"]["remaining"], first["1"]["remaining"], first["0"]["remaining"]) == \
        ({"value": 1}, {"value": 1}, {"value": 3})


# ctypes straight at the library: the v3 structs pynvml does not wrap, version checks, and handles that are
# garbage, stale or of the wrong kind.
RAW = r"""
import ctypes, json
lib = ctypes.CDLL("libnvidia-ml.so.1")
U, ULL, NAME = ctypes.c_uint, ctypes.c_ulonglong, ctypes.c_char * 96

class GipV3(ctypes.Structure):
    _fields_ = [("version", U), ("id", U), ("sliceCount", U), ("instanceCount", U), ("multiprocessorCount", U),
                ("copyEngineCount", U), ("decoderCount", U), ("encoderCount", U), ("jpegCount", U), ("ofaCount", U),
                ("memorySizeMB", ULL), ("name", NAME), ("capabilities", U)]

class CipV3(ctypes.Structure):
    _fields_ = [("version", U), ("id", U), ("sliceCount", U), ("instanceCount", U), ("multiprocessorCount", U),
                ("sharedCopyEngineCount", U), ("sharedDecoderCount", U), ("sharedEncoderCount", U),
                ("sharedJpegCount", U), ("sharedOfaCount", U), ("name", NAME), ("capabilities", U)]

out = {}
GARBAGE, INFO = ctypes.c_void_p(0x1234), ctypes.byref(ctypes.create_string_buffer(64))
out["uninit_gi_info"] = lib.nvmlGpuInstanceGetInfo(GARBAGE, INFO)
lib.nvmlInit_v2()
dev, mig, gi = (ctypes.c_void_p() for _ in range(3))
lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev))
lib.nvmlDeviceGetMigDeviceHandleByIndex(dev, 0, ctypes.byref(mig))
v3 = GipV3(version=ctypes.sizeof(GipV3) | 3 << 24)
out["gip_v3"] = lib.nvmlDeviceGetGpuInstanceProfileInfoV(dev, 2, ctypes.byref(v3))
out["gip_v3_value"] = [v3.id, v3.sliceCount, v3.memorySizeMB, v3.name.decode(), v3.capabilities]
bad = GipV3(version=ctypes.sizeof(GipV3) | 1 << 24)
out["gip_bad_version"] = lib.nvmlDeviceGetGpuInstanceProfileInfoV(dev, 2, ctypes.byref(bad))
lib.nvmlDeviceGetGpuInstanceById(dev, 1, ctypes.byref(gi))
c3 = CipV3(version=ctypes.sizeof(CipV3) | 3 << 24)
out["cip_v3"] = lib.nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, 0, 0, ctypes.byref(c3))
out["cip_v3_value"] = [c3.id, c3.sliceCount, c3.name.decode(), c3.capabilities]
out["cip_bad_engine"] = lib.nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, 0, 1, ctypes.byref(c3))
small = U(1)
rc = lib.nvmlDeviceGetGpuInstancePossiblePlacements_v2(dev, 19, ctypes.byref((U * 2)()), ctypes.byref(small))
out["placements_short"] = [rc, small.value]
buf = ctypes.create_string_buffer(96)
out["garbage_gi"] = lib.nvmlGpuInstanceGetInfo(GARBAGE, INFO)
out["garbage_ci"] = lib.nvmlComputeInstanceGetInfo_v2(GARBAGE, INFO)
out["gi_as_device"] = lib.nvmlDeviceGetName(gi, buf, 96)
out["device_as_gi"] = lib.nvmlGpuInstanceGetInfo(dev, INFO)
# Slot 5 of the same board: a MIG handle the layout (three instances) never handed out.
out["unfilled_slot"] = lib.nvmlDeviceGetName(ctypes.c_void_p(mig.value + 5 * 8), buf, 96)
out["mig_as_parent"] = lib.nvmlDeviceGetMigDeviceHandleByIndex(mig, 0, ctypes.byref(ctypes.c_void_p()))
out["mig_temperature"] = lib.nvmlDeviceGetTemperature(mig, 0, ctypes.byref(U()))
out["mig_name_short"] = lib.nvmlDeviceGetName(mig, buf, 8)
print(json.dumps(out))
"""


def test_raw_structs_versions_and_bad_handles(native: NativeEnv) -> None:
    out = native.python(RAW, devices=LAYOUT_SPEC)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    ok, uninit, invalid, not_supported, short, mismatch = 0, 1, 2, 3, 7, 25
    assert got["uninit_gi_info"] == uninit
    assert got["gip_v3"] == ok and got["gip_v3_value"] == [9, 3, 40192, "MIG 3g.40gb", 0]
    assert got["gip_bad_version"] == mismatch
    assert got["cip_v3"] == ok and got["cip_v3_value"] == [0, 1, "MIG 1c.3g.40gb", 0]
    assert got["cip_bad_engine"] == invalid
    assert got["placements_short"] == [short, 7]  # 1g.10gb has seven placements
    assert got["garbage_gi"] == got["garbage_ci"] == got["device_as_gi"] == invalid
    assert got["gi_as_device"] == got["unfilled_slot"] == invalid
    assert got["mig_as_parent"] == got["mig_temperature"] == not_supported
    assert got["mig_name_short"] == short
