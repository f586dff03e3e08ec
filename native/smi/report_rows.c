/* One GPU's -q report as a table in the order and nesting of a real capture (a real H200's q.txt and qx.txt on
 * driver 580.159.04; tests/data/smi/qx-h100-elements.txt for an H100 on 580.105.08), shared by -q and -q -x.
 * Values come from NVML; an element NVML has no answer for prints N/A, as on real boards for features they lack. */
#include <stdarg.h>
#include <stdio.h>

#include "smi.h"

static nvmlReturn_t put(nvmlReturn_t rc, char *o, unsigned n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static nvmlReturn_t put(nvmlReturn_t rc, char *o, unsigned n, const char *fmt, ...)
{
    if (rc == NVML_SUCCESS) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(o, n, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* Elements FakeGPU's NVML does not model (platform, fabric, confidential computing, field-value counters). */
static nvmlReturn_t na(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)d, (void)arg, (void)o, (void)n;
    return NVML_ERROR_NOT_SUPPORTED;
}

#define STRING_VALUE(name, call)                                                                                  \
    static nvmlReturn_t name(nvmlDevice_t d, int arg, char *o, unsigned n)                                        \
    {                                                                                                             \
        (void)arg;                                                                                                \
        return call(d, o, n);                                                                                     \
    }
STRING_VALUE(v_name, nvmlDeviceGetName)
STRING_VALUE(v_serial, nvmlDeviceGetSerial)
STRING_VALUE(v_uuid, nvmlDeviceGetUUID)
STRING_VALUE(v_vbios, nvmlDeviceGetVbiosVersion)
STRING_VALUE(v_board_part, nvmlDeviceGetBoardPartNumber)
STRING_VALUE(v_inforom_image, nvmlDeviceGetInforomImageVersion)

#define UINT_VALUE(name, call, fmt)                                                                               \
    static nvmlReturn_t name(nvmlDevice_t d, int arg, char *o, unsigned n)                                        \
    {                                                                                                             \
        (void)arg;                                                                                                \
        unsigned v = 0;                                                                                           \
        nvmlReturn_t rc = call(d, &v);                                                                            \
        return put(rc, o, n, fmt, v);                                                                             \
    }
UINT_VALUE(v_minor, nvmlDeviceGetMinorNumber, "%u")
UINT_VALUE(v_board_id, nvmlDeviceGetBoardId, "0x%x")
UINT_VALUE(v_accounting_buffer, nvmlDeviceGetAccountingBufferSize, "%u")
UINT_VALUE(v_module_id, nvmlDeviceGetModuleId, "%u")
UINT_VALUE(v_max_link_gen, nvmlDeviceGetMaxPcieLinkGeneration, "%u")
UINT_VALUE(v_link_gen, nvmlDeviceGetCurrPcieLinkGeneration, "%u")
UINT_VALUE(v_max_device_link_gen, nvmlDeviceGetGpuMaxPcieLinkGeneration, "%u")
UINT_VALUE(v_max_link_width, nvmlDeviceGetMaxPcieLinkWidth, "%ux")
UINT_VALUE(v_link_width, nvmlDeviceGetCurrPcieLinkWidth, "%ux")
UINT_VALUE(v_replay, nvmlDeviceGetPcieReplayCounter, "%u")
UINT_VALUE(v_fan, nvmlDeviceGetFanSpeed, "%u %%")

#define WATTS_VALUE(name, call)                                                                                   \
    static nvmlReturn_t name(nvmlDevice_t d, int arg, char *o, unsigned n)                                        \
    {                                                                                                             \
        (void)arg;                                                                                                \
        unsigned mw = 0;                                                                                          \
        nvmlReturn_t rc = call(d, &mw);                                                                           \
        return put(rc, o, n, "%.2f W", mw / 1000.0);                                                              \
    }
WATTS_VALUE(v_power_draw, nvmlDeviceGetPowerUsage)
WATTS_VALUE(v_enforced_limit, nvmlDeviceGetEnforcedPowerLimit)
WATTS_VALUE(v_requested_limit, nvmlDeviceGetPowerManagementLimit)
WATTS_VALUE(v_default_limit, nvmlDeviceGetPowerManagementDefaultLimit)

/* Engines NVML samples over a period; the period is not reported. */
#define SAMPLED_VALUE(name, call)                                                                                 \
    static nvmlReturn_t name(nvmlDevice_t d, int arg, char *o, unsigned n)                                        \
    {                                                                                                             \
        (void)arg;                                                                                                \
        unsigned v = 0, period_us = 0;                                                                            \
        nvmlReturn_t rc = call(d, &v, &period_us);                                                                \
        return put(rc, o, n, "%u %%", v);                                                                         \
    }
SAMPLED_VALUE(v_encoder_util, nvmlDeviceGetEncoderUtilization)
SAMPLED_VALUE(v_decoder_util, nvmlDeviceGetDecoderUtilization)
SAMPLED_VALUE(v_jpeg_util, nvmlDeviceGetJpgUtilization)
SAMPLED_VALUE(v_ofa_util, nvmlDeviceGetOfaUtilization)

/* arg: the nvmlClockType_t. */
#define CLOCK_VALUE(name, call)                                                                                   \
    static nvmlReturn_t name(nvmlDevice_t d, int arg, char *o, unsigned n)                                        \
    {                                                                                                             \
        unsigned mhz = 0;                                                                                         \
        nvmlReturn_t rc = call(d, (nvmlClockType_t)arg, &mhz);                                                    \
        return put(rc, o, n, "%u MHz", mhz);                                                                      \
    }
CLOCK_VALUE(v_clock, nvmlDeviceGetClockInfo)
CLOCK_VALUE(v_max_clock, nvmlDeviceGetMaxClockInfo)
CLOCK_VALUE(v_app_clock, nvmlDeviceGetApplicationsClock)
CLOCK_VALUE(v_default_app_clock, nvmlDeviceGetDefaultApplicationsClock)
CLOCK_VALUE(v_boost_clock, nvmlDeviceGetMaxCustomerBoostClock)

#define STATE_VALUE(name, call, words)                                                                            \
    static nvmlReturn_t name(nvmlDevice_t d, int arg, char *o, unsigned n)                                        \
    {                                                                                                             \
        (void)arg;                                                                                                \
        nvmlEnableState_t e = NVML_FEATURE_DISABLED;                                                              \
        nvmlReturn_t rc = call(d, &e);                                                                            \
        return put(rc, o, n, "%s", words(e));                                                                     \
    }
/* NVML's "display mode" is whether a display is attached: Display Attached. Driver 580 no longer reports a mode
 * under the old name and says why in its place (a real H200; the H100, B200, L40S and T4 captures in
 * NVIDIA/k8s-test-infra on 580 and 595 too). */
STATE_VALUE(v_display_mode_old, nvmlDeviceGetDisplayMode, smi_enabled)
STATE_VALUE(v_display_attached, nvmlDeviceGetDisplayMode, smi_yes_no)

static nvmlReturn_t v_display_mode(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    return smi_driver_at_least(580, 0, 0) ? NVML_ERROR_DEPRECATED : v_display_mode_old(d, arg, o, n);
}
STATE_VALUE(v_display_active, nvmlDeviceGetDisplayActive, smi_enabled)
STATE_VALUE(v_persistence, nvmlDeviceGetPersistenceMode, smi_enabled)
STATE_VALUE(v_accounting, nvmlDeviceGetAccountingMode, smi_enabled)
STATE_VALUE(v_pages_pending, nvmlDeviceGetRetiredPagesPendingStatus, smi_yes_no)

static nvmlReturn_t v_brand(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)arg;
    nvmlBrandType_t b = NVML_BRAND_UNKNOWN;
    nvmlReturn_t rc = nvmlDeviceGetBrand(d, &b);
    return put(rc, o, n, "%s", smi_brand_name(b));
}

static nvmlReturn_t v_architecture(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)arg;
    nvmlDeviceArchitecture_t a = 0;
    nvmlReturn_t rc = nvmlDeviceGetArchitecture(d, &a);
    return put(rc, o, n, "%s", smi_architecture_name(a));
}

