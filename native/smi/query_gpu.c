/* --query-gpu=FIELDS and --query-compute-apps=FIELDS with --format=csv[,noheader][,nounits].
 * Fields are a table: canonical name, accepted aliases, unit, and how to read the value. A value that
 * cannot be read prints [N/A], as on real boards. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smi.h"

typedef struct {
    nvmlDevice_t dev;
    unsigned index;
    unsigned count;
} ctx_t;

/* Writes the bare value (no unit) into out; returns 0, or -1 for N/A. */
typedef int (*value_fn)(const ctx_t *c, char *out, size_t len);

typedef struct {
    const char *name;
    const char *alias;
    const char *unit; /* "MiB", "%", "W", "MHz" or NULL */
    value_fn fn;
} field_t;

#define OK(expr) ((expr) == NVML_SUCCESS ? 0 : -1)

static int f_timestamp(const ctx_t *c, char *o, size_t n) { (void)c; smi_now(o, n, 1); return 0; }
static int f_driver(const ctx_t *c, char *o, size_t n) { (void)c; return OK(nvmlSystemGetDriverVersion(o, (unsigned)n)); }
static int f_count(const ctx_t *c, char *o, size_t n) { snprintf(o, n, "%u", c->count); return 0; }
static int f_index(const ctx_t *c, char *o, size_t n) { snprintf(o, n, "%u", c->index); return 0; }
static int f_name(const ctx_t *c, char *o, size_t n) { return OK(nvmlDeviceGetName(c->dev, o, (unsigned)n)); }
static int f_serial(const ctx_t *c, char *o, size_t n) { return OK(nvmlDeviceGetSerial(c->dev, o, (unsigned)n)); }
static int f_uuid(const ctx_t *c, char *o, size_t n) { return OK(nvmlDeviceGetUUID(c->dev, o, (unsigned)n)); }
static int f_vbios(const ctx_t *c, char *o, size_t n) { return OK(nvmlDeviceGetVbiosVersion(c->dev, o, (unsigned)n)); }

static int pci(const ctx_t *c, nvmlPciInfo_t *p) { return OK(nvmlDeviceGetPciInfo_v3(c->dev, p)); }
static int f_bus_id(const ctx_t *c, char *o, size_t n)
{
    nvmlPciInfo_t p;
    if (pci(c, &p))
        return -1;
    snprintf(o, n, "%s", p.busId);
    return 0;
}
#define PCI_FIELD(fn, fmt, expr)                                                                                  \
    static int fn(const ctx_t *c, char *o, size_t n)                                                              \
    {                                                                                                             \
        nvmlPciInfo_t p;                                                                                          \
        if (pci(c, &p))                                                                                           \
            return -1;                                                                                            \
        snprintf(o, n, fmt, expr);                                                                                \
        return 0;                                                                                                 \
    }
PCI_FIELD(f_pci_domain, "0x%04X", p.domain)
PCI_FIELD(f_pci_bus, "0x%02X", p.bus)
PCI_FIELD(f_pci_device, "0x%02X", p.device)
PCI_FIELD(f_pci_device_id, "0x%08X", p.pciDeviceId)
PCI_FIELD(f_pci_sub_id, "0x%08X", p.pciSubSystemId)

#define UINT_FIELD(fn, call)                                                                                      \
    static int fn(const ctx_t *c, char *o, size_t n)                                                              \
    {                                                                                                             \
        unsigned v;                                                                                               \
        if (call != NVML_SUCCESS)                                                                                 \
            return -1;                                                                                            \
        snprintf(o, n, "%u", v);                                                                                  \
        return 0;                                                                                                 \
    }
