/* Which GPUs a command acts on (-i), and the timestamp every view prints. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

#include "fg_devices.h"
#include "smi.h"

static int find_one(const char *id, unsigned count, unsigned *index)
{
    nvmlDevice_t d;
    char *end = NULL;
    unsigned long i = strtoul(id, &end, 10);
    if (*id && isdigit((unsigned char)*id) && !*end && strlen(id) < 6) {
        if (i >= count)
            return -1;
        *index = (unsigned)i;
        return 0;
    }
    if (nvmlDeviceGetHandleByUUID(id, &d) != NVML_SUCCESS && nvmlDeviceGetHandleByPciBusId_v2(id, &d) != NVML_SUCCESS &&
        nvmlDeviceGetHandleBySerial(id, &d) != NVML_SUCCESS)
        return -1;
    return nvmlDeviceGetIndex(d, index) == NVML_SUCCESS ? 0 : -1;
}

/* NVML has no handle, hence no bus id, for a lost GPU; the driver names it from the bus, we from the table. */
static void announce_lost(unsigned index)
{
    static fg_devset table;
    static int loaded;
    char err[256];
    if (!loaded)
        loaded = fg_devices_load(&table, err, sizeof err) == FG_DEV_OK ? 1 : -1;
    const char *bus = loaded > 0 && index < table.count ? table.dev[index].pci_bus_id + 4 : "N/A";
    printf("Unable to determine the device handle for GPU%u: %s: %s.  Reboot the system to recover this GPU\n", index,
           bus, nvmlErrorString(NVML_ERROR_GPU_IS_LOST));
}

int smi_select(const char *ids, smi_gpus *out)
{
    unsigned count = 0;
    memset(out, 0, sizeof *out);
    if (nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS)
        return SMI_EXIT_OTHER;
    if (count > SMI_MAX_GPUS)
        count = SMI_MAX_GPUS;
    int chosen[SMI_MAX_GPUS] = {0};
    if (!ids) {
        for (unsigned i = 0; i < count; i++)
            chosen[i] = 1;
    } else {
        char buf[4096];
        snprintf(buf, sizeof buf, "%s", ids);
        char *save = NULL;
        int any = 0;
        for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            while (isspace((unsigned char)*tok))
                tok++;
            unsigned idx;
            if (find_one(tok, count, &idx) != 0)
                return SMI_EXIT_NOT_FOUND;
            chosen[idx] = 1;
            any = 1;
        }
        if (!any)
            return SMI_EXIT_NOT_FOUND;
    }
    for (unsigned i = 0; i < count; i++) {
        if (!chosen[i])
            continue;
        nvmlReturn_t rc = nvmlDeviceGetHandleByIndex_v2(i, &out->dev[out->count]);
        if (rc == NVML_SUCCESS)
            out->index[out->count++] = i;
        else if (rc == NVML_ERROR_GPU_IS_LOST) {
            announce_lost(i);
            out->lost++;
        }
    }
    return out->count ? SMI_OK : out->lost ? SMI_EXIT_GPU_LOST : SMI_EXIT_NOT_FOUND;
}

void smi_system_info(smi_system *s)
{
    int cv = 0;
    smi_now(s->timestamp, sizeof s->timestamp, 0);
    if (nvmlSystemGetDriverVersion(s->driver, sizeof s->driver) != NVML_SUCCESS)
        snprintf(s->driver, sizeof s->driver, "N/A");
    nvmlSystemGetCudaDriverVersion_v2(&cv);
    snprintf(s->cuda, sizeof s->cuda, "%d.%d", cv / 1000, (cv % 1000) / 10);
    s->attached = 0;
    nvmlDeviceGetCount_v2(&s->attached);
}

int smi_driver_at_least(int major, int minor, int patch)
{
    char v[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "";
    int have[3] = {0, 0, 0};
    if (nvmlSystemGetDriverVersion(v, sizeof v) != NVML_SUCCESS || sscanf(v, "%d.%d.%d", &have[0], &have[1], &have[2]) < 1)
        return 0;
    int want[3] = {major, minor, patch};
    for (int i = 0; i < 3; i++)
        if (have[i] != want[i])
            return have[i] > want[i];
    return 1;
}

void smi_now(char *buf, size_t len, int csv_style)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    if (csv_style) {
        char base[32];
        strftime(base, sizeof base, "%Y/%m/%d %H:%M:%S", &tm);
        snprintf(buf, len, "%s.%03ld", base, (long)(tv.tv_usec / 1000));
    } else {
        strftime(buf, len, "%a %b %e %H:%M:%S %Y", &tm);
    }
}