static nvmlReturn_t v_virtualization(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)arg;
    nvmlGpuVirtualizationMode_t m = NVML_GPU_VIRTUALIZATION_MODE_NONE;
    nvmlReturn_t rc = nvmlDeviceGetVirtualizationMode(d, &m);
    return put(rc, o, n, "%s", smi_virtualization_name(m));
}

static nvmlReturn_t v_compute_mode(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)arg;
    nvmlComputeMode_t m = NVML_COMPUTEMODE_DEFAULT;
    nvmlReturn_t rc = nvmlDeviceGetComputeMode(d, &m);
    return put(rc, o, n, "%s", smi_compute_mode_name(m));
}

static nvmlReturn_t v_multigpu(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)arg;
    unsigned multi = 0;
    nvmlReturn_t rc = nvmlDeviceGetMultiGpuBoard(d, &multi);
    return put(rc, o, n, "%s", smi_yes_no(multi));
}

static nvmlReturn_t v_pstate(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)arg;
    nvmlPstates_t p = NVML_PSTATE_UNKNOWN;
    nvmlReturn_t rc = nvmlDeviceGetPerformanceState(d, &p);
    return put(rc, o, n, "P%d", (int)p);
}

/* arg: the nvmlInforomObject_t. */
static nvmlReturn_t v_inforom(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    return nvmlDeviceGetInforomVersion(d, (nvmlInforomObject_t)arg, o, n);
}

/* arg: 0 current, 1 pending. */
static nvmlReturn_t v_mig(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    unsigned mode[2] = {0, 0};
    nvmlReturn_t rc = nvmlDeviceGetMigMode(d, &mode[0], &mode[1]);
    return put(rc, o, n, "%s", smi_enabled(mode[arg]));
}

static nvmlReturn_t v_ecc_mode(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    nvmlEnableState_t mode[2] = {NVML_FEATURE_DISABLED, NVML_FEATURE_DISABLED};
    nvmlReturn_t rc = nvmlDeviceGetEccMode(d, &mode[0], &mode[1]);
    return put(rc, o, n, "%s", smi_enabled(mode[arg]));
}

/* arg: 0 current, 1 default. */
static nvmlReturn_t v_auto_boost(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    nvmlEnableState_t on[2] = {NVML_FEATURE_DISABLED, NVML_FEATURE_DISABLED};
    nvmlReturn_t rc = nvmlDeviceGetAutoBoostedClocksEnabled(d, &on[0], &on[1]);
    return put(rc, o, n, "%s", on[arg] ? "On" : "Off");
}

enum { PCI_BUS, PCI_DEVICE, PCI_DOMAIN, PCI_DEVICE_ID, PCI_BUS_ID, PCI_SUB_SYSTEM_ID };

/* Hex without the 0x the text report adds: the real XML prints them so. */
static nvmlReturn_t v_pci(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    nvmlPciInfo_t p;
    nvmlReturn_t rc = nvmlDeviceGetPciInfo_v3(d, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    switch (arg) {
    case PCI_BUS: return put(rc, o, n, "%02X", p.bus);
    case PCI_DEVICE: return put(rc, o, n, "%02X", p.device);
    case PCI_DOMAIN: return put(rc, o, n, "%04X", p.domain);
    case PCI_DEVICE_ID: return put(rc, o, n, "%08X", p.pciDeviceId);
    case PCI_BUS_ID: return put(rc, o, n, "%s", p.busId);
    default: return put(rc, o, n, "%08X", p.pciSubSystemId);
    }
}

/* arg: 0 base class, 1 sub class. */
static nvmlReturn_t v_pci_class(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    nvmlPciInfoExt_t p = {.version = nvmlPciInfoExt_v1};
    nvmlReturn_t rc = nvmlDeviceGetPciInfoExt(d, &p);
    return put(rc, o, n, "%X", arg ? p.subClass : p.baseClass);
}

/* arg: the nvmlPcieUtilCounter_t. */
static nvmlReturn_t v_pcie_throughput(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    unsigned kbs = 0;
    nvmlReturn_t rc = nvmlDeviceGetPcieThroughput(d, (nvmlPcieUtilCounter_t)arg, &kbs);
    return put(rc, o, n, "%u KB/s", kbs);
}

/* arg: the reason's bit. A reason the board cannot report is N/A rather than "Not Active". */
static nvmlReturn_t v_event_reason(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    unsigned long long now = 0, supported = 0, bit = (unsigned long long)arg;
    nvmlReturn_t rc = nvmlDeviceGetCurrentClocksEventReasons(d, &now);
    if (rc == NVML_SUCCESS)
        rc = nvmlDeviceGetSupportedClocksEventReasons(d, &supported);
    if (rc == NVML_SUCCESS && !(supported & bit))
        rc = NVML_ERROR_NOT_SUPPORTED;
    return put(rc, o, n, "%s", now & bit ? "Active" : "Not Active");
}

/* arg: 0 total, 1 reserved, 2 used, 3 free. */
static nvmlReturn_t v_fb(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    nvmlMemory_v2_t m = {.version = nvmlMemory_v2};
    nvmlReturn_t rc = nvmlDeviceGetMemoryInfo_v2(d, &m);
    unsigned long long bytes[] = {m.total, m.reserved, m.used, m.free};
    return put(rc, o, n, "%llu MiB", smi_mib(bytes[arg]));
}

/* arg: 0 total, 1 used, 2 free. */
static nvmlReturn_t v_bar1(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    nvmlBAR1Memory_t b = {0};
    nvmlReturn_t rc = nvmlDeviceGetBAR1MemoryInfo(d, &b);
    unsigned long long bytes[] = {b.bar1Total, b.bar1Used, b.bar1Free};
    return put(rc, o, n, "%llu MiB", smi_mib(bytes[arg]));
}

/* arg: 0 gpu, 1 memory. */
static nvmlReturn_t v_util(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    nvmlUtilization_t u = {0};
    nvmlReturn_t rc = nvmlDeviceGetUtilizationRates(d, &u);
    return put(rc, o, n, "%u %%", arg ? u.memory : u.gpu);
}

/* arg: 0 sessions, 1 average fps, 2 average latency. */
static nvmlReturn_t v_encoder_stats(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    unsigned s[3] = {0};
    nvmlReturn_t rc = nvmlDeviceGetEncoderStats(d, &s[0], &s[1], &s[2]);
    return put(rc, o, n, "%u", s[arg]);
}

static nvmlReturn_t ecc_count(nvmlDevice_t d, nvmlMemoryErrorType_t type, int counter, nvmlMemoryLocation_t where,
                              char *o, unsigned n)
{
    unsigned long long v = 0;
    nvmlReturn_t rc = nvmlDeviceGetMemoryErrorCounter(d, type, (nvmlEccCounterType_t)counter, where, &v);
    return put(rc, o, n, "%llu", v);
}

/* arg: the nvmlEccCounterType_t (volatile or aggregate). */
static nvmlReturn_t v_sram_corrected(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    return ecc_count(d, NVML_MEMORY_ERROR_TYPE_CORRECTED, arg, NVML_MEMORY_LOCATION_SRAM, o, n);
}

static nvmlReturn_t v_dram_corrected(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    return ecc_count(d, NVML_MEMORY_ERROR_TYPE_CORRECTED, arg, NVML_MEMORY_LOCATION_DRAM, o, n);
}

static nvmlReturn_t v_dram_uncorrected(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    return ecc_count(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, arg, NVML_MEMORY_LOCATION_DRAM, o, n);
}

/* arg: the nvmlPageRetirementCause_t. Asked with no room for addresses, NVML answers the count alone. */
static nvmlReturn_t retired(nvmlDevice_t d, int arg, unsigned *count)
{
    *count = 0;
    nvmlReturn_t rc = nvmlDeviceGetRetiredPages(d, (nvmlPageRetirementCause_t)arg, count, NULL);
    return rc == NVML_ERROR_INSUFFICIENT_SIZE ? NVML_SUCCESS : rc;
}

static nvmlReturn_t v_retired_count(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    unsigned count;
    nvmlReturn_t rc = retired(d, arg, &count);
    return put(rc, o, n, "%u", count);
}

/* Empty where NVML answers: FakeGPU retires no pages, so there are no addresses to list. */
static nvmlReturn_t v_retired_pagelist(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    unsigned count;
    nvmlReturn_t rc = retired(d, arg, &count);
    return put(rc, o, n, "%s", "");
}

/* arg: 0 corrected rows, 1 uncorrected rows, 2 pending, 3 failure, 4 corrected inactive, 5 uncorrected inactive. */
static nvmlReturn_t v_remapped(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    nvmlRemappedRowsInfo_v2_t r = {0};
    nvmlReturn_t rc = nvmlDeviceGetRemappedRows_v2(d, &r);
    unsigned v[6] = {r.corrActiveRemaps, r.uncActiveRemaps, r.bPending, r.bFailureOccurred, r.corrInactiveRemaps,
                     r.uncInactiveRemaps};
    if (arg == 2 || arg == 3)
        return put(rc, o, n, "%s", smi_yes_no(v[arg]));
    return put(rc, o, n, "%u", v[arg]);
}

/* arg: 0 max, 1 high, 2 partial, 3 low, 4 none. */
static nvmlReturn_t v_histogram(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    nvmlRowRemapperHistogramValues_t h = {0};
    nvmlReturn_t rc = nvmlDeviceGetRowRemapperHistogram(d, &h);
    unsigned v[5] = {h.max, h.high, h.partial, h.low, h.none};
    return put(rc, o, n, "%u bank(s)", v[arg]);
}

static nvmlReturn_t v_gpu_temp(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)arg;
    unsigned t = 0;
    nvmlReturn_t rc = nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &t);
    return put(rc, o, n, "%u C", t);
}