UINT_FIELD(f_gen_cur, nvmlDeviceGetCurrPcieLinkGeneration(c->dev, &v))
UINT_FIELD(f_gen_max, nvmlDeviceGetMaxPcieLinkGeneration(c->dev, &v))
UINT_FIELD(f_width_cur, nvmlDeviceGetCurrPcieLinkWidth(c->dev, &v))
UINT_FIELD(f_width_max, nvmlDeviceGetMaxPcieLinkWidth(c->dev, &v))
UINT_FIELD(f_fan, nvmlDeviceGetFanSpeed(c->dev, &v))
UINT_FIELD(f_temp, nvmlDeviceGetTemperature(c->dev, NVML_TEMPERATURE_GPU, &v))
UINT_FIELD(f_clk_sm, nvmlDeviceGetClockInfo(c->dev, NVML_CLOCK_SM, &v))
UINT_FIELD(f_clk_gr, nvmlDeviceGetClockInfo(c->dev, NVML_CLOCK_GRAPHICS, &v))
UINT_FIELD(f_clk_mem, nvmlDeviceGetClockInfo(c->dev, NVML_CLOCK_MEM, &v))
UINT_FIELD(f_clk_video, nvmlDeviceGetClockInfo(c->dev, NVML_CLOCK_VIDEO, &v))
UINT_FIELD(f_max_sm, nvmlDeviceGetMaxClockInfo(c->dev, NVML_CLOCK_SM, &v))
UINT_FIELD(f_max_gr, nvmlDeviceGetMaxClockInfo(c->dev, NVML_CLOCK_GRAPHICS, &v))
UINT_FIELD(f_max_mem, nvmlDeviceGetMaxClockInfo(c->dev, NVML_CLOCK_MEM, &v))
UINT_FIELD(f_app_gr, nvmlDeviceGetApplicationsClock(c->dev, NVML_CLOCK_GRAPHICS, &v))
UINT_FIELD(f_app_mem, nvmlDeviceGetApplicationsClock(c->dev, NVML_CLOCK_MEM, &v))

static int util(const ctx_t *c, nvmlUtilization_t *u) { return OK(nvmlDeviceGetUtilizationRates(c->dev, u)); }
static int f_util_gpu(const ctx_t *c, char *o, size_t n)
{
    nvmlUtilization_t u;
    if (util(c, &u))
        return -1;
    snprintf(o, n, "%u", u.gpu);
    return 0;
}
static int f_util_mem(const ctx_t *c, char *o, size_t n)
{
    nvmlUtilization_t u;
    if (util(c, &u))
        return -1;
    snprintf(o, n, "%u", u.memory);
    return 0;
}

static int mem(const ctx_t *c, nvmlMemory_v2_t *m)
{
    m->version = nvmlMemory_v2;
    return OK(nvmlDeviceGetMemoryInfo_v2(c->dev, m));
}
#define MEM_FIELD(fn, member)                                                                                     \
    static int fn(const ctx_t *c, char *o, size_t n)                                                              \
    {                                                                                                             \
        nvmlMemory_v2_t m;                                                                                        \
        if (mem(c, &m))                                                                                           \
            return -1;                                                                                            \
        snprintf(o, n, "%llu", smi_mib(m.member));                                                                \
        return 0;                                                                                                 \
    }
MEM_FIELD(f_mem_total, total)
MEM_FIELD(f_mem_used, used)
MEM_FIELD(f_mem_free, free)
MEM_FIELD(f_mem_reserved, reserved)

#define WATT_FIELD(fn, call)                                                                                      \
    static int fn(const ctx_t *c, char *o, size_t n)                                                              \
    {                                                                                                             \
        unsigned v, lo;                                                                                           \
        (void)lo;                                                                                                 \
        if (call != NVML_SUCCESS)                                                                                 \
            return -1;                                                                                            \
        snprintf(o, n, "%.2f", v / 1000.0);                                                                       \
        return 0;                                                                                                 \
    }
WATT_FIELD(f_power_draw, nvmlDeviceGetPowerUsage(c->dev, &v))
WATT_FIELD(f_power_limit, nvmlDeviceGetPowerManagementLimit(c->dev, &v))
WATT_FIELD(f_power_enforced, nvmlDeviceGetEnforcedPowerLimit(c->dev, &v))
WATT_FIELD(f_power_default, nvmlDeviceGetPowerManagementDefaultLimit(c->dev, &v))
WATT_FIELD(f_power_min, nvmlDeviceGetPowerManagementLimitConstraints(c->dev, &v, &lo))
WATT_FIELD(f_power_max, nvmlDeviceGetPowerManagementLimitConstraints(c->dev, &lo, &v))

static int f_cc(const ctx_t *c, char *o, size_t n)
{
    int major, minor;
    if (nvmlDeviceGetCudaComputeCapability(c->dev, &major, &minor) != NVML_SUCCESS)
        return -1;
    snprintf(o, n, "%d.%d", major, minor);
    return 0;
}

