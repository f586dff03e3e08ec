/* System-wide queries: versions, process names, device count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_nvml.h"

#define FG_NEED_INIT()                                                                                            \
    do {                                                                                                          \
        if (!fg_is_initialized())                                                                                 \
            return NVML_ERROR_UNINITIALIZED;                                                                      \
    } while (0)

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    FG_NEED_INIT();
    return fg_copy_out(version, length, fg_cfg.driver_version);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    FG_NEED_INIT();
    /* Real form: "12.550.127.08" (CUDA major, then the driver version). */
    char buf[64];
    snprintf(buf, sizeof buf, "%d.%s", fg_cfg.cuda_version / 1000, fg_cfg.driver_version);
    return fg_copy_out(version, length, buf);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    /* Like the real one, this needs no nvmlInit. */
    FG_NEED(cudaDriverVersion);
    if (!fg_is_initialized()) {
        const char *v = getenv("FAKEGPU_CUDA_VERSION");
        *cudaDriverVersion = v && *v ? atoi(v) : 12040;
        return NVML_SUCCESS;
    }
    *cudaDriverVersion = fg_cfg.cuda_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* The name nvidia-smi shows for a pid: what the process registered (its argv[0], as fakegpu/shared_state.py and
 * cuda/driver/state.c write it), else its argv[0] as given ("python3", not "python3 train.py": a real H200's
 * nvidia-smi, tests/data/gpu/h200/smi/holding_apps.txt), else comm. */
static int proc_name(unsigned pid, char *out, size_t len)
{
    for (unsigned i = 0; i < fg_devs.count; i++) {
        fg_proc p;
        fg_proc procs[FG_STATE_MAX_PROCS];
        unsigned n = fg_procs_of(i, 0, procs, FG_STATE_MAX_PROCS);
        for (unsigned k = 0; k < n; k++) {
            p = procs[k];
            if (p.pid == pid && p.name[0]) {
                fg_strlcpy(out, p.name, len);
                return 0;
            }
        }
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/cmdline", pid);
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(out, 1, len - 1, f);
        fclose(f);
        out[n] = '\0'; /* the first NUL ends argv[0], all that real NVML shows */
        if (out[0])
            return 0;
    }
    snprintf(path, sizeof path, "/proc/%u/comm", pid);
    f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(out, 1, len - 1, f);
    fclose(f);
    out[n] = '\0';
    if (n && out[n - 1] == '\n')
        out[n - 1] = '\0';
    return n ? 0 : -1;
}

nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    FG_NEED_INIT();
    FG_NEED(name);
    if (!length)
        return NVML_ERROR_INVALID_ARGUMENT;
    char buf[1024];
    if (proc_name(pid, buf, sizeof buf))
        return NVML_ERROR_NOT_FOUND;
    /* The real call truncates rather than failing on a short buffer. */
    fg_strlcpy(name, buf, length);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    FG_NEED_INIT();
    FG_NEED(deviceCount);
    *deviceCount = fg_devs.count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) { return nvmlDeviceGetCount_v2(deviceCount); }