/* Hopper on the 580 driver reports temperatures as margins below T.Limit, the GPU's max operating temperature:
 * the thresholds subtracted from it. arg: a threshold, or -1 for the current temperature (NVML's margin). */
static nvmlReturn_t v_tlimit_margin(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    if (arg < 0) {
        nvmlMarginTemperature_t m = {.version = nvmlMarginTemperature_v1};
        nvmlReturn_t rc = nvmlDeviceGetMarginTemperature(d, &m);
        return put(rc, o, n, "%d C", m.marginTemperature);
    }
    unsigned limit = 0, t = 0;
    nvmlReturn_t rc = nvmlDeviceGetTemperatureThreshold(d, NVML_TEMPERATURE_THRESHOLD_GPU_MAX, &limit);
    if (rc == NVML_SUCCESS)
        rc = nvmlDeviceGetTemperatureThreshold(d, (nvmlTemperatureThresholds_t)arg, &t);
    return put(rc, o, n, "%d C", (int)limit - (int)t);
}

/* Memory's limit measured from itself, so 0 wherever memory has a limit at all. */
static nvmlReturn_t v_mem_tlimit_margin(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)arg;
    unsigned limit = 0;
    nvmlReturn_t rc = nvmlDeviceGetTemperatureThreshold(d, NVML_TEMPERATURE_THRESHOLD_MEM_MAX, &limit);
    return put(rc, o, n, "%d C", (int)limit - (int)limit);
}

/* arg: 0 min, 1 max. */
static nvmlReturn_t v_power_range(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    unsigned mw[2] = {0, 0};
    nvmlReturn_t rc = nvmlDeviceGetPowerManagementLimitConstraints(d, &mw[0], &mw[1]);
    return put(rc, o, n, "%.2f W", mw[arg] / 1000.0);
}

static nvmlReturn_t v_addressing(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)arg;
    static const char *const modes[] = {"None", "HMM", "ATS"};
    nvmlDeviceAddressingMode_t m = {.version = nvmlDeviceAddressingMode_v1};
    nvmlReturn_t rc = nvmlDeviceGetAddressingMode(d, &m);
    return put(rc, o, n, "%s", m.value < 3 ? modes[m.value] : "N/A");
}

static nvmlReturn_t v_c2c(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)arg;
    nvmlC2cModeInfo_v1_t c = {0};
    nvmlReturn_t rc = nvmlDeviceGetC2cModeInfoV(d, &c);
    return put(rc, o, n, "%s", smi_enabled(c.isC2cEnabled));
}

static nvmlReturn_t v_gsp_version(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)arg;
    char v[NVML_GSP_FIRMWARE_VERSION_BUF_SIZE] = "";
    nvmlReturn_t rc = nvmlDeviceGetGspFirmwareVersion(d, v);
    return put(rc, o, n, "%s", v);
}

/* One NVML field value (nvmlDeviceGetFieldValues): the call's own answer, or the field's. */
static nvmlReturn_t field(nvmlDevice_t d, unsigned id, nvmlFieldValue_t *f)
{
    *f = (nvmlFieldValue_t){.fieldId = id};
    nvmlReturn_t rc = nvmlDeviceGetFieldValues(d, 1, f);
    return rc == NVML_SUCCESS ? f->nvmlReturn : rc;
}

static nvmlReturn_t v_replay_rollovers(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)arg;
    nvmlFieldValue_t f;
    nvmlReturn_t rc = field(d, NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER, &f);
    return put(rc, o, n, "%u", f.value.uiVal);
}

static nvmlReturn_t v_recovery(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)arg;
    static const char *const actions[] = {"None", "Reset", "Reboot", "Drain P2P", "Drain and Reset"};
    nvmlFieldValue_t f;
    nvmlReturn_t rc = field(d, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, &f);
    return put(rc, o, n, "%s", f.value.uiVal < 5 ? actions[f.value.uiVal] : "N/A");
}

/* arg: the field of a clock-event counter (ns), printed in us. */
static nvmlReturn_t v_event_counter(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    nvmlFieldValue_t f;
    nvmlReturn_t rc = field(d, (unsigned)arg, &f);
    return put(rc, o, n, "%llu us", f.value.ullVal / 1000);
}

/* Hopper's sparse operation mode: Disabled on the H100 and H200 captures, N/A on every other board captured. */
static nvmlReturn_t v_sparse(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)arg;
    nvmlDeviceArchitecture_t a = 0;
    nvmlReturn_t rc = nvmlDeviceGetArchitecture(d, &a);
    if (rc == NVML_SUCCESS && a != NVML_DEVICE_ARCH_HOPPER)
        rc = NVML_ERROR_NOT_SUPPORTED;
    return put(rc, o, n, "Disabled");
}

/* Confidential computing's protected memory; arg: 0 total, 1 used, 2 free. Nothing runs protected. */
static nvmlReturn_t v_cc_protected(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    nvmlConfComputeMemSizeInfo_t m = {0};
    nvmlReturn_t rc = nvmlDeviceGetConfComputeMemSizeInfo(d, &m);
    return put(rc, o, n, "%llu MiB", arg == 1 ? 0 : m.protectedMemSizeKib / 1024);
}