static int enabled(nvmlReturn_t rc, int on, char *o, size_t n)
{
    if (rc != NVML_SUCCESS)
        return -1;
    snprintf(o, n, "%s", on ? "Enabled" : "Disabled");
    return 0;
}
static int f_persistence(const ctx_t *c, char *o, size_t n)
{
    nvmlEnableState_t s = 0;
    nvmlReturn_t rc = nvmlDeviceGetPersistenceMode(c->dev, &s);
    return enabled(rc, s, o, n);
}
static int f_display_mode(const ctx_t *c, char *o, size_t n)
{
    nvmlEnableState_t s = 0;
    nvmlReturn_t rc = nvmlDeviceGetDisplayMode(c->dev, &s);
    return enabled(rc, s, o, n);
}
static int f_display_active(const ctx_t *c, char *o, size_t n)
{
    nvmlEnableState_t s = 0;
    nvmlReturn_t rc = nvmlDeviceGetDisplayActive(c->dev, &s);
    return enabled(rc, s, o, n);
}
static int f_ecc_cur(const ctx_t *c, char *o, size_t n)
{
    nvmlEnableState_t cur = 0, pend = 0;
    nvmlReturn_t rc = nvmlDeviceGetEccMode(c->dev, &cur, &pend);
    return enabled(rc, cur, o, n);
}
static int f_ecc_pend(const ctx_t *c, char *o, size_t n)
{
    nvmlEnableState_t cur = 0, pend = 0;
    nvmlReturn_t rc = nvmlDeviceGetEccMode(c->dev, &cur, &pend);
    return enabled(rc, pend, o, n);
}
static int f_ecc_unc(const ctx_t *c, char *o, size_t n)
{
    unsigned long long v;
    if (nvmlDeviceGetTotalEccErrors(c->dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &v))
        return -1;
    snprintf(o, n, "%llu", v);
    return 0;
}
static int f_mig_cur(const ctx_t *c, char *o, size_t n)
{
    unsigned cur = 0, pend = 0;
    nvmlReturn_t rc = nvmlDeviceGetMigMode(c->dev, &cur, &pend);
    return enabled(rc, cur, o, n);
}
static int f_mig_pend(const ctx_t *c, char *o, size_t n)
{
    unsigned cur = 0, pend = 0;
    nvmlReturn_t rc = nvmlDeviceGetMigMode(c->dev, &cur, &pend);
    return enabled(rc, pend, o, n);
}
static int f_pstate(const ctx_t *c, char *o, size_t n)
{
    nvmlPstates_t p;
    if (nvmlDeviceGetPerformanceState(c->dev, &p) != NVML_SUCCESS || p == NVML_PSTATE_UNKNOWN)
        return -1;
    snprintf(o, n, "P%d", (int)p);
    return 0;
}
static int f_compute_mode(const ctx_t *c, char *o, size_t n)
{
    static const char *const modes[] = {"Default", "Exclusive_Thread", "Prohibited", "Exclusive_Process"};
    nvmlComputeMode_t m;
    if (nvmlDeviceGetComputeMode(c->dev, &m) != NVML_SUCCESS || (unsigned)m > 3)
        return -1;
    snprintf(o, n, "%s", modes[m]);
    return 0;
}
#define MASK_FIELD(fn, call)                                                                                      \
    static int fn(const ctx_t *c, char *o, size_t n)                                                              \
    {                                                                                                             \
        unsigned long long r;                                                                                     \
        if (call(c->dev, &r) != NVML_SUCCESS)                                                                     \
            return -1;                                                                                            \
        snprintf(o, n, "0x%016llX", r);                                                                           \
        return 0;                                                                                                 \
    }
MASK_FIELD(f_reasons, nvmlDeviceGetCurrentClocksEventReasons)
MASK_FIELD(f_reasons_supported, nvmlDeviceGetSupportedClocksEventReasons)
static int f_na(const ctx_t *c, char *o, size_t n) { (void)c; (void)o; (void)n; return -1; }

