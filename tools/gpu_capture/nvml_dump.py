"""Every NVML answer a monitoring client asks for, as one JSON document: value or the error NVML gave.

Run by capture.sh on a real GPU and under `fakegpu run`; the two documents diff key by key. Uses nvidia-ml-py
(pynvml) as clients do, so the calls are the ones nvitop, gpustat and dcgm-exporter make.
"""

from __future__ import annotations

import ctypes
import json
import sys

import pynvml as N


def plain(v):
    """pynvml's answers (ctypes structures, arrays, bytes, lists of them) as JSON values."""
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, (list, tuple)) or isinstance(v, ctypes.Array):
        return [plain(x) for x in v]
    if isinstance(v, ctypes.Structure) or isinstance(v, ctypes.Union):
        return {name: plain(getattr(v, name)) for name, *_ in v._fields_}
    if isinstance(v, ctypes._SimpleCData):
        return plain(v.value)
    if hasattr(v, "__dict__") and not isinstance(v, type):
        return {k: plain(x) for k, x in vars(v).items() if not k.startswith("_")}
    return v


def ask(fn_name: str, *args):
    fn = getattr(N, fn_name, None)
    if fn is None:
        return {"missing": fn_name}
    try:
        return plain(fn(*args))
    except N.NVMLError as exc:
        return {"error": str(exc), "code": exc.value}
    except Exception as exc:  # a binding that does not match the library: say so, keep going
        return {"exception": f"{type(exc).__name__}: {exc}"}


def field_values(h) -> dict:
    """nvmlDeviceGetFieldValues over every field id: the widest single sweep NVML offers."""
    out = {}
    ids = list(range(1, getattr(N, "NVML_FI_MAX", 300) + 20))
    try:
        vals = N.nvmlDeviceGetFieldValues(h, ids)
    except N.NVMLError as exc:
        return {"error": str(exc)}
    kinds = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    for v in vals:
        if v.nvmlReturn == 0:
            out[str(v.fieldId)] = getattr(v.value, kinds.get(v.valueType, "ullVal"))
        else:
            out[str(v.fieldId)] = {"error": v.nvmlReturn}
    return out


def mig_profiles(h) -> dict:
    out = {}
    for p in range(0, 16):
        info = ask("nvmlDeviceGetGpuInstanceProfileInfo", h, p)
        if isinstance(info, dict) and ("error" in info or "exception" in info):
            out[str(p)] = info
            continue
        entry = {"info": info}
        pid = info.get("id")
        try:
            arr = (N.c_nvmlGpuInstancePlacement_t * 16)()
            cnt = ctypes.c_uint(16)
            N.nvmlDeviceGetGpuInstancePossiblePlacements(h, pid, arr, ctypes.byref(cnt))
            entry["placements"] = [[arr[i].start, arr[i].size] for i in range(cnt.value)]
        except Exception as exc:
            entry["placements"] = {"error": str(exc)}
        entry["remaining"] = ask("nvmlDeviceGetGpuInstanceRemainingCapacity", h, pid)
        out[str(p)] = entry
    return out