/* arg: 0 sessions, 1 average fps, 2 average latency. */
static nvmlReturn_t v_fbc_stats(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    nvmlFBCStats_t s = {0};
    nvmlReturn_t rc = nvmlDeviceGetFBCStats(d, &s);
    unsigned v[3] = {s.sessionsCount, s.averageFPS, s.averageLatency};
    return put(rc, o, n, "%u", v[arg]);
}

enum { SRAM_VOL_PARITY, SRAM_VOL_SECDED, SRAM_AGG_PARITY, SRAM_AGG_SECDED, SRAM_L2, SRAM_SM, SRAM_MCU, SRAM_PCIE,
       SRAM_OTHER, SRAM_THRESHOLD };

/* arg: one of the SRAM_* counters above. */
static nvmlReturn_t v_sram(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    nvmlEccSramErrorStatus_t s = {.version = nvmlEccSramErrorStatus_v1};
    nvmlReturn_t rc = nvmlDeviceGetSramEccErrorStatus(d, &s);
    unsigned long long v[] = {s.volatileUncParity, s.volatileUncSecDed, s.aggregateUncParity, s.aggregateUncSecDed,
                              s.aggregateUncBucketL2, s.aggregateUncBucketSm, s.aggregateUncBucketMcu,
                              s.aggregateUncBucketPcie, s.aggregateUncBucketOther};
    if (arg == SRAM_THRESHOLD)
        return put(rc, o, n, "%s", smi_yes_no(s.bThresholdExceeded));
    return put(rc, o, n, "%llu", v[arg]);
}

/* arg: 0 channel, 1 TPC. */
static nvmlReturn_t v_repair(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    nvmlRepairStatus_t r = {.version = nvmlRepairStatus_v1};
    nvmlReturn_t rc = nvmlDeviceGetRepairStatus(d, &r);
    return put(rc, o, n, "%s", smi_yes_no(arg ? r.bTpcRepairPending : r.bChannelRepairPending));
}

static nvmlReturn_t v_unrepairable(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)arg;
    nvmlUnrepairableMemoryStatus_v1_t u = {0};
    nvmlReturn_t rc = nvmlDeviceGetUnrepairableMemoryFlag_v1(d, &u);
    return put(rc, o, n, "%s", smi_yes_no(u.bUnrepairableMemory));
}

/* The text report's one line per cause: the count (or N/A where rows are remapped instead). */
static nvmlReturn_t v_retired_text(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    unsigned count;
    nvmlReturn_t rc = retired(d, arg, &count);
    return put(rc, o, n, "%u", count);
}

static nvmlReturn_t v_egm(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)arg;
    nvmlDeviceCapabilities_t c = {.version = nvmlDeviceCapabilities_v1};
    nvmlReturn_t rc = nvmlDeviceGetCapabilities(d, &c);
    return put(rc, o, n, "%s", c.capMask & NVML_DEV_CAP_EGM ? "enabled" : "disabled");
}

/* Boards that report temperatures as margins below T.Limit (Ada and Hopper on); the others report thresholds. */
static int tlimit(nvmlDevice_t d)
{
    nvmlMarginTemperature_t m = {.version = nvmlMarginTemperature_v1};
    return nvmlDeviceGetMarginTemperature(d, &m) == NVML_SUCCESS;
}
static int no_tlimit(nvmlDevice_t d) { return !tlimit(d); }

/* arg: an nvmlTemperatureThresholds_t. */
static nvmlReturn_t v_threshold(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    unsigned t = 0;
    nvmlReturn_t rc = nvmlDeviceGetTemperatureThreshold(d, (nvmlTemperatureThresholds_t)arg, &t);
    return put(rc, o, n, "%u C", t);
}

static void xml_mib(int depth, const char *tag, nvmlReturn_t rc, unsigned long long bytes)
{
    char v[32];
    snprintf(v, sizeof v, "%llu MiB", smi_mib(bytes));
    smi_xml_leaf(depth, tag, rc == NVML_SUCCESS ? v : "N/A");
}

/* v by address: the NVML call that fills it is another argument (see uint_or_na in view_query.c). */
static void xml_uint(int depth, const char *tag, nvmlReturn_t rc, const unsigned *v)
{
    char t[16];
    snprintf(t, sizeof t, "%u", *v);
    smi_xml_leaf(depth, tag, rc == NVML_SUCCESS ? t : "N/A");
}

/* A MIG-mode GPU's <mig_device> elements, in the tree of a 575.57.08 H100 capture (index, instance IDs,
 * device_attributes/shared, fb_memory_usage) plus bar1_memory_usage; "None" otherwise. */
static void t_mig_devices(nvmlDevice_t d, int depth)
{
    nvmlDevice_t migs[16];
    unsigned n = smi_mig_on(d) ? smi_mig_devices(d, migs, 16) : 0, v = 0;
    if (!n) {
        smi_xml_text(depth, "None");
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        nvmlDevice_t m = migs[i];
        smi_xml_open(depth, "mig_device");
        xml_uint(depth + 1, "index", nvmlDeviceGetIndex(m, &v), &v);
        xml_uint(depth + 1, "gpu_instance_id", nvmlDeviceGetGpuInstanceId(m, &v), &v);
        xml_uint(depth + 1, "compute_instance_id", nvmlDeviceGetComputeInstanceId(m, &v), &v);
        nvmlDeviceAttributes_t a = {0};
        nvmlReturn_t rc = nvmlDeviceGetAttributes_v2(m, &a);
        smi_xml_open(depth + 1, "device_attributes");
        smi_xml_open(depth + 2, "shared");
        xml_uint(depth + 3, "multiprocessor_count", rc, &a.multiprocessorCount);
        xml_uint(depth + 3, "copy_engine_count", rc, &a.sharedCopyEngineCount);
        xml_uint(depth + 3, "encoder_count", rc, &a.sharedEncoderCount);
        xml_uint(depth + 3, "decoder_count", rc, &a.sharedDecoderCount);
        xml_uint(depth + 3, "ofa_count", rc, &a.sharedOfaCount);
        xml_uint(depth + 3, "jpg_count", rc, &a.sharedJpegCount);
        smi_xml_close(depth + 2, "shared");
        smi_xml_close(depth + 1, "device_attributes");
        nvmlMemory_v2_t mem = {.version = nvmlMemory_v2};
        rc = nvmlDeviceGetMemoryInfo_v2(m, &mem);
        smi_xml_open(depth + 1, "fb_memory_usage");
        xml_mib(depth + 2, "total", rc, mem.total);
        xml_mib(depth + 2, "reserved", rc, mem.reserved);
        xml_mib(depth + 2, "used", rc, mem.used);
        xml_mib(depth + 2, "free", rc, mem.free);
        smi_xml_close(depth + 1, "fb_memory_usage");
        nvmlBAR1Memory_t b = {0};
        rc = nvmlDeviceGetBAR1MemoryInfo(m, &b);
        smi_xml_open(depth + 1, "bar1_memory_usage");
        xml_mib(depth + 2, "total", rc, b.bar1Total);
        xml_mib(depth + 2, "used", rc, b.bar1Used);
        xml_mib(depth + 2, "free", rc, b.bar1Free);
        smi_xml_close(depth + 1, "bar1_memory_usage");
        smi_xml_close(depth, "mig_device");
    }
}

static void supported_mem_clock(nvmlDevice_t d, unsigned mem_mhz, int depth)
{
    unsigned graphics[512], count = 512;
    char v[32];
    smi_xml_open(depth, "supported_mem_clock");
    snprintf(v, sizeof v, "%u MHz", mem_mhz);
    smi_xml_leaf(depth + 1, "value", v);
    if (nvmlDeviceGetSupportedGraphicsClocks(d, mem_mhz, &count, graphics) != NVML_SUCCESS)
        count = 0;
    for (unsigned i = 0; i < count; i++) {
        snprintf(v, sizeof v, "%u MHz", graphics[i]);
        smi_xml_leaf(depth + 1, "supported_graphics_clock", v);
    }
    smi_xml_close(depth, "supported_mem_clock");
}

