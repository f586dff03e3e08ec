/* -q [-d TYPE,...]: the "NVSMI LOG" report. Keys are padded to column 42 and nested by four spaces, as in real captures;
 * anything NVML cannot answer prints N/A. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "smi.h"

static void kv(int depth, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void kv(int depth, const char *key, const char *fmt, ...)
{
    char k[64], v[256];
    snprintf(k, sizeof k, "%*s%s", depth * 4, "", key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    printf("%-42s: %s\n", k, v);
}

static void section(int depth, const char *title) { printf("%*s%s\n", depth * 4, "", title); }

static const char *onoff(nvmlReturn_t rc, int on) { return rc ? "N/A" : on ? "Enabled" : "Disabled"; }

static void str_or_na(int depth, const char *key, nvmlReturn_t rc, const char *value)
{
    kv(depth, key, "%s", rc == NVML_SUCCESS ? value : "N/A");
}

/* v by address: callers pass the NVML call that fills it as another argument, and C leaves unspecified whether
 * that call runs before a by-value v would be read. */
static void uint_or_na(int depth, const char *key, nvmlReturn_t rc, const unsigned *v, const char *unit)
{
    if (rc == NVML_SUCCESS)
        kv(depth, key, "%u%s", *v, unit);
    else
        kv(depth, key, "N/A");
}

static void temperature(nvmlDevice_t d)
{
    unsigned v;
    section(1, "Temperature");
    uint_or_na(2, "GPU Current Temp", nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &v), &v, " C");
    uint_or_na(2, "GPU Shutdown Temp", nvmlDeviceGetTemperatureThreshold(d, NVML_TEMPERATURE_THRESHOLD_SHUTDOWN, &v), &v, " C");
    uint_or_na(2, "GPU Slowdown Temp", nvmlDeviceGetTemperatureThreshold(d, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, &v), &v, " C");
    uint_or_na(2, "GPU Max Operating Temp", nvmlDeviceGetTemperatureThreshold(d, NVML_TEMPERATURE_THRESHOLD_GPU_MAX, &v), &v, " C");
    uint_or_na(2, "Memory Max Operating Temp", nvmlDeviceGetTemperatureThreshold(d, NVML_TEMPERATURE_THRESHOLD_MEM_MAX, &v), &v, " C");
}

static void power(nvmlDevice_t d)
{
    unsigned v, v2;
    section(1, "GPU Power Readings");
    if (nvmlDeviceGetPowerUsage(d, &v) == NVML_SUCCESS)
        kv(2, "Power Draw", "%.2f W", v / 1000.0);
    if (nvmlDeviceGetEnforcedPowerLimit(d, &v) == NVML_SUCCESS) {
        kv(2, "Current Power Limit", "%.2f W", v / 1000.0);
        kv(2, "Default Power Limit", "%.2f W", v / 1000.0);
    }
    if (nvmlDeviceGetPowerManagementLimitConstraints(d, &v, &v2) == NVML_SUCCESS) {
        kv(2, "Min Power Limit", "%.2f W", v / 1000.0);
        kv(2, "Max Power Limit", "%.2f W", v2 / 1000.0);
    }
}

static void clocks(nvmlDevice_t d, const char *title, nvmlReturn_t (*get)(nvmlDevice_t, nvmlClockType_t, unsigned *))
{
    static const struct {
        const char *label;
        nvmlClockType_t type;
    } kinds[] = {{"Graphics", NVML_CLOCK_GRAPHICS}, {"SM", NVML_CLOCK_SM}, {"Memory", NVML_CLOCK_MEM},
                 {"Video", NVML_CLOCK_VIDEO}};
    unsigned v;
    section(1, title);
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        uint_or_na(2, kinds[i].label, get(d, kinds[i].type, &v), &v, " MHz");
}

