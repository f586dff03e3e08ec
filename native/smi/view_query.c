/* -q [-d TYPE,...]: the "NVSMI LOG" report. Its rows are report_rows.c's, shared with -q -x; what the text writes
 * by code lives here: MIG devices, processes, supported clocks, the sample summaries and the empty lists. */
#include <stdio.h>
#include <string.h>

#include "smi.h"

/* Process entries keep the narrower key column of older drivers on 580 too (a real H200, holding_q.txt). */
#define PROCESS_KEY_WIDTH 42

void smi_text_none(nvmlDevice_t d, const smi_report_row *row, int depth)
{
    (void)d;
    smi_text_kv(depth, row->label, "None");
}

/* Compute processes, the instance IDs N/A outside MIG, their details one level under the process ID. */
void smi_text_processes(nvmlDevice_t d, const smi_report_row *row, int depth)
{
    nvmlProcessInfo_t procs[64];
    unsigned n = 64;
    if (nvmlDeviceGetComputeRunningProcesses_v3(d, &n, procs) != NVML_SUCCESS || n == 0) {
        smi_text_none(d, row, depth);
        return;
    }
    smi_text_section(depth, row->label);
    for (unsigned i = 0; i < n; i++) {
        char name[256];
        if (nvmlSystemGetProcessName(procs[i].pid, name, sizeof name) != NVML_SUCCESS)
            snprintf(name, sizeof name, "N/A");
        smi_text_kv_at(PROCESS_KEY_WIDTH, depth + 1, "GPU instance ID", "N/A");
        smi_text_kv_at(PROCESS_KEY_WIDTH, depth + 1, "Compute instance ID", "N/A");
        smi_text_kv_at(PROCESS_KEY_WIDTH, depth + 1, "Process ID", "%u", procs[i].pid);
        smi_text_kv_at(PROCESS_KEY_WIDTH, depth + 2, "Type", "C");
        smi_text_kv_at(PROCESS_KEY_WIDTH, depth + 2, "Name", "%s", name);
        smi_text_kv_at(PROCESS_KEY_WIDTH, depth + 2, "Used GPU Memory", "%llu MiB", smi_mib(procs[i].usedGpuMemory));
    }
}

/* Each memory clock, the graphics clocks it allows under it (-d SUPPORTED_CLOCKS). */
void smi_text_supported_clocks(nvmlDevice_t d, const smi_report_row *row, int depth)
{
    unsigned mem[32], count = 32;
    smi_text_section(depth, row->label);
    if (nvmlDeviceGetSupportedMemoryClocks(d, &count, mem) != NVML_SUCCESS)
        return;
    for (unsigned i = 0; i < count; i++) {
        unsigned graphics[512], n = 512;
        smi_text_kv(depth + 1, "Memory", "%u MHz", mem[i]);
        if (nvmlDeviceGetSupportedGraphicsClocks(d, mem[i], &n, graphics) != NVML_SUCCESS)
            n = 0;
        for (unsigned k = 0; k < n; k++)
            smi_text_kv(depth + 2, "Graphics", "%u MHz", graphics[k]);
    }
}

/* What an nvmlSample_t holds for this sampling type, in the report's unit. */
static double sample_value(nvmlValueType_t type, const nvmlValue_t *v)
{
    switch (type) {
    case NVML_VALUE_TYPE_DOUBLE: return v->dVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG: return (double)v->ulVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: return (double)v->ullVal;
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG: return (double)v->sllVal;
    default: return (double)v->uiVal;
    }
}

/* The summary of one of NVML's sample buffers (row->arg: the nvmlSamplingType_t): the span it covers, how many
 * samples, their max, min and mean. Power is sampled in mW and shown in W, clocks in MHz, the rest in %. Where NVML
 * keeps no samples every line says so, in NVML's words. */
