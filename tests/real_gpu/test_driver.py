"""The CUDA driver API against a real H200: tools/gpu_capture/driver_dump.py under `fakegpu run --devices h200`
and tests/data/gpu/h200/driver.json, fact by fact: device attributes, a context's limits, the error names and
texts, and how cuMemGetInfo moves per allocation. Then what the same catalog facts give other boards, the limits'
set/get round trip and libcudart's error texts, which must be the driver's."""

from __future__ import annotations

import sys

import pytest

from tests.real_gpu.conftest import TOOLS, fake_json, real

pytestmark = pytest.mark.native

# Attributes of the capture's VM or of its one SKU, never the fake's default: the PCI bus and device (slot) the
# VM gave the GPU, and the board's PCI subsystem id (another H200 SKU answers another).
VM_ATTRIBUTES = {"33", "34", "140"}


@pytest.fixture(scope="module")
def fake_dump(native_libs) -> dict:
    return fake_json([sys.executable, str(TOOLS / "driver_dump.py")])


@pytest.fixture(scope="module")
def real_dump() -> dict:
    return real("driver.json")


def test_device_attributes_match_the_board(fake_dump: dict, real_dump: dict) -> None:
    differ = {a: (v, fake_dump["attributes"][a]) for a, v in real_dump["attributes"].items()
              if a not in VM_ATTRIBUTES and fake_dump["attributes"][a] != v}
    assert differ == {}, "attribute: (real, fake)"


def test_context_limits_match_the_board(fake_dump: dict, real_dump: dict) -> None:
    # DEV_RUNTIME_SYNC_DEPTH is CUDA_ERROR_UNSUPPORTED_LIMIT (215) from cc 9.0 on.
    assert fake_dump["limits"] == real_dump["limits"]


def test_error_names_and_texts_match_the_driver(fake_dump: dict, real_dump: dict) -> None:
    assert fake_dump["error_names"] == real_dump["error_names"]


def test_small_allocations_share_a_page(fake_dump: dict, real_dump: dict) -> None:
    # Ten 1-byte cuMemAlloc: 512 bytes apart, one 2 MiB step of cuMemGetInfo together.
    assert fake_dump["small_allocs"] == real_dump["small_allocs"]


def test_allocation_steps_and_alignment_match(fake_dump: dict, real_dump: dict) -> None:
    assert fake_dump["alloc_steps"] == real_dump["alloc_steps"]


PROBE = r"""
import ctypes, json, sys
cu = ctypes.CDLL("libcuda.so.1")
cu.cuInit(0)
out = {"attributes": {}}
for a in map(int, sys.argv[1].split(",")):
    v = ctypes.c_int()
    rc = cu.cuDeviceGetAttribute(ctypes.byref(v), a, 0)
    out["attributes"][a] = v.value if rc == 0 else {"error": rc}
ctx = ctypes.c_void_p()
cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0)
cu.cuCtxSetCurrent(ctx)
def get(limit):
    v = ctypes.c_size_t()
    rc = cu.cuCtxGetLimit(ctypes.byref(v), limit)
    return v.value if rc == 0 else {"error": rc}
out["defaults"] = {limit: get(limit) for limit in range(7)}
out["set"] = {limit: cu.cuCtxSetLimit(limit, ctypes.c_size_t(value)) for limit, value in
              ((0, 4096), (1, 1 << 20), (2, 64 << 20), (3, 30), (4, 4096), (5, 1000), (6, 1 << 40))}
out["after"] = {limit: get(limit) for limit in range(7)}
cu.cuDevicePrimaryCtxReset_v2(0)
out["after_reset"] = {limit: get(limit) for limit in range(7)}
rt = ctypes.CDLL("libcudart.so.13")
rt.cudaGetErrorString.restype = ctypes.c_char_p
out["rt_texts"] = {code: rt.cudaGetErrorString(code).decode() for code in (2, 209, 215, 710, 9)}
v = ctypes.c_size_t()
out["rt_limit"] = rt.cudaDeviceGetLimit(ctypes.byref(v), 1), v.value
json.dump(out, sys.stdout)
"""