static void processes(nvmlDevice_t d)
{
    char s[256];
    section(1, "Processes");
    nvmlProcessInfo_t procs[64];
    unsigned n = 64;
    if (nvmlDeviceGetComputeRunningProcesses_v3(d, &n, procs) != NVML_SUCCESS || n == 0) {
        printf("%*s%s\n", 8, "", "None");
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        kv(2, "GPU instance ID", "N/A");
        kv(2, "Compute instance ID", "N/A");
        kv(2, "Process ID", "%u", procs[i].pid);
        kv(2, "Type", "C");
        if (nvmlSystemGetProcessName(procs[i].pid, s, sizeof s) != NVML_SUCCESS)
            snprintf(s, sizeof s, "N/A");
        kv(2, "Name", "%s", s);
        kv(2, "Used GPU Memory", "%llu MiB", smi_mib(procs[i].usedGpuMemory));
    }
}

/* A MIG-mode GPU's MIG devices, after its MIG Mode, with the children -q -x gives <mig_device> (a 575.57.08
 * `-q -x` of an H100 in MIG mode, quoted in a public MIG device parser that the code index finds by
 * "<multiprocessor_count>": index, instance IDs, shared engines, framebuffer); the keys are the report's spellings
 * of those elements. Nothing for a GPU not in MIG mode. */
static void mig_devices(nvmlDevice_t d)
{
    nvmlDevice_t migs[16];
    unsigned n = smi_mig_on(d) ? smi_mig_devices(d, migs, 16) : 0, v;
    if (!n)
        return;
    section(1, "MIG Devices");
    for (unsigned i = 0; i < n; i++) {
        nvmlDevice_t m = migs[i];
        section(2, "MIG Device");
        uint_or_na(3, "Index", nvmlDeviceGetIndex(m, &v), &v, "");
        uint_or_na(3, "GPU Instance ID", nvmlDeviceGetGpuInstanceId(m, &v), &v, "");
        uint_or_na(3, "Compute Instance ID", nvmlDeviceGetComputeInstanceId(m, &v), &v, "");
        nvmlDeviceAttributes_t a;
        nvmlReturn_t rc = nvmlDeviceGetAttributes_v2(m, &a);
        section(3, "Device Attributes");
        section(4, "Shared");
        uint_or_na(5, "Multiprocessor count", rc, &a.multiprocessorCount, "");
        uint_or_na(5, "Copy Engine count", rc, &a.sharedCopyEngineCount, "");
        uint_or_na(5, "Encoder count", rc, &a.sharedEncoderCount, "");
        uint_or_na(5, "Decoder count", rc, &a.sharedDecoderCount, "");
        uint_or_na(5, "OFA count", rc, &a.sharedOfaCount, "");
        uint_or_na(5, "JPG count", rc, &a.sharedJpegCount, "");
        nvmlMemory_v2_t mem = {.version = nvmlMemory_v2};
        rc = nvmlDeviceGetMemoryInfo_v2(m, &mem);
        section(3, "FB Memory Usage");
        kv(4, "Total", rc ? "N/A" : "%llu MiB", smi_mib(mem.total));
        kv(4, "Reserved", rc ? "N/A" : "%llu MiB", smi_mib(mem.reserved));
        kv(4, "Used", rc ? "N/A" : "%llu MiB", smi_mib(mem.used));
        kv(4, "Free", rc ? "N/A" : "%llu MiB", smi_mib(mem.free));
        nvmlBAR1Memory_t b;
        rc = nvmlDeviceGetBAR1MemoryInfo(m, &b);
        section(3, "BAR1 Memory Usage");
        kv(4, "Total", rc ? "N/A" : "%llu MiB", smi_mib(b.bar1Total));
        kv(4, "Used", rc ? "N/A" : "%llu MiB", smi_mib(b.bar1Used));
        kv(4, "Free", rc ? "N/A" : "%llu MiB", smi_mib(b.bar1Free));
    }
}