static void t_supported_clocks(nvmlDevice_t d, int depth)
{
    unsigned mem[32], count = 32;
    if (nvmlDeviceGetSupportedMemoryClocks(d, &count, mem) != NVML_SUCCESS)
        return;
    for (unsigned i = 0; i < count; i++)
        supported_mem_clock(d, mem[i], depth);
}

/* Compute processes only, with the instance IDs N/A, exactly as the text report lists them. */
static void process_info(const nvmlProcessInfo_t *p, int depth)
{
    char name[256], v[64];
    smi_xml_open(depth, "process_info");
    smi_xml_leaf(depth + 1, "gpu_instance_id", "N/A");
    smi_xml_leaf(depth + 1, "compute_instance_id", "N/A");
    snprintf(v, sizeof v, "%u", p->pid);
    smi_xml_leaf(depth + 1, "pid", v);
    smi_xml_leaf(depth + 1, "type", "C");
    if (nvmlSystemGetProcessName(p->pid, name, sizeof name) != NVML_SUCCESS)
        snprintf(name, sizeof name, "N/A");
    smi_xml_leaf(depth + 1, "process_name", name);
    snprintf(v, sizeof v, "%llu MiB", smi_mib(p->usedGpuMemory));
    smi_xml_leaf(depth + 1, "used_memory", v);
    smi_xml_close(depth, "process_info");
}

static void t_processes(nvmlDevice_t d, int depth)
{
    nvmlProcessInfo_t procs[64];
    unsigned count = 64;
    if (nvmlDeviceGetComputeRunningProcesses_v3(d, &count, procs) != NVML_SUCCESS)
        return;
    for (unsigned i = 0; i < count; i++)
        process_info(&procs[i], depth);
}

#define SECTION(lv, t, l, ...) {.level = lv, .tag = t, .label = l, __VA_ARGS__}
#define VALUE(lv, t, l, fn, a, ...) {.level = lv, .tag = t, .label = l, .value = fn, .arg = a, __VA_ARGS__}
#define NA(lv, t, l, ...) {.level = lv, .tag = t, .label = l, .value = na, __VA_ARGS__}
#define TREE(lv, t, l, xml, txt, ...) {.level = lv, .tag = t, .label = l, .tree = xml, .text = txt, __VA_ARGS__}
/* Elements a real H200 on 580.159.04 prints that an H100 on 580.105.08 does not (qx-h100-elements.txt). */
#define LATE_580 .since = SMI_DRIVER(580, 159, 4)