def probe(devices: str, attributes: list[int]) -> dict:
    doc = fake_json([sys.executable, "-c", PROBE, ",".join(map(str, attributes))], devices=devices)
    for key in ("defaults", "set", "after", "after_reset"):
        doc[key] = {int(k): v for k, v in doc[key].items()}
    doc["attributes"] = {int(k): v for k, v in doc["attributes"].items()}
    doc["rt_texts"] = {int(k): v for k, v in doc["rt_texts"].items()}
    return doc


def test_limits_round_trip_clamp_and_reset(native_libs) -> None:
    doc = probe("h200", [108])
    assert doc["set"] == {0: 0, 1: 0, 2: 0, 3: 215, 4: 0, 5: 0, 6: 0}
    persisting_max = doc["attributes"][108]
    # cuda.h: the driver may clamp a request; the caller reads back what it got (fetch granularity <= 128 bytes,
    # the persisting L2 no larger than its set-aside maximum).
    assert doc["after"] == {0: 4096, 1: 1 << 20, 2: 64 << 20, 3: {"error": 215}, 4: 4096, 5: 128, 6: persisting_max}
    assert doc["after_reset"] == doc["defaults"]
    assert doc["rt_limit"] == [0, real("driver.json")["limits"]["PRINTF_FIFO_SIZE"]]


def test_runtime_error_texts_are_the_drivers(native_libs) -> None:
    names = real("driver.json")["error_names"]
    texts = probe("h200", [1])["rt_texts"]
    assert {code: texts[code] for code in (2, 209, 215, 710)} == {c: names[str(c)][1] for c in (2, 209, 215, 710)}
    assert texts[9] == "invalid configuration argument"  # a runtime-only code keeps the runtime's text


@pytest.mark.parametrize(("devices", "expect"), [
    # cc 5.2 (GTX TITAN X): Maxwell's smaller 1D, 2D and 3D textures; no VMM flag measured; device sync depth 2.
    ("geforce-gtx-titan-x", {21: 65536, 22: 65536, 24: 4096, 42: 16384, 77: 16384, 102: 0, 108: 0}),
    # cc 6.1 (GTX 1070): Pascal's textures with the 16384 mipmapped 1D width.
    ("geforce-gtx-1070", {21: 131072, 24: 16384, 77: 16384, 69: 1 << 28, 108: 0}),
    # cc 8.6 (RTX 3090): the Ampere flags, GPUDirect RDMA off, 3/4 of the 6 MiB L2 persisting.
    ("rtx-3090", {77: 32768, 102: 1, 103: 1, 115: 1, 110: 0, 116: 0, 119: 1, 120: 0, 108: 4718592,
                  109: 134213632, 148: {"error": 1}}),
])
def test_other_boards_take_their_compute_capabilitys_facts(native_libs, devices: str, expect: dict) -> None:
    doc = probe(devices, sorted(expect))
    assert doc["attributes"] == expect
    sync_depth = doc["defaults"][3]
    assert sync_depth == 2 and doc["set"][3] == 0 and doc["after"][3] == 24  # below cc 9.0; 30 clamps to 24
    # The persisting-L2 limit exists where a set-aside does (cc 8.0 on), clamped to it.
    persisting = expect[108]
    assert doc["after"][6] == (persisting if persisting else {"error": 215})


def test_printf_fifo_default_follows_the_sm_count(native_libs) -> None:
    # 64 KiB per SM: 8650752 bytes on the H200's 132 SMs, 82 x 64 KiB on an RTX 3090.
    assert probe("rtx-3090", [16])["defaults"][1] == 82 * 65536


def test_catalog_attribute_names_are_the_drivers() -> None:
    # Every attribute the catalog names is one libcuda reads (driver/attr.c lists them by CUDA name).
    from fakegpu.profiles.compile import capability_facts, load_capabilities

    source = (TOOLS.parents[1] / "native" / "cuda" / "driver" / "attr.c").read_text()
    for cc, row in load_capabilities().items():
        for name in capability_facts(row)["cuda_attributes"]:
            assert f"X({name.upper()})" in source, f"{cc}: {name} is not read by libcuda"