void smi_text_samples(nvmlDevice_t d, const smi_report_row *row, int depth)
{
    static nvmlSample_t samples[512];
    unsigned n = sizeof samples / sizeof samples[0];
    nvmlValueType_t type = NVML_VALUE_TYPE_UNSIGNED_INT;
    nvmlSamplingType_t kind = (nvmlSamplingType_t)row->arg;
    nvmlReturn_t rc = nvmlDeviceGetSamples(d, kind, 0, &type, &n, samples);
    smi_text_section(depth, row->label);
    if (rc == NVML_SUCCESS && n == 0)
        rc = NVML_ERROR_NOT_FOUND;
    if (rc != NVML_SUCCESS) {
        static const char *const keys[] = {"Duration", "Number of Samples", "Max", "Min", "Avg"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            smi_text_kv(depth + 1, keys[i], "%s", smi_report_error(rc));
        return;
    }
    double lo = sample_value(type, &samples[0].sampleValue), hi = lo, sum = 0;
    for (unsigned i = 0; i < n; i++) {
        double v = sample_value(type, &samples[i].sampleValue);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        sum += v;
    }
    double seconds = (double)(samples[n - 1].timeStamp - samples[0].timeStamp) / 1e6;
    smi_text_kv(depth + 1, "Duration", "%.2f sec", seconds);
    smi_text_kv(depth + 1, "Number of Samples", "%u", n);
    if (kind == NVML_TOTAL_POWER_SAMPLES) {
        smi_text_kv(depth + 1, "Max", "%.2f W", hi / 1000.0);
        smi_text_kv(depth + 1, "Min", "%.2f W", lo / 1000.0);
        smi_text_kv(depth + 1, "Avg", "%.2f W", sum / n / 1000.0);
        return;
    }
    const char *unit = kind == NVML_PROCESSOR_CLK_SAMPLES || kind == NVML_MEMORY_CLK_SAMPLES ? "MHz" : "%";
    smi_text_kv(depth + 1, "Max", "%.0f %s", hi, unit);
    smi_text_kv(depth + 1, "Min", "%.0f %s", lo, unit);
    smi_text_kv(depth + 1, "Avg", "%.0f %s", sum / n, unit);
}

/* A MIG-mode GPU's MIG devices, after its MIG Mode, with the children -q -x gives <mig_device> (a 575.57.08
 * `-q -x` of an H100 in MIG mode, quoted in a public MIG device parser that the code index finds by
 * "<multiprocessor_count>": index, instance IDs, shared engines, framebuffer); the keys are the report's spellings
 * of those elements. Nothing for a GPU not in MIG mode (a real H200 with MIG off prints no such section). */
void smi_text_mig_devices(nvmlDevice_t d, const smi_report_row *row, int depth)
{
    nvmlDevice_t migs[16];
    unsigned n = smi_mig_on(d) ? smi_mig_devices(d, migs, 16) : 0, v = 0;
    if (!n)
        return;
    smi_text_section(depth, row->label);
    for (unsigned i = 0; i < n; i++) {
        nvmlDevice_t m = migs[i];
        nvmlReturn_t rc;
        smi_text_section(depth + 1, "MIG Device");
#define UINT_KV(dep, key, call) ((rc = (call)) == NVML_SUCCESS ? smi_text_kv(dep, key, "%u", v) : smi_text_kv(dep, key, "N/A"))
        UINT_KV(depth + 2, "Index", nvmlDeviceGetIndex(m, &v));
        UINT_KV(depth + 2, "GPU Instance ID", nvmlDeviceGetGpuInstanceId(m, &v));
        UINT_KV(depth + 2, "Compute Instance ID", nvmlDeviceGetComputeInstanceId(m, &v));
#undef UINT_KV
        nvmlDeviceAttributes_t a;
        rc = nvmlDeviceGetAttributes_v2(m, &a);
        smi_text_section(depth + 2, "Device Attributes");
        smi_text_section(depth + 3, "Shared");
        const struct {
            const char *key;
            unsigned value;
        } shared[] = {{"Multiprocessor count", a.multiprocessorCount}, {"Copy Engine count", a.sharedCopyEngineCount},
                      {"Encoder count", a.sharedEncoderCount},         {"Decoder count", a.sharedDecoderCount},
                      {"OFA count", a.sharedOfaCount},                 {"JPG count", a.sharedJpegCount}};
        for (size_t k = 0; k < sizeof shared / sizeof shared[0]; k++)
            if (rc == NVML_SUCCESS)
                smi_text_kv(depth + 4, shared[k].key, "%u", shared[k].value);
            else
                smi_text_kv(depth + 4, shared[k].key, "N/A");
        nvmlMemory_v2_t mem = {.version = nvmlMemory_v2};
        rc = nvmlDeviceGetMemoryInfo_v2(m, &mem);
        const struct {
            const char *key;
            unsigned long long bytes;
        } fb[] = {{"Total", mem.total}, {"Reserved", mem.reserved}, {"Used", mem.used}, {"Free", mem.free}};
        smi_text_section(depth + 2, "FB Memory Usage");
        for (size_t k = 0; k < sizeof fb / sizeof fb[0]; k++)
            if (rc == NVML_SUCCESS)
                smi_text_kv(depth + 3, fb[k].key, "%llu MiB", smi_mib(fb[k].bytes));
            else
                smi_text_kv(depth + 3, fb[k].key, "N/A");
        nvmlBAR1Memory_t b;
        rc = nvmlDeviceGetBAR1MemoryInfo(m, &b);
        const struct {
            const char *key;
            unsigned long long bytes;
        } bar1[] = {{"Total", b.bar1Total}, {"Used", b.bar1Used}, {"Free", b.bar1Free}};
        smi_text_section(depth + 2, "BAR1 Memory Usage");
        for (size_t k = 0; k < sizeof bar1 / sizeof bar1[0]; k++)
            if (rc == NVML_SUCCESS)
                smi_text_kv(depth + 3, bar1[k].key, "%llu MiB", smi_mib(bar1[k].bytes));
            else
                smi_text_kv(depth + 3, bar1[k].key, "N/A");
    }
}

int smi_view_query(const smi_gpus *g, unsigned display)
{
    smi_system s;
    smi_system_info(&s);
    printf("\n==============NVSMI LOG==============\n\n");
    smi_text_kv(0, "Timestamp", "%s", s.timestamp);
    smi_text_kv(0, "Driver Version", "%s", s.driver);
    smi_text_kv(0, "CUDA Version", "%s", s.cuda);
    printf("\n");
    smi_text_kv(0, "Attached GPUs", "%u", s.attached);
    for (unsigned k = 0; k < g->count; k++) {
        nvmlPciInfo_t pci;
        printf("GPU %s\n", nvmlDeviceGetPciInfo_v3(g->dev[k], &pci) == NVML_SUCCESS ? pci.busId : "N/A");
        smi_report_gpu_text(g->dev[k], display);
        printf("\n");
    }
    return SMI_OK;
}
