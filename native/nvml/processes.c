/* Running processes (every struct version) and per-process utilization, from the shared state. */
#include <time.h>

#include "fg_nvml.h"

/* Fill any of the three process-info layouts. v2 and v3 share a layout (nvmlProcessInfo_t is v2's). */
/* A MIG device handle lists the processes whose memory is in its instance; a board's handle lists them all, each
 * with its instance's IDs (NVML's 0xFFFFFFFF where the process uses the whole board). */
static nvmlReturn_t list(nvmlDevice_t device, char type, unsigned int *infoCount, void *infos, int v1)
{
    FG_DEVICE_OR_MIG(device, d, m);
    FG_NEED(infoCount);
    static __thread fg_proc procs[FG_STATE_MAX_PROCS];
    unsigned n = fg_procs_of(d->index, m ? (int)m->gi_id + 1 : -1, type, procs, FG_STATE_MAX_PROCS);
    unsigned room = *infoCount;
    *infoCount = n;
    if (n > room)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    if (n && !infos)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < n; i++) {
        if (v1) {
            nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)infos + i;
            p->pid = procs[i].pid;
            p->usedGpuMemory = procs[i].used_bytes;
        } else {
            nvmlProcessInfo_v2_t *p = (nvmlProcessInfo_v2_t *)infos + i;
            p->pid = procs[i].pid;
            p->usedGpuMemory = procs[i].used_bytes;
            const fg_mig_instance *in = NULL;
            for (unsigned k = 0; k < d->mig_count && procs[i].instance; k++)
                if (d->mig[k].gi_id + 1 == procs[i].instance)
                    in = &d->mig[k];
            p->gpuInstanceId = in ? in->gi_id : 0xFFFFFFFF; /* 0xFFFFFFFF: no MIG */
            p->computeInstanceId = in ? in->ci_id : 0xFFFFFFFF;
        }
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos)
{
    return list(device, 'C', infoCount, infos, 1);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v2_t *infos)
{
    return list(device, 'C', infoCount, infos, 0);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    return list(device, 'C', infoCount, infos, 0);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                   nvmlProcessInfo_v1_t *infos)
{
    return list(device, 'G', infoCount, infos, 1);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_v2_t *infos)
{
    return list(device, 'G', infoCount, infos, 0);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos)
{
    return list(device, 'G', infoCount, infos, 0);
}

/* No MPS server runs on a fake GPU: always an empty list. */
static nvmlReturn_t no_mps(nvmlDevice_t device, unsigned int *infoCount)
{
    FG_DEVICE(device, d);
    (void)d;
    FG_NEED(infoCount);
    *infoCount = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v1_t *infos)
{
    (void)infos;
    return no_mps(device, infoCount);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                        nvmlProcessInfo_v2_t *infos)
{
    (void)infos;
    return no_mps(device, infoCount);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                        nvmlProcessInfo_t *infos)
{
    (void)infos;
    return no_mps(device, infoCount);
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp)
{
    FG_DEVICE(device, d);
    FG_NEED(processSamplesCount);
    FG_NOT_IN_MIG_MODE(d);
    static __thread fg_proc procs[FG_STATE_MAX_PROCS];
    unsigned n = fg_procs_of(d->index, -1, 0, procs, FG_STATE_MAX_PROCS);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long now_us = (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000;
    if (lastSeenTimeStamp >= now_us)
        n = 0;
    /* Real NVML: NOT_FOUND when there is no sample; the size probe with a NULL buffer answers the count. */
    if (!n) {
        *processSamplesCount = 0;
        return NVML_ERROR_NOT_FOUND;
    }
    unsigned room = *processSamplesCount;
    *processSamplesCount = n;
    if (!utilization || room < n)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    fg_usage u;
    fg_usage_of(d->index, &u);
    fg_load l;
    fg_load_of(d, &l);
    unsigned procs_total = u.compute_procs + u.graphics_procs;
    for (unsigned i = 0; i < n; i++) {
        nvmlProcessUtilizationSample_t *s = &utilization[i];
        s->pid = procs[i].pid;
        s->timeStamp = now_us;
        s->smUtil = l.gpu_util / (procs_total ? procs_total : 1);
        s->memUtil = l.mem_util / (procs_total ? procs_total : 1);
        s->encUtil = 0;
        s->decUtil = 0;
    }
    return NVML_SUCCESS;
}
