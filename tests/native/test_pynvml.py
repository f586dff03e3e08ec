"""Real pynvml against libnvidia-ml.so.1: every listed query on every device, values from the profile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.devices.spec import resolve_devices

from .conftest import LIB_DIR, NATIVE_CUDA_VERSION, NATIVE_DRIVER_VERSION, NativeEnv

pytestmark = pytest.mark.native

WALK = Path(__file__).with_name("pynvml_walk.py")
MIB = 1 << 20

def declared_not_supported(key: str, profile: dict) -> bool:
    """Where NotSupported is the answer we declare (native/README.md), as a real board of that kind gives."""
    if key in ("fan_speed", "fan_speed_v2"):  # a fanless board counts 0 fans (num_fans) and has no speed
        return profile["fans"] == 0
    if key.startswith("nvlink_"):
        return profile["nvlink"]["links"] == 0
    if key == "mig_mode":
        return not profile["mig"]["supported"]
    if key in ("retired_pages", "retired_pending"):  # row remapping replaced page retirement with Ampere
        return not profile["memory"]["ecc"] or int(profile["compute_capability"].split(".")[0]) >= 8
    if key in ("ecc_mode", "ecc_total", "ecc_detailed", "remapped_rows"):
        return not profile["memory"]["ecc"]
    return False


def walk(native: NativeEnv, spec: str, pid: int | None = None, **env: str) -> dict:
    args = [sys.executable, str(WALK)] + ([str(pid)] if pid else [])
    out = subprocess.run(args, capture_output=True, text=True, env=native.env(spec, **env), timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("spec", ["a100:2", "a100,h100:2,l4-24gb,rtx4090"])
def test_every_device_every_query(native: NativeEnv, test_catalog, spec: str) -> None:
    result = walk(native, spec)
    devices = resolve_devices(spec, "0", test_catalog[1])
    assert result["count"]["value"] == len(devices)
    # The one default driver (fakegpu/data/native_versions.json), as libcuda and `fakegpu run` report it.
    assert result["driver"]["value"] == NATIVE_DRIVER_VERSION == "580.95.05"
    assert result["cuda"]["value"] == result["cuda_v2"]["value"] == int(NATIVE_CUDA_VERSION) == 13000
    assert result["nvml"]["value"] == "13.580.95.05"
    assert result["event_wait"] == {"error": "NVMLError_Timeout"}
    for device, got in zip(devices, result["devices"], strict=True):
        p = device.profile.data
        for key, answer in got.items():
            if "error" in answer:
                if key == "process_utilization":
                    assert answer["error"] == "NVMLError_NotFound"  # no process has run: no sample
                    continue
                assert answer["error"] == "NVMLError_NotSupported", (key, answer)
                assert declared_not_supported(key, p), f"{key} unexpectedly {answer['error']}"
            else:
                assert not declared_not_supported(key, p), f"{key} should be NotSupported on {p['id']}"
        v = {k: a.get("value") for k, a in got.items()}
        assert v["name"] == p["name"]
        assert v["uuid"] == device.uuid and v["serial"] == device.serial
        assert v["index"] == v["minor_number"] == device.index
        assert v["by_uuid"] == v["by_serial"] == v["by_bus_id"] == device.index
        assert v["pci"]["busId"] == v["pci_v3"]["busId"] == device.pci_bus_id
        assert v["pci"]["busIdLegacy"] == device.pci_bus_id_legacy
        assert v["pci"]["pciDeviceId"] == int(p["pci"]["device_id"], 16) << 16 | 0x10DE
        assert v["pci"]["pciSubSystemId"] == int(p["pci"]["subsystem_id"], 16)
        assert v["cuda_cc"] == [int(x) for x in p["compute_capability"].split(".")]
        mem, mem2 = v["memory"], v["memory_v2"]
        assert mem["total"] == mem2["total"] == p["memory"]["total_bytes"]
        assert mem["used"] + mem["free"] == mem["total"]
        # Idle on the 580 driver: nothing used; reserved is what CUDA does not get (a real H200, tests/data/gpu/h200).
        assert mem2["used"] == 0 and mem2["reserved"] == p["memory"]["total_bytes"] - p["memory"]["cuda_total_bytes"]
        assert mem2["used"] + mem2["reserved"] + mem2["free"] == mem2["total"]
        limit = p["power"]["default_limit_w"] * 1000
        assert v["power_limit"] == v["power_enforced"] == v["power_default_limit"] == limit
        assert v["power_constraints"] == [p["power"]["min_limit_w"] * 1000, p["power"]["max_limit_w"] * 1000]
        load = p["telemetry"]  # no process on the board: its no-process idle (profiles/load_model.yaml)
        assert v["power_usage"] == round(load["idle_w"] * 1000)
        assert v["clock_sm"] == p["clocks_mhz"].get("graphics_min", 210)  # the bottom of its clock table
        assert v["temperature"] == load["idle_c"] and v["event_reasons"] == 1  # GpuIdle
        assert v["max_clock_sm"] == v["app_clock_sm"] == v["clock_by_id"] == p["clocks_mhz"]["boost"]
        assert v["max_clock_mem"] == v["clock_mem"] == p["clocks_mhz"]["memory"]
        assert v["utilization"] == {"gpu": 0, "memory": 0}
        assert v["pcie_max_gen"] == p["pci"]["generation"] and v["pcie_max_width"] == p["pci"]["link_width"]
        assert v["compute_procs"] == v["compute_procs_v3"] == v["graphics_procs"] == []
        if p["nvlink"]["links"]:
            assert v["nvlink_state"] == 1
        if p["fans"]:
            assert v["num_fans"] == p["fans"]


def test_registered_process_is_seen_by_every_struct_version(native: NativeEnv, test_catalog) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        native.register(sleeper.pid, 1, 3 * 1024 * MIB, "python3")
        holding = walk(native, "a100:2", pid=sleeper.pid)
        with native.working(sleeper.pid, 1):
            result = walk(native, "a100:2", pid=sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
    idle, busy = result["devices"]
    assert idle["compute_procs"]["value"] == []
    for key in ("compute_procs", "compute_procs_v2", "compute_procs_v3"):
        (proc,) = busy[key]["value"]
        assert proc["pid"] == sleeper.pid and proc["usedGpuMemory"] == 3 * 1024 * MIB
    assert busy["graphics_procs"]["value"] == []
    assert busy["memory_v2"]["value"]["used"] == 3 * 1024 * MIB
    # A context holding memory runs nothing, but a real board keeps its clocks up and draws more than with no
    # process (an H200: 127 W at 1980 MHz against 82 W at 345 MHz, tests/data/gpu/h200); work makes it busy.
    held = {k: a.get("value") for k, a in holding["devices"][1].items()}
    a100 = resolve_devices("a100", "0", test_catalog[1])[0].profile.data["telemetry"]
    assert held["utilization"]["gpu"] == 0 and held["event_reasons"] == 0 and held["clock_sm"] == 1410
    assert held["power_usage"] == round(a100["active_idle_w"] * 1000) > idle["power_usage"]["value"]
    assert busy["utilization"]["value"]["gpu"] > 50
    assert busy["temperature"]["value"] > idle["temperature"]["value"]
    assert busy["power_usage"]["value"] > idle["power_usage"]["value"]
    assert busy["event_reasons"]["value"] == 0 and idle["event_reasons"]["value"] == 1
    (sample,) = busy["process_utilization"]["value"]
    assert sample["pid"] == sleeper.pid
    assert result["process_name"]["value"] == "python3"


def test_a_held_context_keeps_a_datacenter_board_up_and_leaves_a_desktop_board_idle(native: NativeEnv,
                                                                                      test_catalog) -> None:
    """The capture's context-idle state (boost clocks, more power) is a datacenter board's; a desktop board holding a
    context and running nothing stays in P8 at its idle, as before, since no capture says otherwise."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        native.register(sleeper.pid, 0, 2 * 1024 * MIB, "python3")
        native.register(sleeper.pid, 1, 2 * 1024 * MIB, "python3")
        result = walk(native, "a100,rtx4090", pid=sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
    a100, rtx = ({k: a.get("value") for k, a in dev.items()} for dev in result["devices"])
    load = {n: resolve_devices(n, "0", test_catalog[1])[0].profile.data["telemetry"] for n in ("a100", "rtx4090")}
    assert (a100["power_usage"], a100["clock_sm"], a100["event_reasons"], a100["perf_state"]) == (
        round(load["a100"]["active_idle_w"] * 1000), 1410, 0, 0)
    assert (rtx["power_usage"], rtx["clock_sm"], rtx["event_reasons"], rtx["perf_state"]) == (
        round(load["rtx4090"]["idle_w"] * 1000), 210, 1, 8)


def test_dead_process_entries_are_dropped(native: NativeEnv) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    entry = native.register(dead.pid, 0, 5 * MIB, "gone")
    result = walk(native, "a100:1")
    assert result["devices"][0]["compute_procs"]["value"] == []
    assert not entry.exists()


def test_pinned_values(native: NativeEnv) -> None:
    result = walk(native, "a100:1", FAKEGPU_TEMPERATURE="77", FAKEGPU_UTILIZATION="42", FAKEGPU_POWER_W="123",
                  FAKEGPU_MEMORY_UTILIZATION="9", FAKEGPU_DRIVER_VERSION="535.104.05")
    d = result["devices"][0]
    assert d["temperature"]["value"] == 77
    assert d["utilization"]["value"] == {"gpu": 42, "memory": 9}
    assert d["power_usage"]["value"] == 123000
    assert result["driver"]["value"] == "535.104.05"
    assert result["cuda"]["value"] == 12020


def test_unsupported_calls_are_recorded(native: NativeEnv, tmp_path: Path) -> None:
    code = (
        "import pynvml as n\n"
        "n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)\n"
        "for _ in range(3):\n"
        "    try: n.nvmlDeviceGetGpuOperationMode(h)\n"
        "    except n.NVMLError_NotSupported: pass\n"
        "    else: raise SystemExit('expected NotSupported')\n"
    )
    out = native.python(code, FAKEGPU_UNSUPPORTED="warn", FAKEGPU_REPORT_DIR=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("nvmlDeviceGetGpuOperationMode is not supported") == 1
    (report,) = tmp_path.glob("nvml-*.json")
    doc = json.loads(report.read_text())
    assert doc["unsupported"] == {"nvmlDeviceGetGpuOperationMode": 3} and doc["mode"] == "native"


def test_unsupported_error_policy_aborts(native: NativeEnv) -> None:
    code = "import pynvml as n\nn.nvmlInit()\nn.nvmlDeviceGetGpuOperationMode(n.nvmlDeviceGetHandleByIndex(0))\n"
    out = native.python(code, FAKEGPU_UNSUPPORTED="error")
    assert out.returncode != 0 and "aborting" in out.stderr


@pytest.mark.skipif(os.environ.get("FAKEGPU_SKIP_TORCH_NVML") == "1", reason="explicitly disabled")
def test_old_nvmlinit_entry_point(native: NativeEnv) -> None:
    # PyTorch counts devices through the unversioned nvmlInit/nvmlDeviceGetCount.
    code = (
        "import ctypes\n"
        "lib = ctypes.CDLL('libnvidia-ml.so.1')\n"
        "n = ctypes.c_uint(0)\n"
        "assert lib.nvmlInit() == 0 and lib.nvmlDeviceGetCount(ctypes.byref(n)) == 0\n"
        "print(n.value)\n"
    )
    out = native.python(code, devices="a100:3")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3"


def test_every_function_nvidia_ml_py_calls_is_exported(native: NativeEnv) -> None:
    # The installed nvidia-ml-py names each NVML function it calls once, as a string it looks up in the library;
    # the export list is generated from the newest nvml.h on PyPI, so none of them may be missing.
    import ctypes
    import inspect
    import re

    import pynvml

    names = sorted(set(re.findall(r'_nvmlGetFunctionPointer\(\s*"(nvml\w+)"', inspect.getsource(pynvml))))
    assert len(names) > 300, "nvidia-ml-py's lookups were not found: the walk would pass vacuously"
    lib = ctypes.CDLL(str(LIB_DIR / "libnvidia-ml.so.1"))
    assert [n for n in names if not hasattr(lib, n)] == []


BOARD_FACTS = """
import json, pynvml as n
n.nvmlInit()
def ask(fn, *a):
    try:
        v = fn(*a)
        return v if isinstance(v, (int, str, list)) else {k: getattr(v, k) for k, *_ in v._fields_}
    except n.NVMLError as e:
        return type(e).__name__
out = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    out.append({
        "fans": ask(n.nvmlDeviceGetNumFans, h),
        "margin": ask(n.nvmlDeviceGetMarginTemperature, h),
        "gsp": ask(n.nvmlDeviceGetGspFirmwareMode, h),
        "histogram": ask(n.nvmlDeviceGetRowRemapperHistogram, h),
        "retired": ask(n.nvmlDeviceGetRetiredPages, h, 0),
        "mem_clocks": ask(n.nvmlDeviceGetSupportedMemoryClocks, h),
        "shutdown": ask(n.nvmlDeviceGetTemperatureThreshold, h, 0),
        "reasons": ask(n.nvmlDeviceGetSupportedClocksEventReasons, h),
        "events": ask(n.nvmlDeviceGetSupportedEventTypes, h),
        "bus": ask(n.nvmlDeviceGetBusType, h),
    })
print(json.dumps(out))
"""


def test_board_facts_follow_the_profile_and_the_generation(native: NativeEnv) -> None:
    """What a real H200 answers (tests/data/gpu/h200/nvml.json) for a Hopper board, and what the other boards of
    the test catalog answer by their generation (Ampere A100, Ada L4 and RTX 4090) and profile."""
    out = native.python(BOARD_FACTS, devices="h100,a100,l4-24gb,rtx4090")
    assert out.returncode == 0, out.stderr
    h100, a100, l4, rtx = json.loads(out.stdout)
    assert h100["fans"] == a100["fans"] == l4["fans"] == 0 and rtx["fans"] > 0  # a fanless board counts none
    assert h100["histogram"]["max"] == 2560                                    # the H100 capture's banks
    assert a100["histogram"] == "NVMLError_NotSupported"                        # no bank count measured
    assert rtx["histogram"] == rtx["retired"] == "NVMLError_NotSupported"       # no ECC
    assert h100["retired"] == a100["retired"] == l4["retired"] == "NVMLError_NotSupported"  # rows are remapped
    assert h100["mem_clocks"] == [2619, 1593] and a100["mem_clocks"] == [1593]
    assert isinstance(h100["margin"], int) and isinstance(l4["margin"], int)    # T.Limit from Ada on
    assert a100["margin"] == "NVMLError_NotSupported"
    assert h100["gsp"] == [1, 1] and h100["reasons"] == 0x1FF and h100["bus"] == 2
    assert h100["events"] == 65439 and rtx["events"] & 0x3 == 0                 # no ECC events without ECC