UINT_FIELD(f_gen_gpumax, nvmlDeviceGetGpuMaxPcieLinkGeneration(c->dev, &v))
static int f_accounting(const ctx_t *c, char *o, size_t n)
{
    nvmlEnableState_t s = 0;
    return enabled(nvmlDeviceGetAccountingMode(c->dev, &s), s, o, n);
}
UINT_FIELD(f_accounting_buffer, nvmlDeviceGetAccountingBufferSize(c->dev, &v))
static int f_inforom_img(const ctx_t *c, char *o, size_t n)
{
    return OK(nvmlDeviceGetInforomImageVersion(c->dev, o, (unsigned)n));
}
#define INFOROM_FIELD(fn, object)                                                                                 \
    static int fn(const ctx_t *c, char *o, size_t n) { return OK(nvmlDeviceGetInforomVersion(c->dev, object, o, (unsigned)n)); }
INFOROM_FIELD(f_inforom_oem, NVML_INFOROM_OEM)
INFOROM_FIELD(f_inforom_ecc, NVML_INFOROM_ECC)
INFOROM_FIELD(f_inforom_pwr, NVML_INFOROM_POWER)

/* One event reason of the active mask, as the real tool words it. */
static int reason(const ctx_t *c, unsigned long long bit, char *o, size_t n)
{
    unsigned long long r;
    if (nvmlDeviceGetCurrentClocksEventReasons(c->dev, &r) != NVML_SUCCESS)
        return -1;
    snprintf(o, n, "%s", r & bit ? "Active" : "Not Active");
    return 0;
}
#define REASON_FIELD(fn, bit)                                                                                     \
    static int fn(const ctx_t *c, char *o, size_t n) { return reason(c, bit, o, n); }
REASON_FIELD(f_reason_idle, nvmlClocksEventReasonGpuIdle)
REASON_FIELD(f_reason_app, nvmlClocksEventReasonApplicationsClocksSetting)
REASON_FIELD(f_reason_sw_power, nvmlClocksEventReasonSwPowerCap)
REASON_FIELD(f_reason_hw, nvmlClocksThrottleReasonHwSlowdown)
REASON_FIELD(f_reason_hw_thermal, nvmlClocksThrottleReasonHwThermalSlowdown)
REASON_FIELD(f_reason_hw_brake, nvmlClocksThrottleReasonHwPowerBrakeSlowdown)
REASON_FIELD(f_reason_sw_thermal, nvmlClocksEventReasonSwThermalSlowdown)
REASON_FIELD(f_reason_sync_boost, nvmlClocksEventReasonSyncBoost)

#define UTIL_FIELD(fn, call)                                                                                      \
    static int fn(const ctx_t *c, char *o, size_t n)                                                              \
    {                                                                                                             \
        unsigned v, period;                                                                                       \
        if (call(c->dev, &v, &period) != NVML_SUCCESS)                                                            \
            return -1;                                                                                            \
        snprintf(o, n, "%u", v);                                                                                  \
        return 0;                                                                                                 \
    }
UTIL_FIELD(f_util_enc, nvmlDeviceGetEncoderUtilization)
UTIL_FIELD(f_util_dec, nvmlDeviceGetDecoderUtilization)
UTIL_FIELD(f_util_jpeg, nvmlDeviceGetJpgUtilization)
UTIL_FIELD(f_util_ofa, nvmlDeviceGetOfaUtilization)

/* which: 0 sessions, 1 average fps, 2 average latency (us). */
static int encoder_stat(const ctx_t *c, int which, char *o, size_t n)
{
    unsigned v[3];
    if (nvmlDeviceGetEncoderStats(c->dev, &v[0], &v[1], &v[2]) != NVML_SUCCESS)
        return -1;
    snprintf(o, n, "%u", v[which]);
    return 0;
}
static int f_enc_sessions(const ctx_t *c, char *o, size_t n) { return encoder_stat(c, 0, o, n); }
static int f_enc_fps(const ctx_t *c, char *o, size_t n) { return encoder_stat(c, 1, o, n); }
static int f_enc_latency(const ctx_t *c, char *o, size_t n) { return encoder_stat(c, 2, o, n); }

static int ecc_total(const ctx_t *c, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter, char *o, size_t n)
{
    unsigned long long v;
    if (nvmlDeviceGetTotalEccErrors(c->dev, type, counter, &v) != NVML_SUCCESS)
        return -1;
    snprintf(o, n, "%llu", v);
    return 0;
}
static int ecc_at(const ctx_t *c, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter,
                  nvmlMemoryLocation_t where, char *o, size_t n)
{
    unsigned long long v;
    if (nvmlDeviceGetMemoryErrorCounter(c->dev, type, counter, where, &v) != NVML_SUCCESS)
        return -1;
    snprintf(o, n, "%llu", v);
    return 0;
}
#define ECC_TOTAL(fn, type, counter)                                                                              \
    static int fn(const ctx_t *c, char *o, size_t n) { return ecc_total(c, type, counter, o, n); }