static const smi_report_row gpu_rows[] = {
    VALUE(0, "product_name", "Product Name", v_name, 0),
    VALUE(0, "product_brand", "Product Brand", v_brand, 0),
    VALUE(0, "product_architecture", "Product Architecture", v_architecture, 0),
    VALUE(0, "display_mode", "Display Mode", v_display_mode, 0),
    VALUE(0, "display_attached", "Display Attached", v_display_attached, 0),
    VALUE(0, "display_active", "Display Active", v_display_active, 0),
    VALUE(0, "persistence_mode", "Persistence Mode", v_persistence, 0),
    VALUE(0, "addressing_mode", "Addressing Mode", v_addressing, 0),
    SECTION(0, "mig_mode", "MIG Mode"),
        VALUE(1, "current_mig", "Current", v_mig, 0),
        VALUE(1, "pending_mig", "Pending", v_mig, 1),
    TREE(0, "mig_devices", "MIG Devices", t_mig_devices, smi_text_mig_devices),
    VALUE(0, "accounting_mode", "Accounting Mode", v_accounting, 0),
    VALUE(0, "accounting_mode_buffer_size", "Accounting Mode Buffer Size", v_accounting_buffer, 0),
    SECTION(0, "driver_model", "Driver Model"), /* Windows only */
        NA(1, "current_dm", "Current"),
        NA(1, "pending_dm", "Pending"),
    VALUE(0, "serial", "Serial Number", v_serial, 0),
    VALUE(0, "uuid", "GPU UUID", v_uuid, 0),
    NA(0, "pdi", "GPU PDI"),
    VALUE(0, "minor_number", "Minor Number", v_minor, 0),
    VALUE(0, "vbios_version", "VBIOS Version", v_vbios, 0),
    VALUE(0, "multigpu_board", "MultiGPU Board", v_multigpu, 0),
    VALUE(0, "board_id", "Board ID", v_board_id, 0),
    VALUE(0, "board_part_number", "Board Part Number", v_board_part, 0),
    NA(0, "gpu_part_number", "GPU Part Number"),
    NA(0, "gpu_fru_part_number", "FRU Part Number"),
    /* The report prints N/A for what NVML's platform info holds outside a rack-scale domain, the module id aside. */
    SECTION(0, "platformInfo", "Platform Info"),
        NA(1, "chassis_serial_number", "Chassis Serial Number"),
        NA(1, "slot_number", "Slot Number"),
        NA(1, "tray_index", "Tray Index"),
        NA(1, "host_id", "Host ID"),
        NA(1, "peer_type", "Peer Type"),
        VALUE(1, "module_id", "Module Id", v_module_id, 0),
        NA(1, "gpu_fabric_guid", "GPU Fabric GUID"),
    SECTION(0, "inforom_version", "Inforom Version"),
        VALUE(1, "img_version", "Image Version", v_inforom_image, 0),
        VALUE(1, "oem_object", "OEM Object", v_inforom, NVML_INFOROM_OEM),
        VALUE(1, "ecc_object", "ECC Object", v_inforom, NVML_INFOROM_ECC),
        VALUE(1, "pwr_object", "Power Management Object", v_inforom, NVML_INFOROM_POWER),
    SECTION(0, "inforom_bbx_flush", "Inforom BBX Object Flush"),
        NA(1, "latest_timestamp", "Latest Timestamp"),
        NA(1, "latest_duration", "Latest Duration"),
    SECTION(0, "gpu_operation_mode", "GPU Operation Mode"),
        NA(1, "current_gom", "Current"),
        NA(1, "pending_gom", "Pending"),
    VALUE(0, "c2c_mode", "GPU C2C Mode", v_c2c, 0),
    SECTION(0, "gpu_virtualization_mode", "GPU Virtualization Mode"),
        VALUE(1, "virtualization_mode", "Virtualization Mode", v_virtualization, 0),
        NA(1, "host_vgpu_mode", "Host VGPU Mode"),
        NA(1, "vgpu_heterogeneous_mode", "vGPU Heterogeneous Mode"),
    VALUE(0, "gpu_recovery_action", "GPU Recovery Action", v_recovery, 0),
    VALUE(0, "gsp_firmware_version", "GSP Firmware Version", v_gsp_version, 0),
    SECTION(0, "ibmnpu", "IBMNPU"),
        NA(1, "relaxed_ordering_mode", "Relaxed Ordering Mode"),
    SECTION(0, "pci", "PCI"),
        VALUE(1, "pci_bus", "Bus", v_pci, PCI_BUS, .flags = SMI_ROW_HEX),
        VALUE(1, "pci_device", "Device", v_pci, PCI_DEVICE, .flags = SMI_ROW_HEX),
        VALUE(1, "pci_domain", "Domain", v_pci, PCI_DOMAIN, .flags = SMI_ROW_HEX),
        VALUE(1, "pci_base_class", "Base Classcode", v_pci_class, 0, .flags = SMI_ROW_HEX),
        VALUE(1, "pci_sub_class", "Sub Classcode", v_pci_class, 1, .flags = SMI_ROW_HEX),
        VALUE(1, "pci_device_id", "Device Id", v_pci, PCI_DEVICE_ID, .flags = SMI_ROW_HEX),
        VALUE(1, "pci_bus_id", "Bus Id", v_pci, PCI_BUS_ID),
        VALUE(1, "pci_sub_system_id", "Sub System Id", v_pci, PCI_SUB_SYSTEM_ID, .flags = SMI_ROW_HEX),
        SECTION(1, "pci_gpu_link_info", "GPU Link Info"),
            SECTION(2, "pcie_gen", "PCIe Generation"),
                VALUE(3, "max_link_gen", "Max", v_max_link_gen, 0),
                VALUE(3, "current_link_gen", "Current", v_link_gen, 0),
                VALUE(3, "device_current_link_gen", "Device Current", v_link_gen, 0),
                VALUE(3, "max_device_link_gen", "Device Max", v_max_device_link_gen, 0),
                NA(3, "max_host_link_gen", "Host Max"),
            SECTION(2, "link_widths", "Link Width"),
                VALUE(3, "max_link_width", "Max", v_max_link_width, 0),
                VALUE(3, "current_link_width", "Current", v_link_width, 0),
        SECTION(1, "pci_bridge_chip", "Bridge Chip"),
            NA(2, "bridge_chip_type", "Type"),
            NA(2, "bridge_chip_fw", "Firmware"),
        VALUE(1, "replay_counter", "Replays Since Reset", v_replay, 0),
        VALUE(1, "replay_rollover_counter", "Replay Number Rollovers", v_replay_rollovers, 0),
        VALUE(1, "tx_util", "Tx Throughput", v_pcie_throughput, NVML_PCIE_UTIL_TX_BYTES),
        VALUE(1, "rx_util", "Rx Throughput", v_pcie_throughput, NVML_PCIE_UTIL_RX_BYTES),
        NA(1, "atomic_caps_outbound", "Atomic Caps Outbound"),
        NA(1, "atomic_caps_inbound", "Atomic Caps Inbound"),
    VALUE(0, "fan_speed", "Fan Speed", v_fan, 0),
    VALUE(0, "performance_state", "Performance State", v_pstate, 0),
    SECTION(0, "clocks_event_reasons", "Clocks Event Reasons"),
        VALUE(1, "clocks_event_reason_gpu_idle", "Idle", v_event_reason, (int)nvmlClocksEventReasonGpuIdle),
        VALUE(1, "clocks_event_reason_applications_clocks_setting", "Applications Clocks Setting", v_event_reason,
              (int)nvmlClocksEventReasonApplicationsClocksSetting),
        VALUE(1, "clocks_event_reason_sw_power_cap", "SW Power Cap", v_event_reason,
              (int)nvmlClocksEventReasonSwPowerCap),
        VALUE(1, "clocks_event_reason_hw_slowdown", "HW Slowdown", v_event_reason,
              (int)nvmlClocksThrottleReasonHwSlowdown),
        /* the text report lists the two kinds of hardware slowdown under HW Slowdown */
        VALUE(1, "clocks_event_reason_hw_thermal_slowdown", "HW Thermal Slowdown", v_event_reason,
              (int)nvmlClocksThrottleReasonHwThermalSlowdown, .flags = SMI_ROW_DEEPER),
        VALUE(1, "clocks_event_reason_hw_power_brake_slowdown", "HW Power Brake Slowdown", v_event_reason,
              (int)nvmlClocksThrottleReasonHwPowerBrakeSlowdown, .flags = SMI_ROW_DEEPER),
        VALUE(1, "clocks_event_reason_sync_boost", "Sync Boost", v_event_reason, (int)nvmlClocksEventReasonSyncBoost),
        VALUE(1, "clocks_event_reason_sw_thermal_slowdown", "SW Thermal Slowdown", v_event_reason,
              (int)nvmlClocksEventReasonSwThermalSlowdown),
        VALUE(1, "clocks_event_reason_display_clocks_setting", "Display Clock Setting", v_event_reason,
              (int)nvmlClocksEventReasonDisplayClockSetting),
    SECTION(0, "clocks_event_reasons_counters", "Clocks Event Reasons Counters"),
        VALUE(1, "clocks_event_reasons_counters_sw_power_cap", "SW Power Capping", v_event_counter,
              NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP),
        VALUE(1, "clocks_event_reasons_counters_sync_boost", "Sync Boost", v_event_counter,
              NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST),
        VALUE(1, "clocks_event_reasons_counters_sw_therm_slowdown", "SW Thermal Slowdown", v_event_counter,
              NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN),
        VALUE(1, "clocks_event_reasons_counters_hw_therm_slowdown", "HW Thermal Slowdown", v_event_counter,
              NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN),
        VALUE(1, "clocks_event_reasons_counters_hw_power_brake", "HW Power Braking", v_event_counter,
              NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN),
    VALUE(0, "sparse_operation_mode", "Sparse Operation Mode", v_sparse, 0),
    SECTION(0, "fb_memory_usage", "FB Memory Usage"),
        VALUE(1, "total", "Total", v_fb, 0),
        VALUE(1, "reserved", "Reserved", v_fb, 1),
        VALUE(1, "used", "Used", v_fb, 2),
        VALUE(1, "free", "Free", v_fb, 3),
    SECTION(0, "bar1_memory_usage", "BAR1 Memory Usage"),
        VALUE(1, "total", "Total", v_bar1, 0),
        VALUE(1, "used", "Used", v_bar1, 1),
        VALUE(1, "free", "Free", v_bar1, 2),
    SECTION(0, "cc_protected_memory_usage", "Conf Compute Protected Memory Usage"),
        VALUE(1, "total", "Total", v_cc_protected, 0),
        VALUE(1, "used", "Used", v_cc_protected, 1),
        VALUE(1, "free", "Free", v_cc_protected, 2),
    VALUE(0, "compute_mode", "Compute Mode", v_compute_mode, 0),
    SECTION(0, "utilization", "Utilization"),
        VALUE(1, "gpu_util", "GPU", v_util, 0),
        VALUE(1, "memory_util", "Memory", v_util, 1),
        VALUE(1, "encoder_util", "Encoder", v_encoder_util, 0),
        VALUE(1, "decoder_util", "Decoder", v_decoder_util, 0),
        VALUE(1, "jpeg_util", "JPEG", v_jpeg_util, 0),
        VALUE(1, "ofa_util", "OFA", v_ofa_util, 0),
    /* NVML's sample buffers, which -q -d UTILIZATION, POWER and CLOCK summarise; the whole report leaves them out */
    TREE(0, "gpu_utilization_samples", "GPU Utilization Samples", NULL, smi_text_samples, .arg = NVML_GPU_UTILIZATION_SAMPLES,
         .flags = SMI_ROW_TEXT_ONLY | SMI_ROW_ON_REQUEST),
    TREE(0, "memory_utilization_samples", "Memory Utilization Samples", NULL, smi_text_samples,
         .arg = NVML_MEMORY_UTILIZATION_SAMPLES, .flags = SMI_ROW_TEXT_ONLY | SMI_ROW_ON_REQUEST),
    TREE(0, "enc_utilization_samples", "ENC Utilization Samples", NULL, smi_text_samples,
         .arg = NVML_ENC_UTILIZATION_SAMPLES, .flags = SMI_ROW_TEXT_ONLY | SMI_ROW_ON_REQUEST),
    TREE(0, "dec_utilization_samples", "DEC Utilization Samples", NULL, smi_text_samples,
         .arg = NVML_DEC_UTILIZATION_SAMPLES, .flags = SMI_ROW_TEXT_ONLY | SMI_ROW_ON_REQUEST),
    TREE(0, "jpg_utilization_samples", "JPG Utilization Samples", NULL, smi_text_samples,
         .arg = NVML_JPG_UTILIZATION_SAMPLES, .flags = SMI_ROW_TEXT_ONLY | SMI_ROW_ON_REQUEST),
    TREE(0, "ofa_utilization_samples", "OFA Utilization Samples", NULL, smi_text_samples,
         .arg = NVML_OFA_UTILIZATION_SAMPLES, .flags = SMI_ROW_TEXT_ONLY | SMI_ROW_ON_REQUEST),
    SECTION(0, "encoder_stats", "Encoder Stats"),
        VALUE(1, "session_count", "Active Sessions", v_encoder_stats, 0),
        VALUE(1, "average_fps", "Average FPS", v_encoder_stats, 1),
        VALUE(1, "average_latency", "Average Latency", v_encoder_stats, 2),
    SECTION(0, "fbc_stats", "FBC Stats"),
        VALUE(1, "session_count", "Active Sessions", v_fbc_stats, 0),
        VALUE(1, "average_fps", "Average FPS", v_fbc_stats, 1),
        VALUE(1, "average_latency", "Average Latency", v_fbc_stats, 2),
    SECTION(0, "dram_encryption_mode", "DRAM Encryption Mode"),
        NA(1, "current_dram_encryption", "Current"),
        NA(1, "pending_dram_encryption", "Pending"),
    SECTION(0, "ecc_mode", "ECC Mode"),
        VALUE(1, "current_ecc", "Current", v_ecc_mode, 0),
        VALUE(1, "pending_ecc", "Pending", v_ecc_mode, 1),
    SECTION(0, "ecc_errors", "ECC Errors"),
        SECTION(1, "volatile", "Volatile"),
            VALUE(2, "sram_correctable", "SRAM Correctable", v_sram_corrected, NVML_VOLATILE_ECC),
            VALUE(2, "sram_uncorrectable_parity", "SRAM Uncorrectable Parity", v_sram, SRAM_VOL_PARITY),
            VALUE(2, "sram_uncorrectable_secded", "SRAM Uncorrectable SEC-DED", v_sram, SRAM_VOL_SECDED),
            VALUE(2, "dram_correctable", "DRAM Correctable", v_dram_corrected, NVML_VOLATILE_ECC),
            VALUE(2, "dram_uncorrectable", "DRAM Uncorrectable", v_dram_uncorrected, NVML_VOLATILE_ECC),
        SECTION(1, "aggregate", "Aggregate"),
            VALUE(2, "sram_correctable", "SRAM Correctable", v_sram_corrected, NVML_AGGREGATE_ECC),
            VALUE(2, "sram_uncorrectable_parity", "SRAM Uncorrectable Parity", v_sram, SRAM_AGG_PARITY),
            VALUE(2, "sram_uncorrectable_secded", "SRAM Uncorrectable SEC-DED", v_sram, SRAM_AGG_SECDED),
            VALUE(2, "dram_correctable", "DRAM Correctable", v_dram_corrected, NVML_AGGREGATE_ECC),
            VALUE(2, "dram_uncorrectable", "DRAM Uncorrectable", v_dram_uncorrected, NVML_AGGREGATE_ECC),
            VALUE(2, "sram_threshold_exceeded", "SRAM Threshold Exceeded", v_sram, SRAM_THRESHOLD),
        SECTION(1, "aggregate_uncorrectable_sram_sources", "Aggregate Uncorrectable SRAM Sources"),
            VALUE(2, "sram_l2", "SRAM L2", v_sram, SRAM_L2),
            VALUE(2, "sram_sm", "SRAM SM", v_sram, SRAM_SM),
            VALUE(2, "sram_microcontroller", "SRAM Microcontroller", v_sram, SRAM_MCU),
            VALUE(2, "sram_pcie", "SRAM PCIE", v_sram, SRAM_PCIE),
            VALUE(2, "sram_other", "SRAM Other", v_sram, SRAM_OTHER),
        VALUE(1, "channel_repair_pending", "Channel Repair Pending", v_repair, 0),
        VALUE(1, "tpc_repair_pending", "TPC Repair Pending", v_repair, 1),
        VALUE(1, "unrepairable_memory", "Unrepairable Memory", v_unrepairable, 0, LATE_580),
    /* The text report has one line per cause where the XML nests count and page list. */
    SECTION(0, "retired_pages", "Retired Pages"),
        SECTION(1, "multiple_single_bit_retirement", NULL),
            VALUE(2, "retired_count", NULL, v_retired_count, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
            VALUE(2, "retired_pagelist", NULL, v_retired_pagelist,
                  NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
        SECTION(1, "double_bit_retirement", NULL),
            VALUE(2, "retired_count", NULL, v_retired_count, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
            VALUE(2, "retired_pagelist", NULL, v_retired_pagelist, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
        VALUE(1, NULL, "Single Bit ECC", v_retired_text, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
        VALUE(1, NULL, "Double Bit ECC", v_retired_text, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
        VALUE(1, "pending_blacklist", "Pending Page Blacklist", v_pages_pending, 0),
        VALUE(1, "pending_retirement", NULL, v_pages_pending, 0),
    SECTION(0, "remapped_rows", "Remapped Rows"),
        VALUE(1, "remapped_row_corr", "Correctable Error", v_remapped, 0),
        VALUE(1, "remapped_row_corr_inactive", "Inactive Correctable Error", v_remapped, 4, LATE_580),
        VALUE(1, "remapped_row_unc", "Uncorrectable Error", v_remapped, 1),
        VALUE(1, "remapped_row_unc_inactive", "Inactive Uncorrectable Error", v_remapped, 5, LATE_580),
        VALUE(1, "remapped_row_pending", "Pending", v_remapped, 2),
        VALUE(1, "remapped_row_failure", "Remapping Failure Occurred", v_remapped, 3),
        SECTION(1, "row_remapper_histogram", "Bank Remap Availability Histogram"),
            VALUE(2, "row_remapper_histogram_max", "Max", v_histogram, 0),
            VALUE(2, "row_remapper_histogram_high", "High", v_histogram, 1),
            VALUE(2, "row_remapper_histogram_partial", "Partial", v_histogram, 2),
            VALUE(2, "row_remapper_histogram_low", "Low", v_histogram, 3),
            VALUE(2, "row_remapper_histogram_none", "None", v_histogram, 4),
    /* Ada and Hopper on give margins below T.Limit; earlier boards thresholds (the A100 and T4 captures). */
    SECTION(0, "temperature", "Temperature"),
        VALUE(1, "gpu_temp", "GPU Current Temp", v_gpu_temp, 0),
        VALUE(1, "gpu_temp_tlimit", "GPU T.Limit Temp", v_tlimit_margin, -1),
        VALUE(1, "gpu_temp_max_tlimit_threshold", "GPU Shutdown T.Limit Temp", v_tlimit_margin,
              NVML_TEMPERATURE_THRESHOLD_SHUTDOWN, .when = tlimit),
        VALUE(1, "gpu_temp_slow_tlimit_threshold", "GPU Slowdown T.Limit Temp", v_tlimit_margin,
              NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, .when = tlimit),
        VALUE(1, "gpu_temp_max_gpu_tlimit_threshold", "GPU Max Operating T.Limit Temp", v_tlimit_margin,
              NVML_TEMPERATURE_THRESHOLD_GPU_MAX, .when = tlimit),
        VALUE(1, "gpu_temp_max_threshold", "GPU Shutdown Temp", v_threshold, NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
              .when = no_tlimit),
        VALUE(1, "gpu_temp_slow_threshold", "GPU Slowdown Temp", v_threshold, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
              .when = no_tlimit),
        VALUE(1, "gpu_temp_max_gpu_threshold", "GPU Max Operating Temp", v_threshold,
              NVML_TEMPERATURE_THRESHOLD_GPU_MAX, .when = no_tlimit),
        NA(1, "gpu_target_temperature", "GPU Target Temperature"),
        NA(1, "memory_temp", "Memory Current Temp"), /* HBM temperature: not modelled */
        VALUE(1, "gpu_temp_max_mem_tlimit_threshold", "Memory Max Operating T.Limit Temp", v_mem_tlimit_margin, 0,
              .when = tlimit),
        VALUE(1, "gpu_temp_max_mem_threshold", "Memory Max Operating Temp", v_threshold,
              NVML_TEMPERATURE_THRESHOLD_MEM_MAX, .when = no_tlimit),
    SECTION(0, "supported_gpu_target_temp", "Supported GPU Target Temp", .flags = SMI_ROW_ON_REQUEST),
        NA(1, "gpu_target_temp_min", "GPU Target Temp Min"),
        NA(1, "gpu_target_temp_max", "GPU Target Temp Max"),
    SECTION(0, "gpu_power_readings", "GPU Power Readings"),
        VALUE(1, "power_state", NULL, v_pstate, 0),
        /* FakeGPU models one power reading: it is both the average and the instant draw. */
        VALUE(1, "average_power_draw", "Average Power Draw", v_power_draw, 0),
        VALUE(1, "instant_power_draw", "Instantaneous Power Draw", v_power_draw, 0),
        VALUE(1, "current_power_limit", "Current Power Limit", v_enforced_limit, 0),
        VALUE(1, "requested_power_limit", "Requested Power Limit", v_requested_limit, 0),
        VALUE(1, "default_power_limit", "Default Power Limit", v_default_limit, 0),
        VALUE(1, "min_power_limit", "Min Power Limit", v_power_range, 0),
        VALUE(1, "max_power_limit", "Max Power Limit", v_power_range, 1),
    TREE(0, "power_samples", "Power Samples", NULL, smi_text_samples, .arg = NVML_TOTAL_POWER_SAMPLES,
         .flags = SMI_ROW_TEXT_ONLY | SMI_ROW_ON_REQUEST),
    SECTION(0, "gpu_memory_power_readings", "GPU Memory Power Readings "), /* the real title ends in a space */
        NA(1, "average_power_draw", "Average Power Draw"),
        NA(1, "instant_power_draw", "Instantaneous Power Draw"),
    SECTION(0, "module_power_readings", "Module Power Readings"),
        VALUE(1, "power_state", NULL, v_pstate, 0),
        NA(1, "average_power_draw", "Average Power Draw"),
        NA(1, "instant_power_draw", "Instantaneous Power Draw"),
        NA(1, "current_power_limit", "Current Power Limit"),
        NA(1, "requested_power_limit", "Requested Power Limit"),
        NA(1, "default_power_limit", "Default Power Limit"),
        NA(1, "min_power_limit", "Min Power Limit"),
        NA(1, "max_power_limit", "Max Power Limit"),
    NA(0, "power_smoothing", "Power Smoothing"),
    SECTION(0, "power_profiles", "Workload Power Profiles"),
        NA(1, "power_profile_requested_profiles", "Requested Profiles"),
        NA(1, "power_profile_enforced_profiles", "Enforced Profiles"),
    SECTION(0, "clocks", "Clocks"),
        VALUE(1, "graphics_clock", "Graphics", v_clock, NVML_CLOCK_GRAPHICS),
        VALUE(1, "sm_clock", "SM", v_clock, NVML_CLOCK_SM),
        VALUE(1, "mem_clock", "Memory", v_clock, NVML_CLOCK_MEM),
        VALUE(1, "video_clock", "Video", v_clock, NVML_CLOCK_VIDEO),
    SECTION(0, "applications_clocks", "Applications Clocks"),
        VALUE(1, "graphics_clock", "Graphics", v_app_clock, NVML_CLOCK_GRAPHICS),
        VALUE(1, "mem_clock", "Memory", v_app_clock, NVML_CLOCK_MEM),
    SECTION(0, "default_applications_clocks", "Default Applications Clocks"),
        VALUE(1, "graphics_clock", "Graphics", v_default_app_clock, NVML_CLOCK_GRAPHICS),
        VALUE(1, "mem_clock", "Memory", v_default_app_clock, NVML_CLOCK_MEM),
    SECTION(0, "deferred_clocks", "Deferred Clocks"),
        NA(1, "mem_clock", "Memory"),
    SECTION(0, "max_clocks", "Max Clocks"),
        VALUE(1, "graphics_clock", "Graphics", v_max_clock, NVML_CLOCK_GRAPHICS),
        VALUE(1, "sm_clock", "SM", v_max_clock, NVML_CLOCK_SM),
        VALUE(1, "mem_clock", "Memory", v_max_clock, NVML_CLOCK_MEM),
        VALUE(1, "video_clock", "Video", v_max_clock, NVML_CLOCK_VIDEO),
    SECTION(0, "max_customer_boost_clocks", "Max Customer Boost Clocks"),
        VALUE(1, "graphics_clock", "Graphics", v_boost_clock, NVML_CLOCK_GRAPHICS),
    TREE(0, "sm_clock_samples", "SM Clock Samples", NULL, smi_text_samples, .arg = NVML_PROCESSOR_CLK_SAMPLES,
         .flags = SMI_ROW_TEXT_ONLY | SMI_ROW_ON_REQUEST),
    TREE(0, "memory_clock_samples", "Memory Clock Samples", NULL, smi_text_samples, .arg = NVML_MEMORY_CLK_SAMPLES,
         .flags = SMI_ROW_TEXT_ONLY | SMI_ROW_ON_REQUEST),
    SECTION(0, "clock_policy", "Clock Policy"),
        VALUE(1, "auto_boost", "Auto Boost", v_auto_boost, 0),
        VALUE(1, "auto_boost_default", "Auto Boost Default", v_auto_boost, 1),
    SECTION(0, "fabric", "Fabric"),
        NA(1, "state", "State"),
        NA(1, "status", "Status"),
        NA(1, "cliqueId", "CliqueId"),
        NA(1, "clusterUuid", "ClusterUUID"),
        SECTION(1, "health", "Health"),
            NA(2, "summary", "Summary"),
            NA(2, "bandwidth", "Bandwidth"),
            NA(2, "route_recovery_in_progress", "Route Recovery in progress"),
            NA(2, "route_unhealthy", "Route Unhealthy"),
            NA(2, "access_timeout_recovery", "Access Timeout Recovery"),
            NA(2, "incorrect_configuration", "Incorrect Configuration"),
            NA(2, "partition_assigned", "Partition Assigned", LATE_580),
    TREE(0, "supported_clocks", "Supported Clocks", t_supported_clocks, smi_text_supported_clocks,
         .flags = SMI_ROW_ON_REQUEST),
    TREE(0, "processes", "Processes", t_processes, smi_text_processes),
    /* accounting is off: never an entry */
    TREE(0, "accounted_processes", "Accounted Processes", NULL, smi_text_none, .flags = SMI_ROW_ON_REQUEST),
    SECTION(0, "capabilities", "Capabilities"),
        VALUE(1, "egm", "EGM", v_egm, 0),
};

#define N_ROWS (sizeof gpu_rows / sizeof gpu_rows[0])

void smi_report_gpu_xml(nvmlDevice_t d, int depth) { smi_report_xml(d, gpu_rows, N_ROWS, depth); }

void smi_report_gpu_text(nvmlDevice_t d, unsigned mask) { smi_report_text(d, gpu_rows, N_ROWS, mask); }