/* mask: -d's display types (display.c), 0 for the whole report. */
static void one_gpu(nvmlDevice_t d, unsigned mask)
{
    char s[256];
    unsigned v, v2;
    nvmlEnableState_t e, e2;
    nvmlPciInfo_t pci;
    nvmlReturn_t rc;

    rc = nvmlDeviceGetPciInfo_v3(d, &pci);
    printf("GPU %s\n", rc ? "N/A" : pci.busId);
    if (mask)
        goto sections; /* the identity is in no display type */
    str_or_na(1, "Product Name", nvmlDeviceGetName(d, s, sizeof s), s);
    nvmlBrandType_t brand;
    rc = nvmlDeviceGetBrand(d, &brand);
    kv(1, "Product Brand", "%s", rc ? "N/A" : smi_brand_name(brand));
    rc = nvmlDeviceGetDisplayMode(d, &e);
    kv(1, "Display Mode", "%s", onoff(rc, e));
    rc = nvmlDeviceGetDisplayActive(d, &e);
    kv(1, "Display Active", "%s", onoff(rc, e));
    rc = nvmlDeviceGetPersistenceMode(d, &e);
    kv(1, "Persistence Mode", "%s", onoff(rc, e));
    section(1, "MIG Mode");
    rc = nvmlDeviceGetMigMode(d, &v, &v2);
    kv(2, "Current", "%s", onoff(rc, v));
    kv(2, "Pending", "%s", onoff(rc, v2));
    mig_devices(d);
    rc = nvmlDeviceGetAccountingMode(d, &e);
    kv(1, "Accounting Mode", "%s", onoff(rc, e));
    str_or_na(1, "Serial Number", nvmlDeviceGetSerial(d, s, sizeof s), s);
    str_or_na(1, "GPU UUID", nvmlDeviceGetUUID(d, s, sizeof s), s);
    uint_or_na(1, "Minor Number", nvmlDeviceGetMinorNumber(d, &v), &v, "");
    str_or_na(1, "VBIOS Version", nvmlDeviceGetVbiosVersion(d, s, sizeof s), s);
    rc = nvmlDeviceGetMultiGpuBoard(d, &v);
    kv(1, "MultiGPU Board", "%s", rc ? "N/A" : v ? "Yes" : "No");
    rc = nvmlDeviceGetBoardId(d, &v);
    if (rc == NVML_SUCCESS)
        kv(1, "Board ID", "0x%x", v);
    else
        kv(1, "Board ID", "N/A");
    str_or_na(1, "GPU Part Number", nvmlDeviceGetBoardPartNumber(d, s, sizeof s), s);
    section(1, "Inforom Version");
    str_or_na(2, "Image Version", nvmlDeviceGetInforomImageVersion(d, s, sizeof s), s);
    str_or_na(2, "OEM Object", nvmlDeviceGetInforomVersion(d, NVML_INFOROM_OEM, s, sizeof s), s);
    str_or_na(2, "ECC Object", nvmlDeviceGetInforomVersion(d, NVML_INFOROM_ECC, s, sizeof s), s);
    str_or_na(2, "Power Management Object", nvmlDeviceGetInforomVersion(d, NVML_INFOROM_POWER, s, sizeof s), s);
    section(1, "PCI");
    if (nvmlDeviceGetPciInfo_v3(d, &pci) == NVML_SUCCESS) {
        kv(2, "Bus", "0x%02X", pci.bus);
        kv(2, "Device", "0x%02X", pci.device);
        kv(2, "Domain", "0x%04X", pci.domain);
        kv(2, "Device Id", "0x%08X", pci.pciDeviceId);
        kv(2, "Bus Id", "%s", pci.busId);
        kv(2, "Sub System Id", "0x%08X", pci.pciSubSystemId);
    }
    section(2, "GPU Link Info");
    section(3, "PCIe Generation");
    uint_or_na(4, "Max", nvmlDeviceGetMaxPcieLinkGeneration(d, &v), &v, "");
    uint_or_na(4, "Current", nvmlDeviceGetCurrPcieLinkGeneration(d, &v), &v, "");
    section(3, "Link Width");
    uint_or_na(4, "Max", nvmlDeviceGetMaxPcieLinkWidth(d, &v), &v, "x");
    uint_or_na(4, "Current", nvmlDeviceGetCurrPcieLinkWidth(d, &v), &v, "x");
    uint_or_na(1, "Fan Speed", nvmlDeviceGetFanSpeed(d, &v), &v, " %");
sections:
    if (mask && smi_display_shows(mask, "accounting_mode")) {
        rc = nvmlDeviceGetAccountingMode(d, &e);
        kv(1, "Accounting Mode", "%s", onoff(rc, e));
    }
    if (smi_display_shows(mask, "performance_state")) {
        nvmlPstates_t ps;
        rc = nvmlDeviceGetPerformanceState(d, &ps);
        if (rc == NVML_SUCCESS)
            kv(1, "Performance State", "P%d", (int)ps);
        else
            kv(1, "Performance State", "N/A");
    }
    if (smi_display_shows(mask, "fb_memory_usage")) {
        section(1, "FB Memory Usage");
        nvmlMemory_v2_t m = {.version = nvmlMemory_v2};
        if (nvmlDeviceGetMemoryInfo_v2(d, &m) == NVML_SUCCESS) {
            kv(2, "Total", "%llu MiB", smi_mib(m.total));
            kv(2, "Reserved", "%llu MiB", smi_mib(m.reserved));
            kv(2, "Used", "%llu MiB", smi_mib(m.used));
            kv(2, "Free", "%llu MiB", smi_mib(m.free));
        }
    }
    if (smi_display_shows(mask, "bar1_memory_usage")) {
        section(1, "BAR1 Memory Usage");
        nvmlBAR1Memory_t bar;
        if (nvmlDeviceGetBAR1MemoryInfo(d, &bar) == NVML_SUCCESS) {
            kv(2, "Total", "%llu MiB", smi_mib(bar.bar1Total));
            kv(2, "Used", "%llu MiB", smi_mib(bar.bar1Used));
            kv(2, "Free", "%llu MiB", smi_mib(bar.bar1Free));
        }
    }
    if (smi_display_shows(mask, "compute_mode")) {
        nvmlComputeMode_t cm;
        rc = nvmlDeviceGetComputeMode(d, &cm);
        kv(1, "Compute Mode", "%s", rc ? "N/A" : cm == NVML_COMPUTEMODE_DEFAULT ? "Default" : "Exclusive_Process");
    }
    if (smi_display_shows(mask, "utilization")) {
        section(1, "Utilization");
        nvmlUtilization_t u;
        rc = nvmlDeviceGetUtilizationRates(d, &u);
        uint_or_na(2, "Gpu", rc, &u.gpu, " %");
        uint_or_na(2, "Memory", rc, &u.memory, " %");
        uint_or_na(2, "Encoder", nvmlDeviceGetEncoderUtilization(d, &v, &v2), &v, " %");
        uint_or_na(2, "Decoder", nvmlDeviceGetDecoderUtilization(d, &v, &v2), &v, " %");
    }
    if (smi_display_shows(mask, "ecc_mode")) {
        section(1, "ECC Mode");
        rc = nvmlDeviceGetEccMode(d, &e, &e2);
        kv(2, "Current", "%s", onoff(rc, e));
        kv(2, "Pending", "%s", onoff(rc, e2));
    }
    if (smi_display_shows(mask, "temperature"))
        temperature(d);
    if (smi_display_shows(mask, "gpu_power_readings"))
        power(d);
    if (smi_display_shows(mask, "clocks"))
        clocks(d, "Clocks", nvmlDeviceGetClockInfo);
    if (smi_display_shows(mask, "max_clocks"))
        clocks(d, "Max Clocks", nvmlDeviceGetMaxClockInfo);
    if (smi_display_shows(mask, "processes"))
        processes(d);
}

int smi_view_query(const smi_gpus *g, unsigned display)
{
    smi_system s;
    smi_system_info(&s);
    printf("\n==============NVSMI LOG==============\n\n");
    kv(0, "Timestamp", "%s", s.timestamp);
    kv(0, "Driver Version", "%s", s.driver);
    kv(0, "CUDA Version", "%s", s.cuda);
    printf("\n");
    kv(0, "Attached GPUs", "%u", s.attached);
    for (unsigned k = 0; k < g->count; k++) {
        one_gpu(g->dev[k], display);
        printf("\n");
    }
    return SMI_OK;
}