#define ECC_AT(fn, type, counter, where)                                                                          \
    static int fn(const ctx_t *c, char *o, size_t n) { return ecc_at(c, type, counter, where, o, n); }
ECC_TOTAL(f_ecc_cor_vol, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC)
ECC_TOTAL(f_ecc_cor_agg, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC)
ECC_TOTAL(f_ecc_unc_agg, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC)
ECC_AT(f_ecc_cor_vol_dram, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, NVML_MEMORY_LOCATION_DRAM)
ECC_AT(f_ecc_cor_vol_sram, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, NVML_MEMORY_LOCATION_SRAM)
ECC_AT(f_ecc_unc_vol_dram, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, NVML_MEMORY_LOCATION_DRAM)
ECC_AT(f_ecc_unc_vol_sram, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, NVML_MEMORY_LOCATION_SRAM)
ECC_AT(f_ecc_cor_agg_dram, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC, NVML_MEMORY_LOCATION_DRAM)
ECC_AT(f_ecc_cor_agg_sram, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC, NVML_MEMORY_LOCATION_SRAM)
ECC_AT(f_ecc_unc_agg_dram, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, NVML_MEMORY_LOCATION_DRAM)
ECC_AT(f_ecc_unc_agg_sram, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, NVML_MEMORY_LOCATION_SRAM)

/* Asked with no room for addresses, NVML answers the count alone. */
static int retired(const ctx_t *c, nvmlPageRetirementCause_t cause, char *o, size_t n)
{
    unsigned count = 0;
    nvmlReturn_t rc = nvmlDeviceGetRetiredPages(c->dev, cause, &count, NULL);
    if (rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE)
        return -1;
    snprintf(o, n, "%u", count);
    return 0;
}
static int f_retired_sbe(const ctx_t *c, char *o, size_t n)
{
    return retired(c, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, o, n);
}
static int f_retired_dbe(const ctx_t *c, char *o, size_t n)
{
    return retired(c, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, o, n);
}
static int f_retired_pending(const ctx_t *c, char *o, size_t n)
{
    nvmlEnableState_t pending;
    if (nvmlDeviceGetRetiredPagesPendingStatus(c->dev, &pending) != NVML_SUCCESS)
        return -1;
    snprintf(o, n, "%s", smi_yes_no(pending == NVML_FEATURE_ENABLED));
    return 0;
}
UINT_FIELD(f_default_app_gr, nvmlDeviceGetDefaultApplicationsClock(c->dev, NVML_CLOCK_GRAPHICS, &v))
UINT_FIELD(f_default_app_mem, nvmlDeviceGetDefaultApplicationsClock(c->dev, NVML_CLOCK_MEM, &v))