def device(i: int) -> dict:
    h = N.nvmlDeviceGetHandleByIndex(i)
    d: dict = {}
    simple = ["Name", "UUID", "Serial", "BoardPartNumber", "VbiosVersion", "InforomImageVersion",
              "InforomConfigurationChecksum", "PciInfo_v3", "PciInfo", "MemoryInfo", "BAR1MemoryInfo",
              "PowerUsage", "PowerManagementLimit", "PowerManagementLimitConstraints", "PowerManagementDefaultLimit",
              "EnforcedPowerLimit", "TotalEnergyConsumption", "PowerState", "PerformanceState",
              "CurrentClocksEventReasons", "SupportedClocksEventReasons", "CurrentClocksThrottleReasons",
              "UtilizationRates", "EncoderUtilization", "DecoderUtilization", "JpgUtilization", "OfaUtilization",
              "ComputeMode", "PersistenceMode", "EccMode", "DefaultEccMode", "RetiredPagesPendingStatus",
              "RemappedRows", "RowRemapperHistogram", "MigMode", "MaxMigDeviceCount", "CurrPcieLinkGeneration",
              "MaxPcieLinkGeneration", "GpuMaxPcieLinkGeneration", "CurrPcieLinkWidth", "MaxPcieLinkWidth",
              "PcieReplayCounter", "PcieLinkMaxSpeed", "PcieSpeed", "CudaComputeCapability", "Architecture",
              "Brand", "NumGpuCores", "MemoryBusWidth", "Index", "MinorNumber", "BoardId", "MultiGpuBoard",
              "DisplayMode", "DisplayActive", "VirtualizationMode", "HostVgpuMode", "GspFirmwareMode",
              "GspFirmwareVersion", "ComputeRunningProcesses", "GraphicsRunningProcesses", "MPSComputeRunningProcesses",
              "AccountingMode", "AccountingBufferSize", "NumFans", "FanSpeed", "BusType", "DynamicPstatesInfo",
              "PowerSource", "AdaptiveClockInfoStatus", "ModuleId", "PlatformInfo", "ConfComputeMemSizeInfo",
              "SupportedEventTypes", "AutoBoostedClocksEnabled", "APIRestriction", "Attributes", "IrqNum",
              "NumaNodeId", "PgpuMetadataString", "EncoderCapacity", "EncoderStats", "FBCStats", "MemClkMinMaxVfOffset",
              "GpcClkMinMaxVfOffset", "GpuFabricInfo", "GpuFabricInfoV", "C2cModeInfoV", "SramEccErrorStatus",
              "TemperatureV", "MarginTemperature", "CoolerInfo", "ClkMonStatus", "PerformanceModes",
              "CurrentClockFreqs", "LastBBXFlushTime", "SupportedPerformanceStates", "MemoryAffinity", "CpuAffinity"]
    for name in simple:
        args = {"MemoryAffinity": (h, 2, 0), "CpuAffinity": (h, 2)}.get(name, (h,))
        d[name] = ask("nvmlDeviceGet" + name, *args)
    d["MemoryInfo_v2"] = ask("nvmlDeviceGetMemoryInfo", h, getattr(N, "nvmlMemory_v2", 0x02000028))
    for cname, c in (("GRAPHICS", 0), ("SM", 1), ("MEM", 2), ("VIDEO", 3)):
        d[f"ClockInfo.{cname}"] = ask("nvmlDeviceGetClockInfo", h, c)
        d[f"MaxClockInfo.{cname}"] = ask("nvmlDeviceGetMaxClockInfo", h, c)
        d[f"ApplicationsClock.{cname}"] = ask("nvmlDeviceGetApplicationsClock", h, c)
        d[f"DefaultApplicationsClock.{cname}"] = ask("nvmlDeviceGetDefaultApplicationsClock", h, c)
        d[f"MaxCustomerBoostClock.{cname}"] = ask("nvmlDeviceGetMaxCustomerBoostClock", h, c)
        for kind, k in (("CURRENT", 0), ("APP_TARGET", 1), ("APP_DEFAULT", 2), ("BOOST", 3)):
            d[f"Clock.{cname}.{kind}"] = ask("nvmlDeviceGetClock", h, c, k)
    mem_clocks = ask("nvmlDeviceGetSupportedMemoryClocks", h)
    d["SupportedMemoryClocks"] = mem_clocks
    if isinstance(mem_clocks, list):
        d["SupportedGraphicsClocks"] = {str(m): ask("nvmlDeviceGetSupportedGraphicsClocks", h, m) for m in mem_clocks}
    for tname, t in (("SHUTDOWN", 0), ("SLOWDOWN", 1), ("MEM_MAX", 2), ("GPU_MAX", 3), ("ACOUSTIC_MIN", 4),
                     ("ACOUSTIC_CURR", 5), ("ACOUSTIC_MAX", 6), ("GPS_CURR", 7)):
        d[f"TemperatureThreshold.{tname}"] = ask("nvmlDeviceGetTemperatureThreshold", h, t)
    d["Temperature.GPU"] = ask("nvmlDeviceGetTemperature", h, 0)
    for et, e in (("CORRECTED", 0), ("UNCORRECTED", 1)):
        for ct, c in (("VOLATILE", 0), ("AGGREGATE", 1)):
            d[f"TotalEccErrors.{et}.{ct}"] = ask("nvmlDeviceGetTotalEccErrors", h, e, c)
            d[f"DetailedEccErrors.{et}.{ct}"] = ask("nvmlDeviceGetDetailedEccErrors", h, e, c)
            for loc, l_ in (("L1", 0), ("L2", 1), ("DEVICE_MEMORY", 2), ("REGISTER_FILE", 3), ("TEXTURE", 4),
                            ("SHARED", 5), ("CBU", 6), ("SRAM", 7)):
                d[f"MemoryErrorCounter.{et}.{ct}.{loc}"] = ask("nvmlDeviceGetMemoryErrorCounter", h, e, c, l_)
    for cause, c in (("MULTIPLE_SINGLE_BIT", 0), ("DOUBLE_BIT", 1)):
        d[f"RetiredPages.{cause}"] = ask("nvmlDeviceGetRetiredPages", h, c)
    for ctr, c in (("TX", 0), ("RX", 1)):
        d[f"PcieThroughput.{ctr}"] = ask("nvmlDeviceGetPcieThroughput", h, c)
    for link in range(18):
        d[f"NvLinkState.{link}"] = ask("nvmlDeviceGetNvLinkState", h, link)
        d[f"NvLinkVersion.{link}"] = ask("nvmlDeviceGetNvLinkVersion", h, link)
        d[f"NvLinkRemotePciInfo.{link}"] = ask("nvmlDeviceGetNvLinkRemotePciInfo", h, link)
        d[f"NvLinkRemoteDeviceType.{link}"] = ask("nvmlDeviceGetNvLinkRemoteDeviceType", h, link)
        for cap in range(6):
            d[f"NvLinkCapability.{link}.{cap}"] = ask("nvmlDeviceGetNvLinkCapability", h, link, cap)
    for st, s in (("GPU", 0), ("MEMORY", 1), ("ENC", 2), ("DEC", 3), ("PROCESSOR_CLK", 4), ("MEMORY_CLK", 5),
                  ("MODULE_POWER", 6), ("JPG", 7), ("OFA", 8), ("TOTAL_POWER", 9)):
        d[f"Samples.{st}"] = ask("nvmlDeviceGetSamples", h, s, 0)
    for pt, p in (("POWER", 0), ("THERMAL", 1), ("SYNC_BOOST", 2), ("BOARD_LIMIT", 3), ("LOW_UTILIZATION", 4),
                  ("RELIABILITY", 5), ("TOTAL_APP_CLOCKS", 6), ("TOTAL_BASE_CLOCKS", 7)):
        d[f"ViolationStatus.{pt}"] = ask("nvmlDeviceGetViolationStatus", h, p)
    d["ProcessUtilization"] = ask("nvmlDeviceGetProcessUtilization", h, 0)
    d["FieldValues"] = field_values(h)
    d["MigProfiles"] = mig_profiles(h)
    d["P2PStatus.self"] = ask("nvmlDeviceGetP2PStatus", h, h, 0)
    d["TopologyNearestGpus.SYSTEM"] = ask("nvmlDeviceGetTopologyNearestGpus", h, 50)
    return d


