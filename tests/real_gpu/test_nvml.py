"""NVML under the fake against a real H200's: tools/gpu_capture/nvml_dump.py, run as capture.sh ran it, diffed key by
key with tests/data/gpu/h200/nvml.json.

Every answer of the real board must come back the same, unless a key below says why it may not: the VM the capture
ran in (bus id, pass-through, CPU affinity, NVLink hidden), that one board (serial, UUID, VBIOS, InfoROM, part
number), the moment (timestamps, energy, readings of a board at work), or a part of NVML FakeGPU does not model yet
(each named, so the list shrinks as it is done). The driver version is the capture's (FAKEGPU_DRIVER_VERSION), so
what derives from it (NVML's version, the GSP firmware's, the driver branch) is compared too.
"""

from __future__ import annotations

import fnmatch

import pytest

from tests.real_gpu.conftest import TOOLS, fake_json, real

pytestmark = pytest.mark.native

REAL = real("nvml.json")
DRIVER = REAL["SystemDriverVersion"]

# Keys of the document's top level whose answers may differ, and why.
TOP_SKIP = {
    "SystemTopologyGpuSet": "the topology of one VM's single GPU; the fake's CPU set is this machine's",
}

# Per-device keys whose answers may differ, and why; a key may be a shell pattern ("Clock.*.CURRENT").
BOARD_SKIP = {
    # What belongs to the capture's VM, not to the board (tests/data/gpu/h200/README.md).
    "PciInfo": "the VM's bus id (00:06.0)", "PciInfo_v3": "the VM's bus id",
    "VirtualizationMode": "pass-through is the VM's", "CpuAffinity": "the VM's 16 vCPUs",
    "MemoryAffinity": "the VM's NUMA layout", "DisplayMode": "a VM's display emulation",
    "IrqNum": "the VM's interrupt line", "NvLink*": "the VM hides NVLink",
    "BoardId": "the VM's PCI slot shapes the board id",
    "TopologyNearestGpus.SYSTEM": "a one-GPU VM",
    "ModuleId": "the SXM slot the VM was given (3); the fake numbers boards from 1",
    # That one board: its identity, not its model's.
    "Serial": "that board's", "UUID": "that board's", "BoardPartNumber": "that SKU's",
    "VbiosVersion": "that board's VBIOS", "InforomImageVersion": "that board's InfoROM",
    "InforomConfigurationChecksum": "that board's InfoROM",
    # The moment: readings of a board that had just run the capture's earlier steps.
    "PowerUsage": "a reading", "TotalEnergyConsumption": "energy since the driver loaded",
    "Temperature.GPU": "a reading", "PcieThroughput*": "a reading",
    "MarginTemperature": "T.Limit less a reading (test_margin_is_below_tlimit)",
    "ViolationStatus.*": "timestamps and time spent throttled since the driver loaded",
    "EncoderUtilization": "the sampling period, a reading", "DecoderUtilization": "the sampling period",
    "JpgUtilization": "the sampling period", "OfaUtilization": "the sampling period",
    "BAR1MemoryInfo": "BAR1 the driver and the earlier steps mapped",
    # The telemetry load model (native/nvml/model.c) is compared by tests/real_gpu/test_telemetry*.
    "ClockInfo.*": "the load model's clocks", "Clock.*.CURRENT": "the load model's clocks",
    "CurrentClockFreqs": "the load model's clocks", "PerformanceModes": "the load model's clocks",
    "CurrentClocksEventReasons": "the load model's", "CurrentClocksThrottleReasons": "the load model's",
    "Samples.*": "NVML's sample buffers are not modelled",
    "ProcessUtilization": "NVML's sample buffers are not modelled",
    # Not modelled yet, each a gap to close.
    "FieldValues": "only the fields nvidia-smi reads are modelled (test_field_values_the_fake_gives)",
    "AdaptiveClockInfoStatus": "not modelled yet", "MemClkMinMaxVfOffset": "not modelled yet",
    "GpcClkMinMaxVfOffset": "not modelled yet", "SupportedPerformanceStates": "not modelled yet",
    "NumaNodeId": "the VM has no NUMA node for it (NOT_SUPPORTED); the fake answers node 0",
    "LastBBXFlushTime": "not modelled yet",
}


def skipped(key: str, table: dict[str, str]) -> bool:
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in table)


@pytest.fixture(scope="module")
def fake(native_libs, torch211) -> dict:
    return fake_json([torch211, str(TOOLS / "nvml_dump.py")], env={"FAKEGPU_DRIVER_VERSION": DRIVER})


def test_error_strings_are_driver_580s(fake):
    assert fake["ErrorStrings"] == REAL["ErrorStrings"]


def test_memory_info_as_the_board_gave_it(fake):
    """No process: v1 counts the reservation as used, v2 shows it apart; what is free is CUDA's whole total."""
    d, r = fake["devices"][0], REAL["devices"][0]
    assert d["MemoryInfo"] == r["MemoryInfo"]
    assert d["MemoryInfo_v2"] == r["MemoryInfo_v2"]
    assert d["MemoryInfo_v2"]["free"] == real("driver.json")["total_mem"]  # cuDeviceTotalMem on that board


def normalised(key: str, value):
    """An answer with what may legitimately differ taken out."""
    if key == "MigProfiles":
        # Driver 580 hands the profile info back with version 0 though pynvml asks with version 2; the fake
        # echoes 2. No client reads the field back.
        return {p: {**e, "info": {k: v for k, v in e["info"].items() if k != "version"}} if "info" in e else e
                for p, e in value.items()}
    return value


def test_every_board_answer_matches(fake):
    d, r = fake["devices"][0], REAL["devices"][0]
    wrong = {k: (r[k], d.get(k)) for k in r
             if not skipped(k, BOARD_SKIP) and normalised(k, d.get(k)) != normalised(k, r[k])}
    assert not wrong, "\n".join(f"{k}: real {a!r}, fake {b!r}" for k, (a, b) in sorted(wrong.items()))


def test_every_system_answer_matches(fake):
    keys = [k for k in REAL if k not in ("devices", "ErrorStrings") and not skipped(k, TOP_SKIP)]
    wrong = {k: (REAL[k], fake.get(k)) for k in keys if fake.get(k) != REAL[k]}
    assert not wrong, "\n".join(f"{k}: real {a!r}, fake {b!r}" for k, (a, b) in sorted(wrong.items()))


def test_margin_is_below_tlimit(fake):
    """The margin is how far the GPU runs below its max operating temperature, on the real board as on the fake."""
    for doc in (REAL, fake):
        d = doc["devices"][0]
        assert d["MarginTemperature"] == d["TemperatureThreshold.GPU_MAX"] - d["Temperature.GPU"]


def test_field_values_the_fake_gives(fake):
    """The fields the fake answers (those nvidia-smi's reports read) hold what the real board held."""
    real_fields, fake_fields = REAL["devices"][0]["FieldValues"], fake["devices"][0]["FieldValues"]
    answered = [k for k, v in fake_fields.items() if not isinstance(v, dict)]
    assert {"1", "2", "74", "142", "230", "269", "301"} <= set(answered)
    # 78: time held below application clocks for low utilization since the driver loaded, a reading
    assert {k: (real_fields[k], fake_fields[k]) for k in answered if k != "78" and real_fields[k] != fake_fields[k]} \
        == {}