static const field_t GPU_FIELDS[] = {
    {"timestamp", NULL, NULL, f_timestamp},
    {"driver_version", NULL, NULL, f_driver},
    {"count", NULL, NULL, f_count},
    {"name", "gpu_name", NULL, f_name},
    {"serial", "gpu_serial", NULL, f_serial},
    {"uuid", "gpu_uuid", NULL, f_uuid},
    {"pci.bus_id", "gpu_bus_id", NULL, f_bus_id},
    {"pci.domain", NULL, NULL, f_pci_domain},
    {"pci.bus", NULL, NULL, f_pci_bus},
    {"pci.device", NULL, NULL, f_pci_device},
    {"pci.device_id", NULL, NULL, f_pci_device_id},
    {"pci.sub_device_id", NULL, NULL, f_pci_sub_id},
    {"pcie.link.gen.current", "pcie.link.gen.gpucurrent", NULL, f_gen_cur},
    {"pcie.link.gen.max", NULL, NULL, f_gen_max},
    {"pcie.link.gen.gpumax", NULL, NULL, f_gen_gpumax},
    {"pcie.link.gen.hostmax", NULL, NULL, f_na}, /* the root port's: not modelled */
    {"pcie.link.width.current", NULL, NULL, f_width_cur},
    {"pcie.link.width.max", NULL, NULL, f_width_max},
    {"index", NULL, NULL, f_index},
    {"display_mode", NULL, NULL, f_display_mode},
    {"display_active", NULL, NULL, f_display_active},
    {"persistence_mode", NULL, NULL, f_persistence},
    {"accounting.mode", NULL, NULL, f_accounting},
    {"accounting.buffer_size", NULL, NULL, f_accounting_buffer},
    {"driver_model.current", NULL, NULL, f_na}, /* Windows only */
    {"driver_model.pending", NULL, NULL, f_na},
    {"vbios_version", NULL, NULL, f_vbios},
    {"inforom.img", "inforom.image", NULL, f_inforom_img},
    {"inforom.oem", NULL, NULL, f_inforom_oem},
    {"inforom.ecc", NULL, NULL, f_inforom_ecc},
    {"inforom.pwr", "inforom.power", NULL, f_inforom_pwr},
    {"fan.speed", NULL, "%", f_fan},
    {"pstate", NULL, NULL, f_pstate},
    {"clocks_event_reasons.supported", "clocks_throttle_reasons.supported", NULL, f_reasons_supported},
    {"clocks_event_reasons.active", "clocks_throttle_reasons.active", NULL, f_reasons},
    {"clocks_event_reasons.gpu_idle", "clocks_throttle_reasons.gpu_idle", NULL, f_reason_idle},
    {"clocks_event_reasons.applications_clocks_setting", "clocks_throttle_reasons.applications_clocks_setting", NULL,
     f_reason_app},
    {"clocks_event_reasons.sw_power_cap", "clocks_throttle_reasons.sw_power_cap", NULL, f_reason_sw_power},
    {"clocks_event_reasons.hw_slowdown", "clocks_throttle_reasons.hw_slowdown", NULL, f_reason_hw},
    {"clocks_event_reasons.hw_thermal_slowdown", "clocks_throttle_reasons.hw_thermal_slowdown", NULL,
     f_reason_hw_thermal},
    {"clocks_event_reasons.hw_power_brake_slowdown", "clocks_throttle_reasons.hw_power_brake_slowdown", NULL,
     f_reason_hw_brake},
    {"clocks_event_reasons.sw_thermal_slowdown", "clocks_throttle_reasons.sw_thermal_slowdown", NULL,
     f_reason_sw_thermal},
    {"clocks_event_reasons.sync_boost", "clocks_throttle_reasons.sync_boost", NULL, f_reason_sync_boost},
    {"memory.total", NULL, "MiB", f_mem_total},
    {"memory.reserved", NULL, "MiB", f_mem_reserved},
    {"memory.used", NULL, "MiB", f_mem_used},
    {"memory.free", NULL, "MiB", f_mem_free},
    {"compute_mode", NULL, NULL, f_compute_mode},
    {"compute_cap", NULL, NULL, f_cc},
    {"utilization.gpu", NULL, "%", f_util_gpu},
    {"utilization.memory", NULL, "%", f_util_mem},
    {"utilization.encoder", NULL, "%", f_util_enc},
    {"utilization.decoder", NULL, "%", f_util_dec},
    {"utilization.jpeg", NULL, "%", f_util_jpeg},
    {"utilization.ofa", NULL, "%", f_util_ofa},
    {"encoder.stats.sessionCount", NULL, NULL, f_enc_sessions},
    {"encoder.stats.averageFps", NULL, NULL, f_enc_fps},
    {"encoder.stats.averageLatency", NULL, NULL, f_enc_latency},
    {"ecc.mode.current", NULL, NULL, f_ecc_cur},
    {"ecc.mode.pending", NULL, NULL, f_ecc_pend},
    {"ecc.errors.corrected.volatile.dram", NULL, NULL, f_ecc_cor_vol_dram},
    {"ecc.errors.corrected.volatile.sram", NULL, NULL, f_ecc_cor_vol_sram},
    {"ecc.errors.corrected.volatile.total", NULL, NULL, f_ecc_cor_vol},
    {"ecc.errors.corrected.aggregate.dram", NULL, NULL, f_ecc_cor_agg_dram},
    {"ecc.errors.corrected.aggregate.sram", NULL, NULL, f_ecc_cor_agg_sram},
    {"ecc.errors.corrected.aggregate.total", NULL, NULL, f_ecc_cor_agg},
    {"ecc.errors.uncorrected.volatile.dram", NULL, NULL, f_ecc_unc_vol_dram},
    {"ecc.errors.uncorrected.volatile.sram", NULL, NULL, f_ecc_unc_vol_sram},
    {"ecc.errors.uncorrected.volatile.total", NULL, NULL, f_ecc_unc},
    {"ecc.errors.uncorrected.aggregate.dram", NULL, NULL, f_ecc_unc_agg_dram},
    {"ecc.errors.uncorrected.aggregate.sram", NULL, NULL, f_ecc_unc_agg_sram},
    {"ecc.errors.uncorrected.aggregate.total", NULL, NULL, f_ecc_unc_agg},
    {"retired_pages.single_bit_ecc.count", "retired_pages.sbe", NULL, f_retired_sbe},
    {"retired_pages.double_bit.count", "retired_pages.dbe", NULL, f_retired_dbe},
    {"retired_pages.pending", NULL, NULL, f_retired_pending},
    {"temperature.gpu", NULL, NULL, f_temp},
    {"temperature.memory", NULL, NULL, f_na},
    {"power.draw", NULL, "W", f_power_draw},
    /* FakeGPU models one power reading: it is both the average and the instant draw (as in -q -x). */
    {"power.draw.average", NULL, "W", f_power_draw},
    {"power.draw.instant", NULL, "W", f_power_draw},
    {"power.limit", NULL, "W", f_power_limit},
    {"enforced.power.limit", NULL, "W", f_power_enforced},
    {"power.default_limit", NULL, "W", f_power_default},
    {"power.min_limit", NULL, "W", f_power_min},
    {"power.max_limit", NULL, "W", f_power_max},
    {"clocks.current.graphics", "clocks.gr", "MHz", f_clk_gr},
    {"clocks.current.sm", "clocks.sm", "MHz", f_clk_sm},
    {"clocks.current.memory", "clocks.mem", "MHz", f_clk_mem},
    {"clocks.current.video", "clocks.video", "MHz", f_clk_video},
    {"clocks.applications.graphics", "clocks.applications.gr", "MHz", f_app_gr},
    {"clocks.applications.memory", "clocks.applications.mem", "MHz", f_app_mem},
    {"clocks.default_applications.graphics", "clocks.default_applications.gr", "MHz", f_default_app_gr},
    {"clocks.default_applications.memory", "clocks.default_applications.mem", "MHz", f_default_app_mem},
    {"clocks.max.graphics", "clocks.max.gr", "MHz", f_max_gr},
    {"clocks.max.sm", NULL, "MHz", f_max_sm},
    {"clocks.max.memory", "clocks.max.mem", "MHz", f_max_mem},
    {"mig.mode.current", NULL, NULL, f_mig_cur},
    {"mig.mode.pending", NULL, NULL, f_mig_pend},
};
#define N_GPU_FIELDS (sizeof GPU_FIELDS / sizeof GPU_FIELDS[0])

