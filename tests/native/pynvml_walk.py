"""Walk every device and every NVML query the issue lists with real pynvml; print one JSON document.

Run in a subprocess with libnvidia-ml.so.1 on LD_LIBRARY_PATH (pynvml dlopens it by that name). Each query
records its value, or the NVMLError class it raised.
"""

from __future__ import annotations

import json
import sys
from ctypes import Array, c_uint

import pynvml as n


def call(fn, *args):
    try:
        value = fn(*args)
    except n.NVMLError as exc:
        return {"error": type(exc).__name__}
    return {"value": jsonable(value)}


def jsonable(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, (list, tuple, Array)):
        return [jsonable(v) for v in value]
    if type(value).__name__ == "nvmlFriendlyObject":
        return {k: jsonable(v) for k, v in vars(value).items()}
    if hasattr(value, "_fields_"):
        return {name: jsonable(getattr(value, name)) for name, *_ in value._fields_}
    return value


# pynvml defines NVML_P2P_CAPS_INDEX_* as one-element tuples (a stray comma), so the indices are spelled
# out: READ is 0, NVLINK is 2.
def device_queries(h, other):
    q = {
        "name": (n.nvmlDeviceGetName, h),
        "uuid": (n.nvmlDeviceGetUUID, h),
        "serial": (n.nvmlDeviceGetSerial, h),
        "board_part_number": (n.nvmlDeviceGetBoardPartNumber, h),
        "brand": (n.nvmlDeviceGetBrand, h),
        "architecture": (n.nvmlDeviceGetArchitecture, h),
        "cuda_cc": (n.nvmlDeviceGetCudaComputeCapability, h),
        "minor_number": (n.nvmlDeviceGetMinorNumber, h),
        "index": (n.nvmlDeviceGetIndex, h),
        "pci": (n.nvmlDeviceGetPciInfo, h),
        "pci_v3": (n.nvmlDeviceGetPciInfo_v3, h),
        "memory": (n.nvmlDeviceGetMemoryInfo, h),
        "memory_v2": (n.nvmlDeviceGetMemoryInfo, h, n.nvmlMemory_v2),
        "bar1": (n.nvmlDeviceGetBAR1MemoryInfo, h),
        "utilization": (n.nvmlDeviceGetUtilizationRates, h),
        "temperature": (n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
        "temp_shutdown": (n.nvmlDeviceGetTemperatureThreshold, h, n.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
        "temp_slowdown": (n.nvmlDeviceGetTemperatureThreshold, h, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        "fan_speed": (n.nvmlDeviceGetFanSpeed, h),
        "fan_speed_v2": (n.nvmlDeviceGetFanSpeed_v2, h, 0),
        "num_fans": (n.nvmlDeviceGetNumFans, h),
        "power_usage": (n.nvmlDeviceGetPowerUsage, h),
        "power_limit": (n.nvmlDeviceGetPowerManagementLimit, h),
        "power_default_limit": (n.nvmlDeviceGetPowerManagementDefaultLimit, h),
        "power_constraints": (n.nvmlDeviceGetPowerManagementLimitConstraints, h),
        "power_enforced": (n.nvmlDeviceGetEnforcedPowerLimit, h),
        "energy": (n.nvmlDeviceGetTotalEnergyConsumption, h),
        "clock_sm": (n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM),
        "clock_mem": (n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM),
        "max_clock_sm": (n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_SM),
        "max_clock_mem": (n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_MEM),
        "app_clock_sm": (n.nvmlDeviceGetApplicationsClock, h, n.NVML_CLOCK_SM),
        "default_app_clock_sm": (n.nvmlDeviceGetDefaultApplicationsClock, h, n.NVML_CLOCK_SM),
        "clock_by_id": (n.nvmlDeviceGetClock, h, n.NVML_CLOCK_SM, n.NVML_CLOCK_ID_CUSTOMER_BOOST_MAX),
        "perf_state": (n.nvmlDeviceGetPerformanceState, h),
        "power_state": (n.nvmlDeviceGetPowerState, h),
        "throttle_reasons": (n.nvmlDeviceGetCurrentClocksThrottleReasons, h),
        "event_reasons": (n.nvmlDeviceGetCurrentClocksEventReasons, h),
        "supported_throttle": (n.nvmlDeviceGetSupportedClocksThrottleReasons, h),
        "compute_mode": (n.nvmlDeviceGetComputeMode, h),
        "persistence_mode": (n.nvmlDeviceGetPersistenceMode, h),
        "display_mode": (n.nvmlDeviceGetDisplayMode, h),
        "display_active": (n.nvmlDeviceGetDisplayActive, h),
        "ecc_mode": (n.nvmlDeviceGetEccMode, h),
        "ecc_total": (n.nvmlDeviceGetTotalEccErrors, h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC),
        "ecc_detailed": (n.nvmlDeviceGetDetailedEccErrors, h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                         n.NVML_AGGREGATE_ECC),
        "retired_pages": (n.nvmlDeviceGetRetiredPages, h, n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
        "retired_pending": (n.nvmlDeviceGetRetiredPagesPendingStatus, h),
        "remapped_rows": (n.nvmlDeviceGetRemappedRows, h),
        "mig_mode": (n.nvmlDeviceGetMigMode, h),
        "compute_procs": (n.nvmlDeviceGetComputeRunningProcesses, h),
        "compute_procs_v2": (n.nvmlDeviceGetComputeRunningProcesses_v2, h),
        "compute_procs_v3": (n.nvmlDeviceGetComputeRunningProcesses_v3, h),
        "graphics_procs": (n.nvmlDeviceGetGraphicsRunningProcesses, h),
        "graphics_procs_v2": (n.nvmlDeviceGetGraphicsRunningProcesses_v2, h),
        "graphics_procs_v3": (n.nvmlDeviceGetGraphicsRunningProcesses_v3, h),
        "process_utilization": (n.nvmlDeviceGetProcessUtilization, h, 0),
        "nvlink_state": (n.nvmlDeviceGetNvLinkState, h, 0),
        "nvlink_version": (n.nvmlDeviceGetNvLinkVersion, h, 0),
        "nvlink_capability": (n.nvmlDeviceGetNvLinkCapability, h, 0, n.NVML_NVLINK_CAP_P2P_SUPPORTED),
        "nvlink_remote_pci": (n.nvmlDeviceGetNvLinkRemotePciInfo, h, 0),
        "topology": (n.nvmlDeviceGetTopologyCommonAncestor, h, other),
        "p2p_read": (n.nvmlDeviceGetP2PStatus, h, other, c_uint(0)),
        "p2p_nvlink": (n.nvmlDeviceGetP2PStatus, h, other, c_uint(2)),
        "cpu_affinity": (n.nvmlDeviceGetCpuAffinity, h, 2),
        "memory_affinity": (n.nvmlDeviceGetMemoryAffinity, h, 1, n.NVML_AFFINITY_SCOPE_NODE),
        "vbios": (n.nvmlDeviceGetVbiosVersion, h),
        "inforom_image": (n.nvmlDeviceGetInforomImageVersion, h),
        "inforom_oem": (n.nvmlDeviceGetInforomVersion, h, n.NVML_INFOROM_OEM),
        "pcie_gen": (n.nvmlDeviceGetCurrPcieLinkGeneration, h),
        "pcie_max_gen": (n.nvmlDeviceGetMaxPcieLinkGeneration, h),
        "pcie_width": (n.nvmlDeviceGetCurrPcieLinkWidth, h),
        "pcie_max_width": (n.nvmlDeviceGetMaxPcieLinkWidth, h),
        "pcie_tx": (n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_TX_BYTES),
        "pcie_rx": (n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_RX_BYTES),
        "encoder_util": (n.nvmlDeviceGetEncoderUtilization, h),
        "decoder_util": (n.nvmlDeviceGetDecoderUtilization, h),
        "supported_events": (n.nvmlDeviceGetSupportedEventTypes, h),
    }
    return {key: call(*spec) for key, spec in q.items()}


def main() -> None:
    n.nvmlInit()
    out = {
        "driver": call(n.nvmlSystemGetDriverVersion),
        "nvml": call(n.nvmlSystemGetNVMLVersion),
        "cuda": call(n.nvmlSystemGetCudaDriverVersion),
        "cuda_v2": call(n.nvmlSystemGetCudaDriverVersion_v2),
        "count": call(n.nvmlDeviceGetCount),
        "devices": [],
    }
    count = n.nvmlDeviceGetCount()
    handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    for i, h in enumerate(handles):
        d = device_queries(h, handles[(i + 1) % count])
        uuid, serial = n.nvmlDeviceGetUUID(h), n.nvmlDeviceGetSerial(h)
        bus = n.nvmlDeviceGetPciInfo(h).busId
        d["by_uuid"] = {"value": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID(uuid))}
        d["by_serial"] = {"value": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleBySerial(serial))}
        d["by_bus_id"] = {"value": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByPciBusId(bus))}
        out["devices"].append(d)
    events = n.nvmlEventSetCreate()
    n.nvmlDeviceRegisterEvents(handles[0], n.nvmlEventTypeXidCriticalError, events)
    out["event_wait"] = call(n.nvmlEventSetWait, events, 10)
    n.nvmlEventSetFree(events)
    out["process_name"] = call(n.nvmlSystemGetProcessName, int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    n.nvmlShutdown()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
