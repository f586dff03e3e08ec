/* dmon and pmon: the device and process monitors, a line per GPU (per process) every interval, -c times. The
 * columns and their widths are a real H200's on 580.159.04 (tests/data/gpu/h200/smi/dmon.txt, pmon.txt); what NVML
 * cannot give prints "-". */
#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "smi.h"

static void pause_s(unsigned seconds)
{
    struct timespec ts = {.tv_sec = (time_t)seconds, .tv_nsec = 0};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/* One column's text: the number, or "-" where NVML has none. */
static const char *num(char *buf, size_t len, nvmlReturn_t rc, unsigned v)
{
    if (rc != NVML_SUCCESS)
        return "-";
    snprintf(buf, len, "%u", v);
    return buf;
}

static void dmon_row(nvmlDevice_t d, unsigned index)
{
    char c[12][16];
    unsigned v = 0, period = 0;
    nvmlUtilization_t u = {0};
    nvmlReturn_t urc = nvmlDeviceGetUtilizationRates(d, &u);
    nvmlReturn_t rc = nvmlDeviceGetPowerUsage(d, &v);
    /* whole watts, cut rather than rounded: 81680 mW is 81 (a real H200's dmon and default view) */
    const char *cols[11];
    cols[0] = num(c[0], sizeof c[0], rc, v / 1000);
    rc = nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &v);
    cols[1] = num(c[1], sizeof c[1], rc, v);
    nvmlFieldValue_t mt = {.fieldId = NVML_FI_DEV_MEMORY_TEMP};
    rc = nvmlDeviceGetFieldValues(d, 1, &mt);
    cols[2] = num(c[2], sizeof c[2], rc == NVML_SUCCESS ? mt.nvmlReturn : rc, mt.value.uiVal);
    cols[3] = num(c[3], sizeof c[3], urc, u.gpu);
    cols[4] = num(c[4], sizeof c[4], urc, u.memory);
    rc = nvmlDeviceGetEncoderUtilization(d, &v, &period);
    cols[5] = num(c[5], sizeof c[5], rc, v);
    rc = nvmlDeviceGetDecoderUtilization(d, &v, &period);
    cols[6] = num(c[6], sizeof c[6], rc, v);
    rc = nvmlDeviceGetJpgUtilization(d, &v, &period);
    cols[7] = num(c[7], sizeof c[7], rc, v);
    rc = nvmlDeviceGetOfaUtilization(d, &v, &period);
    cols[8] = num(c[8], sizeof c[8], rc, v);
    rc = nvmlDeviceGetClockInfo(d, NVML_CLOCK_MEM, &v);
    cols[9] = num(c[9], sizeof c[9], rc, v);
    rc = nvmlDeviceGetClockInfo(d, NVML_CLOCK_GRAPHICS, &v);
    cols[10] = num(c[10], sizeof c[10], rc, v);
    printf("%5u", index);
    for (int i = 0; i < 11; i++)
        printf("%7s", cols[i]);
    printf(" \n");
}

int smi_view_dmon(const smi_gpus *g, unsigned count, unsigned delay_s)
{
    printf("# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk \n"
           "# Idx      W      C      C      %%      %%      %%      %%      %%      %%    MHz    MHz \n");
    for (unsigned n = 0; !count || n < count; n++) {
        if (n)
            pause_s(delay_s);
        for (unsigned k = 0; k < g->count; k++)
            dmon_row(g->dev[k], g->index[k]);
        fflush(stdout);
    }
    return SMI_OK;
}

/* A GPU's compute processes, each with what the board can say of its share ("-" for what NVML keeps no samples
 * of); a GPU without one shows a line of dashes, as a real idle H200 does. */
static void pmon_rows(nvmlDevice_t d, unsigned index)
{
    nvmlProcessInfo_t procs[64];
    unsigned n = 64;
    if (nvmlDeviceGetComputeRunningProcesses_v3(d, &n, procs) != NVML_SUCCESS)
        n = 0;
    if (!n) {
        printf("%5u%11s%6s%7s%7s%7s%7s%7s%7s    %-15s\n", index, "-", "-", "-", "-", "-", "-", "-", "-", "-");
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        char name[64] = "-";
        if (nvmlSystemGetProcessName(procs[i].pid, name, sizeof name) != NVML_SUCCESS)
            snprintf(name, sizeof name, "-");
        printf("%5u%11u%6s%7s%7s%7s%7s%7s%7s    %-15s\n", index, procs[i].pid, "C", "-", "-", "-", "-", "-", "-",
               name);
    }
}

int smi_view_pmon(const smi_gpus *g, unsigned count, unsigned delay_s)
{
    printf("# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command \n"
           "# Idx           #    C/G      %%      %%      %%      %%      %%      %%    name \n");
    for (unsigned n = 0; !count || n < count; n++) {
        if (n)
            pause_s(delay_s);
        for (unsigned k = 0; k < g->count; k++)
            pmon_rows(g->dev[k], g->index[k]);
        fflush(stdout);
    }
    return SMI_OK;
}