/* The header shows what the real tool shows: the canonical name, even when an alias was asked for
 * (clocks.sm -> clocks.current.sm is the one exception it keeps short, and so do we). */
static const field_t *lookup(const field_t *table, size_t n, const char *name, const char **shown)
{
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(table[i].name, name)) {
            *shown = table[i].name;
            return &table[i];
        }
        if (table[i].alias && !strcmp(table[i].alias, name)) {
            /* Short clock names head their own column; gpu_* aliases map to the plain name. */
            *shown = !strncmp(name, "clocks.", 7) ? name : table[i].name;
            return &table[i];
        }
    }
    return NULL;
}

#define MAX_FIELDS 128

typedef struct {
    const field_t *f[MAX_FIELDS];
    const char *shown[MAX_FIELDS];
    unsigned n;
    char buf[4096];
} selection_t;

static int parse_fields(const field_t *table, size_t n, const char *spec, selection_t *sel)
{
    snprintf(sel->buf, sizeof sel->buf, "%s", spec ? spec : "");
    sel->n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(sel->buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        char *end = tok + strlen(tok);
        while (end > tok && end[-1] == ' ')
            *--end = '\0';
        const field_t *f = lookup(table, n, tok, &sel->shown[sel->n]);
        if (!f || sel->n == MAX_FIELDS) {
            printf("Field \"%s\" is not a valid field to query.\n\n", tok);
            return SMI_EXIT_ARGS;
        }
        sel->f[sel->n++] = f;
    }
    if (!sel->n) {
        printf("Field \"\" is not a valid field to query.\n\n");
        return SMI_EXIT_ARGS;
    }
    return SMI_OK;
}

