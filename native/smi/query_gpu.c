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
/* 580 reports no display mode and says why, in brackets as failures are (a real H200's query_all.txt). */
static int f_display_mode(const ctx_t *c, char *o, size_t n)
{
    if (smi_driver_at_least(580, 0, 0)) {
        snprintf(o, n, "[%s]", nvmlErrorString(NVML_ERROR_DEPRECATED));
        return 0;
    }
    nvmlEnableState_t s = 0;
    nvmlReturn_t rc = nvmlDeviceGetDisplayMode(c->dev, &s);
    return enabled(rc, s, o, n);
}
static int f_display_attached(const ctx_t *c, char *o, size_t n)
{
    nvmlEnableState_t s = 0;
    if (nvmlDeviceGetDisplayMode(c->dev, &s) != NVML_SUCCESS)
        return -1;
    snprintf(o, n, "%s", smi_yes_no(s == NVML_FEATURE_ENABLED));
    return 0;
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
    nvmlReturn_t rc = nvmlDeviceGetAccountingMode(c->dev, &s); /* called before s is read */
    return enabled(rc, s, o, n);
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

/* One NVML field value; 0 with the value, -1 for N/A. */
static int field_value(const ctx_t *c, unsigned id, nvmlFieldValue_t *f)
{
    *f = (nvmlFieldValue_t){.fieldId = id};
    return nvmlDeviceGetFieldValues(c->dev, 1, f) == NVML_SUCCESS && f->nvmlReturn == NVML_SUCCESS ? 0 : -1;
}
/* A clock-event counter, kept in ns, asked in us. */
#define COUNTER_FIELD(fn, id)                                                                                     \
    static int fn(const ctx_t *c, char *o, size_t n)                                                              \
    {                                                                                                             \
        nvmlFieldValue_t f;                                                                                       \
        if (field_value(c, id, &f))                                                                               \
            return -1;                                                                                            \
        snprintf(o, n, "%llu", f.value.ullVal / 1000);                                                            \
        return 0;                                                                                                 \
    }
COUNTER_FIELD(f_counter_sw_power, NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP)
COUNTER_FIELD(f_counter_sync_boost, NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST)
COUNTER_FIELD(f_counter_sw_thermal, NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN)
COUNTER_FIELD(f_counter_hw_thermal, NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN)
COUNTER_FIELD(f_counter_hw_brake, NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN)

static int f_addressing(const ctx_t *c, char *o, size_t n)
{
    static const char *const modes[] = {"None", "HMM", "ATS"};
    nvmlDeviceAddressingMode_t m = {.version = nvmlDeviceAddressingMode_v1};
    if (nvmlDeviceGetAddressingMode(c->dev, &m) != NVML_SUCCESS || m.value > 2)
        return -1;
    snprintf(o, n, "%s", modes[m.value]);
    return 0;
}

static int f_recovery(const ctx_t *c, char *o, size_t n)
{
    static const char *const actions[] = {"None", "Reset", "Reboot", "Drain P2P", "Drain and Reset"};
    nvmlFieldValue_t f;
    if (field_value(c, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, &f) || f.value.uiVal > 4)
        return -1;
    snprintf(o, n, "%s", actions[f.value.uiVal]);
    return 0;
}

static int gsp_mode(const ctx_t *c, int which, char *o, size_t n)
{
    unsigned on = 0, dflt = 0;
    nvmlReturn_t rc = nvmlDeviceGetGspFirmwareMode(c->dev, &on, &dflt);
    return enabled(rc, which ? dflt : on, o, n);
}
static int f_gsp_current(const ctx_t *c, char *o, size_t n) { return gsp_mode(c, 0, o, n); }
static int f_gsp_default(const ctx_t *c, char *o, size_t n) { return gsp_mode(c, 1, o, n); }

static int f_inforom_valid(const ctx_t *c, char *o, size_t n)
{
    nvmlReturn_t rc = nvmlDeviceValidateInforom(c->dev);
    if (rc != NVML_SUCCESS && rc != NVML_ERROR_CORRUPTED_INFOROM)
        return -1;
    snprintf(o, n, "%s", rc == NVML_SUCCESS ? "valid" : "invalid");
    return 0;
}

static int f_power_management(const ctx_t *c, char *o, size_t n)
{
    nvmlEnableState_t s = 0;
    nvmlReturn_t rc = nvmlDeviceGetPowerManagementMode(c->dev, &s);
    return enabled(rc, s, o, n);
}

/* The fabric a board is probed into: plain N/A (no brackets) where there is none, as a real H200 prints it. */
static int f_fabric_na(const ctx_t *c, char *o, size_t n)
{
    (void)c;
    snprintf(o, n, "N/A");
    return 0;
}

/* The platform, as NVML's platform info holds it (the text reports print N/A for most of it). */
static int platform(const ctx_t *c, nvmlPlatformInfo_t *p)
{
    *p = (nvmlPlatformInfo_t){.version = nvmlPlatformInfo_v2};
    return OK(nvmlDeviceGetPlatformInfo(c->dev, p));
}
#define PLATFORM_FIELD(fn, fmt, expr)                                                                             \
    static int fn(const ctx_t *c, char *o, size_t n)                                                              \
    {                                                                                                             \
        nvmlPlatformInfo_t p;                                                                                     \
        if (platform(c, &p))                                                                                      \
            return -1;                                                                                            \
        snprintf(o, n, fmt, expr);                                                                                \
        return 0;                                                                                                 \
    }
PLATFORM_FIELD(f_platform_chassis, "%.16s", (const char *)p.chassisSerialNumber)
PLATFORM_FIELD(f_platform_slot, "%u", p.slotNumber)
PLATFORM_FIELD(f_platform_tray, "%u", p.trayIndex)
PLATFORM_FIELD(f_platform_host, "%u", p.hostId)
PLATFORM_FIELD(f_platform_module, "%u", p.moduleId)
static int f_platform_guid(const ctx_t *c, char *o, size_t n)
{
    nvmlPlatformInfo_t p;
    if (platform(c, &p))
        return -1;
    unsigned long long guid = 0;
    for (int i = 0; i < 8; i++)
        guid = guid << 8 | p.ibGuid[i];
    snprintf(o, n, "0x%016llx", guid);
    return 0;
}
static int f_platform_peer(const ctx_t *c, char *o, size_t n)
{
    nvmlPlatformInfo_t p;
    if (platform(c, &p))
        return -1;
    snprintf(o, n, "%s", p.peerType ? "Switch Connected" : "Direct Connected");
    return 0;
}

/* Protected memory; which: 0 total, 1 used, 2 free. Nothing runs protected. */
static int protected_mem(const ctx_t *c, int which, char *o, size_t n)
{
    nvmlConfComputeMemSizeInfo_t m = {0};
    if (nvmlDeviceGetConfComputeMemSizeInfo(c->dev, &m) != NVML_SUCCESS)
        return -1;
    snprintf(o, n, "%llu", which == 1 ? 0 : m.protectedMemSizeKib / 1024);
    return 0;
}
static int f_protected_total(const ctx_t *c, char *o, size_t n) { return protected_mem(c, 0, o, n); }
static int f_protected_used(const ctx_t *c, char *o, size_t n) { return protected_mem(c, 1, o, n); }
static int f_protected_free(const ctx_t *c, char *o, size_t n) { return protected_mem(c, 2, o, n); }

/* which: 0 correctable, 1 uncorrectable, 2 pending, 3 failure, 4/5 the inactive ones. */
static int remapped_rows(const ctx_t *c, int which, char *o, size_t n)
{
    nvmlRemappedRowsInfo_v2_t r = {0};
    if (nvmlDeviceGetRemappedRows_v2(c->dev, &r) != NVML_SUCCESS)
        return -1;
    unsigned v[6] = {r.corrActiveRemaps, r.uncActiveRemaps, r.bPending, r.bFailureOccurred, r.corrInactiveRemaps,
                     r.uncInactiveRemaps};
    if (which == 2 || which == 3)
        snprintf(o, n, "%s", smi_yes_no(v[which]));
    else
        snprintf(o, n, "%u", v[which]);
    return 0;
}
#define REMAP_FIELD(fn, which) static int fn(const ctx_t *c, char *o, size_t n) { return remapped_rows(c, which, o, n); }
REMAP_FIELD(f_remap_cor, 0)
REMAP_FIELD(f_remap_unc, 1)
REMAP_FIELD(f_remap_pending, 2)
REMAP_FIELD(f_remap_failure, 3)
REMAP_FIELD(f_remap_cor_inactive, 4)
REMAP_FIELD(f_remap_unc_inactive, 5)

/* which: 0 max, 1 high, 2 partial, 3 low, 4 none. */
static int histogram(const ctx_t *c, int which, char *o, size_t n)
{
    nvmlRowRemapperHistogramValues_t h = {0};
    if (nvmlDeviceGetRowRemapperHistogram(c->dev, &h) != NVML_SUCCESS)
        return -1;
    unsigned v[5] = {h.max, h.high, h.partial, h.low, h.none};
    snprintf(o, n, "%u", v[which]);
    return 0;
}
#define HISTOGRAM_FIELD(fn, which) static int fn(const ctx_t *c, char *o, size_t n) { return histogram(c, which, o, n); }
HISTOGRAM_FIELD(f_hist_max, 0)
HISTOGRAM_FIELD(f_hist_high, 1)
HISTOGRAM_FIELD(f_hist_partial, 2)
HISTOGRAM_FIELD(f_hist_low, 3)
HISTOGRAM_FIELD(f_hist_none, 4)

static int f_tlimit(const ctx_t *c, char *o, size_t n)
{
    nvmlMarginTemperature_t m = {.version = nvmlMarginTemperature_v1};
    if (nvmlDeviceGetMarginTemperature(c->dev, &m) != NVML_SUCCESS)
        return -1;
    snprintf(o, n, "%d", m.marginTemperature);
    return 0;
}

enum { SRAM_VOL_PARITY, SRAM_VOL_SECDED, SRAM_AGG_PARITY, SRAM_AGG_SECDED, SRAM_L2, SRAM_SM, SRAM_MCU, SRAM_PCIE,
       SRAM_OTHER };
static int sram(const ctx_t *c, int which, char *o, size_t n)
{
    nvmlEccSramErrorStatus_t s = {.version = nvmlEccSramErrorStatus_v1};
    if (nvmlDeviceGetSramEccErrorStatus(c->dev, &s) != NVML_SUCCESS)
        return -1;
    unsigned long long v[] = {s.volatileUncParity, s.volatileUncSecDed, s.aggregateUncParity, s.aggregateUncSecDed,
                              s.aggregateUncBucketL2, s.aggregateUncBucketSm, s.aggregateUncBucketMcu,
                              s.aggregateUncBucketPcie, s.aggregateUncBucketOther};
    snprintf(o, n, "%llu", v[which]);
    return 0;
}
#define SRAM_FIELD(fn, which) static int fn(const ctx_t *c, char *o, size_t n) { return sram(c, which, o, n); }
SRAM_FIELD(f_sram_vol_parity, SRAM_VOL_PARITY)
SRAM_FIELD(f_sram_vol_secded, SRAM_VOL_SECDED)
SRAM_FIELD(f_sram_agg_parity, SRAM_AGG_PARITY)
SRAM_FIELD(f_sram_agg_secded, SRAM_AGG_SECDED)
SRAM_FIELD(f_sram_l2, SRAM_L2)
SRAM_FIELD(f_sram_sm, SRAM_SM)
SRAM_FIELD(f_sram_mcu, SRAM_MCU)
SRAM_FIELD(f_sram_pcie, SRAM_PCIE)
SRAM_FIELD(f_sram_other, SRAM_OTHER)

ECC_AT(f_ecc_cor_vol_cbu, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, NVML_MEMORY_LOCATION_CBU)
ECC_AT(f_ecc_cor_vol_reg, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, NVML_MEMORY_LOCATION_REGISTER_FILE)
ECC_AT(f_ecc_cor_vol_tex, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, NVML_MEMORY_LOCATION_TEXTURE_MEMORY)
ECC_AT(f_ecc_cor_agg_cbu, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC, NVML_MEMORY_LOCATION_CBU)
ECC_AT(f_ecc_cor_agg_reg, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC, NVML_MEMORY_LOCATION_REGISTER_FILE)
ECC_AT(f_ecc_cor_agg_tex, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC, NVML_MEMORY_LOCATION_TEXTURE_MEMORY)
ECC_AT(f_ecc_unc_vol_cbu, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, NVML_MEMORY_LOCATION_CBU)
ECC_AT(f_ecc_unc_vol_reg, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, NVML_MEMORY_LOCATION_REGISTER_FILE)
ECC_AT(f_ecc_unc_vol_tex, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, NVML_MEMORY_LOCATION_TEXTURE_MEMORY)
ECC_AT(f_ecc_unc_agg_cbu, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, NVML_MEMORY_LOCATION_CBU)
ECC_AT(f_ecc_unc_agg_reg, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, NVML_MEMORY_LOCATION_REGISTER_FILE)
ECC_AT(f_ecc_unc_agg_tex, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, NVML_MEMORY_LOCATION_TEXTURE_MEMORY)

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
    {"pcie.link.gen.current", NULL, NULL, f_gen_cur},
    {"pcie.link.gen.gpucurrent", NULL, NULL, f_gen_cur},
    {"pcie.link.gen.max", NULL, NULL, f_gen_max},
    {"pcie.link.gen.gpumax", NULL, NULL, f_gen_gpumax},
    {"pcie.link.gen.hostmax", NULL, NULL, f_na}, /* the root port's: not modelled */
    {"pcie.link.width.current", NULL, NULL, f_width_cur},
    {"pcie.link.width.max", NULL, NULL, f_width_max},
    {"index", NULL, NULL, f_index},
    {"display_mode", NULL, NULL, f_display_mode},
    {"display_attached", NULL, NULL, f_display_attached},
    {"display_active", NULL, NULL, f_display_active},
    {"persistence_mode", NULL, NULL, f_persistence},
    {"addressing_mode", NULL, NULL, f_addressing},
    {"accounting.mode", NULL, NULL, f_accounting},
    {"accounting.buffer_size", NULL, NULL, f_accounting_buffer},
    {"driver_model.current", NULL, NULL, f_na}, /* Windows only */
    {"driver_model.pending", NULL, NULL, f_na},
    {"vbios_version", NULL, NULL, f_vbios},
    {"inforom.img", "inforom.image", NULL, f_inforom_img},
    {"inforom.oem", NULL, NULL, f_inforom_oem},
    {"inforom.ecc", NULL, NULL, f_inforom_ecc},
    {"inforom.pwr", "inforom.power", NULL, f_inforom_pwr},
    {"inforom.checksum_validation", NULL, NULL, f_inforom_valid},
    {"gom.current", NULL, NULL, f_na},
    {"gom.pending", NULL, NULL, f_na},
    {"gpu_recovery_action", NULL, NULL, f_recovery},
    {"gsp.mode.current", NULL, NULL, f_gsp_current},
    {"gsp.mode.default", NULL, NULL, f_gsp_default},
    {"hostname", NULL, NULL, f_na},
    {"platform.chassis_serial_number", NULL, NULL, f_platform_chassis},
    {"platform.slot_number", NULL, NULL, f_platform_slot},
    {"platform.tray_index", NULL, NULL, f_platform_tray},
    {"platform.host_id", NULL, NULL, f_platform_host},
    {"platform.peer_type", NULL, NULL, f_platform_peer},
    {"platform.module_id", NULL, NULL, f_platform_module},
    {"platform.gpu_fabric_guid", NULL, NULL, f_platform_guid},
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
    {"clocks_event_reasons_counters.sw_power_cap", NULL, "us", f_counter_sw_power},
    {"clocks_event_reasons_counters.sync_boost", NULL, "us", f_counter_sync_boost},
    {"clocks_event_reasons_counters.sw_thermal_slowdown", NULL, "us", f_counter_sw_thermal},
    {"clocks_event_reasons_counters.hw_thermal_slowdown", NULL, "us", f_counter_hw_thermal},
    {"clocks_event_reasons_counters.hw_power_brake_slowdown", NULL, "us", f_counter_hw_brake},
    {"memory.total", NULL, "MiB", f_mem_total},
    {"memory.reserved", NULL, "MiB", f_mem_reserved},
    {"memory.used", NULL, "MiB", f_mem_used},
    {"memory.free", NULL, "MiB", f_mem_free},
    {"protected_memory.total", NULL, "MiB", f_protected_total},
    {"protected_memory.used", NULL, "MiB", f_protected_used},
    {"protected_memory.free", NULL, "MiB", f_protected_free},
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
    {"ecc.errors.corrected.volatile.device_memory", NULL, NULL, f_ecc_cor_vol_dram},
    {"ecc.errors.corrected.volatile.dram", NULL, NULL, f_ecc_cor_vol_dram},
    {"ecc.errors.corrected.volatile.register_file", NULL, NULL, f_ecc_cor_vol_reg},
    {"ecc.errors.corrected.volatile.texture_memory", NULL, NULL, f_ecc_cor_vol_tex},
    {"ecc.errors.corrected.volatile.cbu", NULL, NULL, f_ecc_cor_vol_cbu},
    {"ecc.errors.corrected.volatile.sram", NULL, NULL, f_ecc_cor_vol_sram},
    {"ecc.errors.corrected.volatile.total", NULL, NULL, f_ecc_cor_vol},
    {"ecc.errors.corrected.aggregate.device_memory", NULL, NULL, f_ecc_cor_agg_dram},
    {"ecc.errors.corrected.aggregate.dram", NULL, NULL, f_ecc_cor_agg_dram},
    {"ecc.errors.corrected.aggregate.register_file", NULL, NULL, f_ecc_cor_agg_reg},
    {"ecc.errors.corrected.aggregate.texture_memory", NULL, NULL, f_ecc_cor_agg_tex},
    {"ecc.errors.corrected.aggregate.cbu", NULL, NULL, f_ecc_cor_agg_cbu},
    {"ecc.errors.corrected.aggregate.sram", NULL, NULL, f_ecc_cor_agg_sram},
    {"ecc.errors.corrected.aggregate.total", NULL, NULL, f_ecc_cor_agg},
    {"ecc.errors.uncorrected.volatile.device_memory", NULL, NULL, f_ecc_unc_vol_dram},
    {"ecc.errors.uncorrected.volatile.dram", NULL, NULL, f_ecc_unc_vol_dram},
    {"ecc.errors.uncorrected.volatile.register_file", NULL, NULL, f_ecc_unc_vol_reg},
    {"ecc.errors.uncorrected.volatile.texture_memory", NULL, NULL, f_ecc_unc_vol_tex},
    {"ecc.errors.uncorrected.volatile.cbu", NULL, NULL, f_ecc_unc_vol_cbu},
    {"ecc.errors.uncorrected.volatile.sram", NULL, NULL, f_ecc_unc_vol_sram},
    {"ecc.errors.uncorrected.volatile.sram.parity", NULL, NULL, f_sram_vol_parity},
    {"ecc.errors.uncorrected.volatile.sram.secded", NULL, NULL, f_sram_vol_secded},
    {"ecc.errors.uncorrected.volatile.total", NULL, NULL, f_ecc_unc},
    {"ecc.errors.uncorrected.aggregate.device_memory", NULL, NULL, f_ecc_unc_agg_dram},
    {"ecc.errors.uncorrected.aggregate.dram", NULL, NULL, f_ecc_unc_agg_dram},
    {"ecc.errors.uncorrected.aggregate.register_file", NULL, NULL, f_ecc_unc_agg_reg},
    {"ecc.errors.uncorrected.aggregate.texture_memory", NULL, NULL, f_ecc_unc_agg_tex},
    {"ecc.errors.uncorrected.aggregate.cbu", NULL, NULL, f_ecc_unc_agg_cbu},
    {"ecc.errors.uncorrected.aggregate.sram", NULL, NULL, f_ecc_unc_agg_sram},
    {"ecc.errors.uncorrected.aggregate.sram.parity", NULL, NULL, f_sram_agg_parity},
    {"ecc.errors.uncorrected.aggregate.sram.secded", NULL, NULL, f_sram_agg_secded},
    {"ecc.errors.uncorrected.aggregate.sram.l2", NULL, NULL, f_sram_l2},
    {"ecc.errors.uncorrected.aggregate.sram.sm", NULL, NULL, f_sram_sm},
    {"ecc.errors.uncorrected.aggregate.sram.mcu", NULL, NULL, f_sram_mcu},
    {"ecc.errors.uncorrected.aggregate.sram.pcie", NULL, NULL, f_sram_pcie},
    {"ecc.errors.uncorrected.aggregate.sram.other", NULL, NULL, f_sram_other},
    {"ecc.errors.uncorrected.aggregate.total", NULL, NULL, f_ecc_unc_agg},
    {"retired_pages.single_bit_ecc.count", "retired_pages.sbe", NULL, f_retired_sbe},
    {"retired_pages.double_bit.count", "retired_pages.dbe", NULL, f_retired_dbe},
    {"retired_pages.pending", NULL, NULL, f_retired_pending},
    {"remapped_rows.correctable", NULL, NULL, f_remap_cor},
    {"remapped_rows.uncorrectable", NULL, NULL, f_remap_unc},
    {"remapped_rows.pending", NULL, NULL, f_remap_pending},
    {"remapped_rows.failure", NULL, NULL, f_remap_failure},
    {"remapped_rows.correctable_inactive", NULL, NULL, f_remap_cor_inactive},
    {"remapped_rows.uncorrectable_inactive", NULL, NULL, f_remap_unc_inactive},
    {"remapped_rows.histogram.max", NULL, NULL, f_hist_max},
    {"remapped_rows.histogram.high", NULL, NULL, f_hist_high},
    {"remapped_rows.histogram.partial", NULL, NULL, f_hist_partial},
    {"remapped_rows.histogram.low", NULL, NULL, f_hist_low},
    {"remapped_rows.histogram.none", NULL, NULL, f_hist_none},
    {"temperature.gpu", NULL, NULL, f_temp},
    {"temperature.gpu.tlimit", NULL, NULL, f_tlimit},
    {"temperature.memory", NULL, NULL, f_na},
    {"power.management", NULL, NULL, f_power_management},
    {"power.draw", NULL, "W", f_power_draw},
    /* FakeGPU models one power reading: it is both the average and the instant draw (as in -q -x). */
    {"power.draw.average", NULL, "W", f_power_draw},
    {"power.draw.instant", NULL, "W", f_power_draw},
    {"power.limit", NULL, "W", f_power_limit},
    {"enforced.power.limit", NULL, "W", f_power_enforced},
    {"power.default_limit", NULL, "W", f_power_default},
    {"power.min_limit", NULL, "W", f_power_min},
    {"power.max_limit", NULL, "W", f_power_max},
    /* Module (board plus CPU) power is a Grace superchip's; smoothing needs a driver feature no fake board has. */
    {"module.power.draw.average", NULL, "W", f_na},
    {"module.power.draw.instant", NULL, "W", f_na},
    {"module.power.limit", NULL, "W", f_na},
    {"module.enforced.power.limit", NULL, "W", f_na},
    {"module.power.default_limit", NULL, "W", f_na},
    {"module.power.min_limit", NULL, "W", f_na},
    {"module.power.max_limit", NULL, "W", f_na},
    {"power_smoothing.primary_power_floor", NULL, "W", f_na},
    {"power_smoothing.secondary_power_floor", NULL, "W", f_na},
    {"power_smoothing.min_primary_floor_activation_offset", NULL, "W", f_na},
    {"power_smoothing.min_primary_floor_activation_point", NULL, "W", f_na},
    {"power_smoothing.window_multiplier", NULL, "ms", f_na},
    {"power_smoothing.delayed_power_smoothing_supported", NULL, NULL, f_na},
    {"power_smoothing.curr_profile.primary_floor_act_offset", NULL, "W", f_na},
    {"power_smoothing.curr_profile.primary_floor_act_window_multiplier", NULL, NULL, f_na},
    {"power_smoothing.curr_profile.primary_floor_tar_window_multiplier", NULL, NULL, f_na},
    {"power_smoothing.curr_profile.secondary_power_floor", NULL, "W", f_na},
    {"power_smoothing.admin_override.primary_floor_act_offset", NULL, "W", f_na},
    {"power_smoothing.admin_override.primary_floor_act_window_multiplier", NULL, NULL, f_na},
    {"power_smoothing.admin_override.primary_floor_tar_window_multiplier", NULL, NULL, f_na},
    {"power_smoothing.admin_override.secondary_power_floor", NULL, "W", f_na},
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
    {"fabric.state", NULL, NULL, f_fabric_na},
    {"fabric.status", NULL, NULL, f_fabric_na},
    {"fabric.health.summary", NULL, NULL, f_fabric_na},
    {"fabric.health.bandwidth", NULL, NULL, f_fabric_na},
    {"fabric.health.route_recovery_in_progress", NULL, NULL, f_fabric_na},
    {"fabric.health.route_unhealthy", NULL, NULL, f_fabric_na},
    {"fabric.health.access_timeout_recovery", NULL, NULL, f_fabric_na},
    {"fabric.health.incorrect_configuration", NULL, NULL, f_fabric_na},
    {"fabric.health.partition_assigned", NULL, NULL, f_fabric_na},
    {"vgpu_device_capability.homogeneous_placements", NULL, NULL, f_na},
};
#define N_GPU_FIELDS (sizeof GPU_FIELDS / sizeof GPU_FIELDS[0])

/* The header shows the canonical name, even when an alias was asked for: a real 580 driver heads clocks.sm's
 * column clocks.current.sm (query_common.txt), as it does gpu_name's name. */
static const field_t *lookup(const field_t *table, size_t n, const char *name, const char **shown)
{
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(table[i].name, name)) {
            *shown = table[i].name;
            return &table[i];
        }
        if (table[i].alias && !strcmp(table[i].alias, name)) {
            *shown = table[i].name;
            return &table[i];
        }
    }
    return NULL;
}

#define MAX_FIELDS 256

typedef struct {
    const field_t *f[MAX_FIELDS];
    const char *shown[MAX_FIELDS];
    unsigned n;
    char buf[16384];
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

int smi_help_query_apps(void)
{
    printf("List of valid properties to query for the switch \"--query-compute-apps=\":\n\n");
    for (size_t i = 0; i < sizeof APP_FIELDS / sizeof APP_FIELDS[0]; i++) {
        if (APP_FIELDS[i].alias)
            printf("\"%s\" or \"%s\"\n", APP_FIELDS[i].name, APP_FIELDS[i].alias);
        else
            printf("\"%s\"\n", APP_FIELDS[i].name);
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