def main() -> int:
    N.nvmlInit()
    doc: dict = {"binding": getattr(N, "__version__", None)}
    for name in ("DriverVersion", "NVMLVersion", "CudaDriverVersion", "CudaDriverVersion_v2", "DriverBranch",
                 "ConfComputeState", "ConfComputeSettings", "ConfComputeCapabilities", "HicVersion",
                 "TopologyGpuSet"):
        args = (0,) if name == "TopologyGpuSet" else ()
        doc["System" + name] = ask("nvmlSystemGet" + name, *args)
    doc["DeviceCount"] = ask("nvmlDeviceGetCount")
    doc["UnitCount"] = ask("nvmlUnitGetCount")
    doc["ErrorStrings"] = {str(c): ask("nvmlErrorString", c) for c in [*range(30), 999]}
    doc["devices"] = [device(i) for i in range(N.nvmlDeviceGetCount())]
    h = N.nvmlDeviceGetHandleByIndex(0)
    doc["HandleByUUID"] = ask("nvmlDeviceGetHandleByUUID", b"GPU-00000000-0000-0000-0000-000000000000")
    doc["HandleByPciBusId"] = ask("nvmlDeviceGetHandleByPciBusId", b"0000:FF:00.0")
    doc["HandleByIndex.99"] = ask("nvmlDeviceGetHandleByIndex", 99)
    try:
        es = N.nvmlEventSetCreate()
        doc["RegisterEvents.Xid"] = ask("nvmlDeviceRegisterEvents", h, N.nvmlEventTypeXidCriticalError, es)
        doc["EventSetWait.100ms"] = ask("nvmlEventSetWait", es, 100)
        N.nvmlEventSetFree(es)
    except Exception as exc:
        doc["events"] = {"exception": str(exc)}
    N.nvmlShutdown()
    json.dump(doc, sys.stdout, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