static void print_header(const selection_t *sel, const smi_format *fmt)
{
    if (fmt->noheader)
        return;
    for (unsigned i = 0; i < sel->n; i++) {
        printf("%s%s", i ? ", " : "", sel->shown[i]);
        if (sel->f[i]->unit && !fmt->nounits)
            printf(" [%s]", sel->f[i]->unit);
    }
    printf("\n");
}

static void print_row(const selection_t *sel, const ctx_t *c, const smi_format *fmt)
{
    for (unsigned i = 0; i < sel->n; i++) {
        char v[256];
        const char *sep = i ? ", " : "";
        if (sel->f[i]->fn(c, v, sizeof v) != 0)
            printf("%s[N/A]", sep);
        else if (sel->f[i]->unit && !fmt->nounits)
            printf("%s%s %s", sep, v, sel->f[i]->unit);
        else
            printf("%s%s", sep, v);
    }
    printf("\n");
}

int smi_query_gpu(const smi_gpus *g, const char *fields, const smi_format *fmt)
{
    static selection_t sel;
    int rc = parse_fields(GPU_FIELDS, N_GPU_FIELDS, fields, &sel);
    if (rc)
        return rc;
    unsigned count = 0;
    nvmlDeviceGetCount_v2(&count);
    print_header(&sel, fmt);
    for (unsigned k = 0; k < g->count; k++) {
        ctx_t c = {g->dev[k], g->index[k], count};
        print_row(&sel, &c, fmt);
    }
    return SMI_OK;
}

/* ---- --query-compute-apps ---- */

typedef struct {
    ctx_t gpu;
    unsigned pid;
    unsigned long long used;
} app_t;

static const app_t *cur_app;
static int a_pid(const ctx_t *c, char *o, size_t n) { (void)c; snprintf(o, n, "%u", cur_app->pid); return 0; }
static int a_name(const ctx_t *c, char *o, size_t n)
{
    (void)c;
    return OK(nvmlSystemGetProcessName(cur_app->pid, o, (unsigned)n));
}
static int a_used(const ctx_t *c, char *o, size_t n)
{
    (void)c;
    snprintf(o, n, "%llu", smi_mib(cur_app->used));
    return 0;
}

static const field_t APP_FIELDS[] = {
    {"timestamp", NULL, NULL, f_timestamp},
    {"gpu_name", NULL, NULL, f_name},
    {"gpu_bus_id", NULL, NULL, f_bus_id},
    {"gpu_serial", NULL, NULL, f_serial},
    {"gpu_uuid", NULL, NULL, f_uuid},
    {"pid", NULL, NULL, a_pid},
    {"process_name", "name", NULL, a_name},
    {"used_gpu_memory", "used_memory", "MiB", a_used},
};

int smi_query_apps(const smi_gpus *g, const char *fields, const smi_format *fmt)
{
    static selection_t sel;
    int rc = parse_fields(APP_FIELDS, sizeof APP_FIELDS / sizeof APP_FIELDS[0], fields, &sel);
    if (rc)
        return rc;
    print_header(&sel, fmt);
    for (unsigned k = 0; k < g->count; k++) {
        nvmlProcessInfo_t procs[256];
        unsigned n = 256;
        if (nvmlDeviceGetComputeRunningProcesses_v3(g->dev[k], &n, procs) != NVML_SUCCESS)
            continue;
        for (unsigned i = 0; i < n; i++) {
            app_t a = {{g->dev[k], g->index[k], g->count}, procs[i].pid, procs[i].usedGpuMemory};
            cur_app = &a;
            print_row(&sel, &a.gpu, fmt);
        }
    }
    return SMI_OK;
}

int smi_help_query_gpu(void)
{
    printf("List of valid properties to query for the switch \"--query-gpu=\":\n\n");
    for (size_t i = 0; i < N_GPU_FIELDS; i++) {
        if (GPU_FIELDS[i].alias)
            printf("\"%s\" or \"%s\"\n", GPU_FIELDS[i].name, GPU_FIELDS[i].alias);
        else
            printf("\"%s\"\n", GPU_FIELDS[i].name);
    }
    return SMI_OK;
}
