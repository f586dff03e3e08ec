/* -q -x: what one <gpu> element holds, as a table in the order and nesting of a real capture (H100, driver 580;
 * tests/data/smi/qx-h100-elements.txt). Values come from the NVML calls the text report makes, in the same
 * units; an element NVML has no answer for prints N/A, as on real boards for features they lack. */
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
/* NVML's "display mode" is whether a display is attached; the XML reports it under both names. */
STATE_VALUE(v_display_mode, nvmlDeviceGetDisplayMode, smi_enabled)
STATE_VALUE(v_display_attached, nvmlDeviceGetDisplayMode, smi_yes_no)
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

/* arg: 0 corrected rows, 1 uncorrected rows, 2 pending, 3 failure. */
static nvmlReturn_t v_remapped(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    unsigned v[4] = {0};
    nvmlReturn_t rc = nvmlDeviceGetRemappedRows(d, &v[0], &v[1], &v[2], &v[3]);
    if (arg < 2)
        return put(rc, o, n, "%u", v[arg]);
    return put(rc, o, n, "%s", smi_yes_no(v[arg]));
}

static nvmlReturn_t v_gpu_temp(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    (void)arg;
    unsigned t = 0;
    nvmlReturn_t rc = nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &t);
    return put(rc, o, n, "%u C", t);
}

/* Hopper on the 580 driver reports temperatures as margins below T.Limit, the GPU's max operating temperature:
 * the same thresholds the text report prints, subtracted from it. arg: a threshold, or -1 for the current
 * temperature. */
static nvmlReturn_t v_tlimit_margin(nvmlDevice_t d, int arg, char *o, unsigned n)
{
    unsigned limit = 0, t = 0;
    nvmlReturn_t rc = nvmlDeviceGetTemperatureThreshold(d, NVML_TEMPERATURE_THRESHOLD_GPU_MAX, &limit);
    if (rc == NVML_SUCCESS && arg < 0)
        rc = nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &t);
    else if (rc == NVML_SUCCESS)
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

#define SECTION(level, tag) {level, tag, NULL, 0, NULL}
#define VALUE(level, tag, fn, arg) {level, tag, fn, arg, NULL}
#define NA(level, tag) {level, tag, na, 0, NULL}
#define TREE(level, tag, fn) {level, tag, NULL, 0, fn}

static const smi_xml_row gpu_rows[] = {
    VALUE(0, "product_name", v_name, 0),
    VALUE(0, "product_brand", v_brand, 0),
    VALUE(0, "product_architecture", v_architecture, 0),
    VALUE(0, "display_mode", v_display_mode, 0),
    VALUE(0, "display_attached", v_display_attached, 0),
    VALUE(0, "display_active", v_display_active, 0),
    VALUE(0, "persistence_mode", v_persistence, 0),
    NA(0, "addressing_mode"),
    SECTION(0, "mig_mode"),
        VALUE(1, "current_mig", v_mig, 0),
        VALUE(1, "pending_mig", v_mig, 1),
    TREE(0, "mig_devices", t_mig_devices),
    VALUE(0, "accounting_mode", v_accounting, 0),
    VALUE(0, "accounting_mode_buffer_size", v_accounting_buffer, 0),
    SECTION(0, "driver_model"), /* Windows only */
        NA(1, "current_dm"),
        NA(1, "pending_dm"),
    VALUE(0, "serial", v_serial, 0),
    VALUE(0, "uuid", v_uuid, 0),
    NA(0, "pdi"),
    VALUE(0, "minor_number", v_minor, 0),
    VALUE(0, "vbios_version", v_vbios, 0),
    VALUE(0, "multigpu_board", v_multigpu, 0),
    VALUE(0, "board_id", v_board_id, 0),
    VALUE(0, "board_part_number", v_board_part, 0),
    NA(0, "gpu_part_number"),
    NA(0, "gpu_fru_part_number"),
    SECTION(0, "platformInfo"),
        NA(1, "chassis_serial_number"),
        NA(1, "slot_number"),
        NA(1, "tray_index"),
        NA(1, "host_id"),
        NA(1, "peer_type"),
        VALUE(1, "module_id", v_module_id, 0),
        NA(1, "gpu_fabric_guid"),
    SECTION(0, "inforom_version"),
        VALUE(1, "img_version", v_inforom_image, 0),
        VALUE(1, "oem_object", v_inforom, NVML_INFOROM_OEM),
        VALUE(1, "ecc_object", v_inforom, NVML_INFOROM_ECC),
        VALUE(1, "pwr_object", v_inforom, NVML_INFOROM_POWER),
    SECTION(0, "inforom_bbx_flush"),
        NA(1, "latest_timestamp"),
        NA(1, "latest_duration"),
    SECTION(0, "gpu_operation_mode"),
        NA(1, "current_gom"),
        NA(1, "pending_gom"),
    NA(0, "c2c_mode"),
    SECTION(0, "gpu_virtualization_mode"),
        VALUE(1, "virtualization_mode", v_virtualization, 0),
        NA(1, "host_vgpu_mode"),
        NA(1, "vgpu_heterogeneous_mode"),
    NA(0, "gpu_recovery_action"),
    NA(0, "gsp_firmware_version"),
    SECTION(0, "ibmnpu"),
        NA(1, "relaxed_ordering_mode"),
    SECTION(0, "pci"),
        VALUE(1, "pci_bus", v_pci, PCI_BUS),
        VALUE(1, "pci_device", v_pci, PCI_DEVICE),
        VALUE(1, "pci_domain", v_pci, PCI_DOMAIN),
        VALUE(1, "pci_base_class", v_pci_class, 0),
        VALUE(1, "pci_sub_class", v_pci_class, 1),
        VALUE(1, "pci_device_id", v_pci, PCI_DEVICE_ID),
        VALUE(1, "pci_bus_id", v_pci, PCI_BUS_ID),
        VALUE(1, "pci_sub_system_id", v_pci, PCI_SUB_SYSTEM_ID),
        SECTION(1, "pci_gpu_link_info"),
            SECTION(2, "pcie_gen"),
                VALUE(3, "max_link_gen", v_max_link_gen, 0),
                VALUE(3, "current_link_gen", v_link_gen, 0),
                VALUE(3, "device_current_link_gen", v_link_gen, 0),
                VALUE(3, "max_device_link_gen", v_max_device_link_gen, 0),
                NA(3, "max_host_link_gen"),
            SECTION(2, "link_widths"),
                VALUE(3, "max_link_width", v_max_link_width, 0),
                VALUE(3, "current_link_width", v_link_width, 0),
        SECTION(1, "pci_bridge_chip"),
            NA(2, "bridge_chip_type"),
            NA(2, "bridge_chip_fw"),
        VALUE(1, "replay_counter", v_replay, 0),
        NA(1, "replay_rollover_counter"),
        VALUE(1, "tx_util", v_pcie_throughput, NVML_PCIE_UTIL_TX_BYTES),
        VALUE(1, "rx_util", v_pcie_throughput, NVML_PCIE_UTIL_RX_BYTES),
        NA(1, "atomic_caps_outbound"),
        NA(1, "atomic_caps_inbound"),
    VALUE(0, "fan_speed", v_fan, 0),
    VALUE(0, "performance_state", v_pstate, 0),
    SECTION(0, "clocks_event_reasons"),
        VALUE(1, "clocks_event_reason_gpu_idle", v_event_reason, (int)nvmlClocksEventReasonGpuIdle),
        VALUE(1, "clocks_event_reason_applications_clocks_setting", v_event_reason,
              (int)nvmlClocksEventReasonApplicationsClocksSetting),
        VALUE(1, "clocks_event_reason_sw_power_cap", v_event_reason, (int)nvmlClocksEventReasonSwPowerCap),
        VALUE(1, "clocks_event_reason_hw_slowdown", v_event_reason, (int)nvmlClocksThrottleReasonHwSlowdown),
        VALUE(1, "clocks_event_reason_hw_thermal_slowdown", v_event_reason,
              (int)nvmlClocksThrottleReasonHwThermalSlowdown),
        VALUE(1, "clocks_event_reason_hw_power_brake_slowdown", v_event_reason,
              (int)nvmlClocksThrottleReasonHwPowerBrakeSlowdown),
        VALUE(1, "clocks_event_reason_sync_boost", v_event_reason, (int)nvmlClocksEventReasonSyncBoost),
        VALUE(1, "clocks_event_reason_sw_thermal_slowdown", v_event_reason,
              (int)nvmlClocksEventReasonSwThermalSlowdown),
        VALUE(1, "clocks_event_reason_display_clocks_setting", v_event_reason,
              (int)nvmlClocksEventReasonDisplayClockSetting),
    SECTION(0, "clocks_event_reasons_counters"), /* NVML field values, which FakeGPU does not serve */
        NA(1, "clocks_event_reasons_counters_sw_power_cap"),
        NA(1, "clocks_event_reasons_counters_sync_boost"),
        NA(1, "clocks_event_reasons_counters_sw_therm_slowdown"),
        NA(1, "clocks_event_reasons_counters_hw_therm_slowdown"),
        NA(1, "clocks_event_reasons_counters_hw_power_brake"),
    NA(0, "sparse_operation_mode"),
    SECTION(0, "fb_memory_usage"),
        VALUE(1, "total", v_fb, 0),
        VALUE(1, "reserved", v_fb, 1),
        VALUE(1, "used", v_fb, 2),
        VALUE(1, "free", v_fb, 3),
    SECTION(0, "bar1_memory_usage"),
        VALUE(1, "total", v_bar1, 0),
        VALUE(1, "used", v_bar1, 1),
        VALUE(1, "free", v_bar1, 2),
    SECTION(0, "cc_protected_memory_usage"),
        NA(1, "total"),
        NA(1, "used"),
        NA(1, "free"),
    VALUE(0, "compute_mode", v_compute_mode, 0),
    SECTION(0, "utilization"),
        VALUE(1, "gpu_util", v_util, 0),
        VALUE(1, "memory_util", v_util, 1),
        VALUE(1, "encoder_util", v_encoder_util, 0),
        VALUE(1, "decoder_util", v_decoder_util, 0),
        VALUE(1, "jpeg_util", v_jpeg_util, 0),
        VALUE(1, "ofa_util", v_ofa_util, 0),
    SECTION(0, "encoder_stats"),
        VALUE(1, "session_count", v_encoder_stats, 0),
        VALUE(1, "average_fps", v_encoder_stats, 1),
        VALUE(1, "average_latency", v_encoder_stats, 2),
    SECTION(0, "fbc_stats"),
        NA(1, "session_count"),
        NA(1, "average_fps"),
        NA(1, "average_latency"),
    SECTION(0, "dram_encryption_mode"),
        NA(1, "current_dram_encryption"),
        NA(1, "pending_dram_encryption"),
    SECTION(0, "ecc_mode"),
        VALUE(1, "current_ecc", v_ecc_mode, 0),
        VALUE(1, "pending_ecc", v_ecc_mode, 1),
    SECTION(0, "ecc_errors"),
        SECTION(1, "volatile"),
            VALUE(2, "sram_correctable", v_sram_corrected, NVML_VOLATILE_ECC),
            NA(2, "sram_uncorrectable_parity"),
            NA(2, "sram_uncorrectable_secded"),
            VALUE(2, "dram_correctable", v_dram_corrected, NVML_VOLATILE_ECC),
            VALUE(2, "dram_uncorrectable", v_dram_uncorrected, NVML_VOLATILE_ECC),
        SECTION(1, "aggregate"),
            VALUE(2, "sram_correctable", v_sram_corrected, NVML_AGGREGATE_ECC),
            NA(2, "sram_uncorrectable_parity"),
            NA(2, "sram_uncorrectable_secded"),
            VALUE(2, "dram_correctable", v_dram_corrected, NVML_AGGREGATE_ECC),
            VALUE(2, "dram_uncorrectable", v_dram_uncorrected, NVML_AGGREGATE_ECC),
            NA(2, "sram_threshold_exceeded"),
        SECTION(1, "aggregate_uncorrectable_sram_sources"),
            NA(2, "sram_l2"),
            NA(2, "sram_sm"),
            NA(2, "sram_microcontroller"),
            NA(2, "sram_pcie"),
            NA(2, "sram_other"),
        NA(1, "channel_repair_pending"),
        NA(1, "tpc_repair_pending"),
    SECTION(0, "retired_pages"),
        SECTION(1, "multiple_single_bit_retirement"),
            VALUE(2, "retired_count", v_retired_count, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
            VALUE(2, "retired_pagelist", v_retired_pagelist, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
        SECTION(1, "double_bit_retirement"),
            VALUE(2, "retired_count", v_retired_count, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
            VALUE(2, "retired_pagelist", v_retired_pagelist, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
        VALUE(1, "pending_blacklist", v_pages_pending, 0),
        VALUE(1, "pending_retirement", v_pages_pending, 0),
    SECTION(0, "remapped_rows"),
        VALUE(1, "remapped_row_corr", v_remapped, 0),
        VALUE(1, "remapped_row_unc", v_remapped, 1),
        VALUE(1, "remapped_row_pending", v_remapped, 2),
        VALUE(1, "remapped_row_failure", v_remapped, 3),
        SECTION(1, "row_remapper_histogram"),
            NA(2, "row_remapper_histogram_max"),
            NA(2, "row_remapper_histogram_high"),
            NA(2, "row_remapper_histogram_partial"),
            NA(2, "row_remapper_histogram_low"),
            NA(2, "row_remapper_histogram_none"),
    SECTION(0, "temperature"),
        VALUE(1, "gpu_temp", v_gpu_temp, 0),
        VALUE(1, "gpu_temp_tlimit", v_tlimit_margin, -1),
        VALUE(1, "gpu_temp_max_tlimit_threshold", v_tlimit_margin, NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
        VALUE(1, "gpu_temp_slow_tlimit_threshold", v_tlimit_margin, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        VALUE(1, "gpu_temp_max_gpu_tlimit_threshold", v_tlimit_margin, NVML_TEMPERATURE_THRESHOLD_GPU_MAX),
        NA(1, "gpu_target_temperature"),
        NA(1, "memory_temp"),
        VALUE(1, "gpu_temp_max_mem_tlimit_threshold", v_mem_tlimit_margin, 0),
    SECTION(0, "supported_gpu_target_temp"),
        NA(1, "gpu_target_temp_min"),
        NA(1, "gpu_target_temp_max"),
    SECTION(0, "gpu_power_readings"),
        VALUE(1, "power_state", v_pstate, 0),
        /* FakeGPU models one power reading: it is both the average and the instant draw. */
        VALUE(1, "average_power_draw", v_power_draw, 0),
        VALUE(1, "instant_power_draw", v_power_draw, 0),
        VALUE(1, "current_power_limit", v_enforced_limit, 0),
        VALUE(1, "requested_power_limit", v_requested_limit, 0),
        VALUE(1, "default_power_limit", v_default_limit, 0),
        VALUE(1, "min_power_limit", v_power_range, 0),
        VALUE(1, "max_power_limit", v_power_range, 1),
    SECTION(0, "gpu_memory_power_readings"),
        NA(1, "average_power_draw"),
        NA(1, "instant_power_draw"),
    SECTION(0, "module_power_readings"),
        VALUE(1, "power_state", v_pstate, 0),
        NA(1, "average_power_draw"),
        NA(1, "instant_power_draw"),
        NA(1, "current_power_limit"),
        NA(1, "requested_power_limit"),
        NA(1, "default_power_limit"),
        NA(1, "min_power_limit"),
        NA(1, "max_power_limit"),
    NA(0, "power_smoothing"),
    SECTION(0, "power_profiles"),
        NA(1, "power_profile_requested_profiles"),
        NA(1, "power_profile_enforced_profiles"),
    SECTION(0, "clocks"),
        VALUE(1, "graphics_clock", v_clock, NVML_CLOCK_GRAPHICS),
        VALUE(1, "sm_clock", v_clock, NVML_CLOCK_SM),
        VALUE(1, "mem_clock", v_clock, NVML_CLOCK_MEM),
        VALUE(1, "video_clock", v_clock, NVML_CLOCK_VIDEO),
    SECTION(0, "applications_clocks"),
        VALUE(1, "graphics_clock", v_app_clock, NVML_CLOCK_GRAPHICS),
        VALUE(1, "mem_clock", v_app_clock, NVML_CLOCK_MEM),
    SECTION(0, "default_applications_clocks"),
        VALUE(1, "graphics_clock", v_default_app_clock, NVML_CLOCK_GRAPHICS),
        VALUE(1, "mem_clock", v_default_app_clock, NVML_CLOCK_MEM),
    SECTION(0, "deferred_clocks"),
        NA(1, "mem_clock"),
    SECTION(0, "max_clocks"),
        VALUE(1, "graphics_clock", v_max_clock, NVML_CLOCK_GRAPHICS),
        VALUE(1, "sm_clock", v_max_clock, NVML_CLOCK_SM),
        VALUE(1, "mem_clock", v_max_clock, NVML_CLOCK_MEM),
        VALUE(1, "video_clock", v_max_clock, NVML_CLOCK_VIDEO),
    SECTION(0, "max_customer_boost_clocks"),
        VALUE(1, "graphics_clock", v_boost_clock, NVML_CLOCK_GRAPHICS),
    SECTION(0, "clock_policy"),
        VALUE(1, "auto_boost", v_auto_boost, 0),
        VALUE(1, "auto_boost_default", v_auto_boost, 1),
    SECTION(0, "fabric"),
        NA(1, "state"),
        NA(1, "status"),
        NA(1, "cliqueId"),
        NA(1, "clusterUuid"),
        SECTION(1, "health"),
            NA(2, "summary"),
            NA(2, "bandwidth"),
            NA(2, "route_recovery_in_progress"),
            NA(2, "route_unhealthy"),
            NA(2, "access_timeout_recovery"),
            NA(2, "incorrect_configuration"),
    TREE(0, "supported_clocks", t_supported_clocks),
    TREE(0, "processes", t_processes),
    SECTION(0, "accounted_processes"), /* accounting is off: never an entry */
    SECTION(0, "capabilities"),
        NA(1, "egm"),
};

void smi_xml_gpu(nvmlDevice_t d, int depth) { smi_xml_rows(d, gpu_rows, sizeof gpu_rows / sizeof gpu_rows[0], depth); }
