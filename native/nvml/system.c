/* System-wide queries: versions, process names, device count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_driver.h"
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
        unsigned n = fg_procs_of(i, -1, 0, procs, FG_STATE_MAX_PROCS);
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

/* S-class units (the old rack enclosures) are not part of any board FakeGPU models: none, as on a real H200. */
nvmlReturn_t nvmlUnitGetCount(unsigned int *unitCount)
{
    FG_NEED_INIT();
    FG_NEED(unitCount);
    *unitCount = 0;
    return NVML_SUCCESS;
}

/* No board here sits behind a bridge chip: the list is empty (a real H200 answers so). */
nvmlReturn_t nvmlSystemGetHicVersion(unsigned int *hwbcCount, nvmlHwbcEntry_t *hwbcEntries)
{
    FG_NEED_INIT();
    FG_NEED(hwbcCount);
    (void)hwbcEntries;
    *hwbcCount = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverBranch(nvmlSystemDriverBranchInfo_t *branchInfo, unsigned int length)
{
    FG_NEED_INIT();
    FG_NEED(branchInfo);
    if (branchInfo->version != nvmlSystemDriverBranchInfo_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const char *branch = fg_driver_branch(fg_cfg.driver_version);
    if (!branch)
        return NVML_ERROR_NOT_SUPPORTED;
    (void)length;
    return fg_copy_out(branchInfo->branch, sizeof branchInfo->branch, branch);
}

/* Confidential computing is off, its environment unavailable; the GPUs are capable of it when every one is Hopper or
 * later (a real H200: environment, feature and devtools mode 0, CPU capabilities none, GPUs capable). */
nvmlReturn_t nvmlSystemGetConfComputeState(nvmlConfComputeSystemState_t *state)
{
    FG_NEED_INIT();
    FG_NEED(state);
    state->environment = NVML_CC_SYSTEM_ENVIRONMENT_UNAVAILABLE;
    state->ccFeature = NVML_CC_SYSTEM_FEATURE_DISABLED;
    state->devToolsMode = NVML_CC_SYSTEM_DEVTOOLS_MODE_OFF;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetConfComputeCapabilities(nvmlConfComputeSystemCaps_t *capabilities)
{
    FG_NEED_INIT();
    FG_NEED(capabilities);
    int capable = fg_devs.count > 0;
    for (unsigned i = 0; i < fg_devs.count; i++)
        capable &= fg_devs.dev[i].cc_major >= 9;
    capabilities->cpuCaps = NVML_CC_SYSTEM_CPU_CAPS_NONE;
    capabilities->gpusCaps = capable ? NVML_CC_SYSTEM_GPUS_CC_CAPABLE : NVML_CC_SYSTEM_GPUS_CC_NOT_CAPABLE;
    return NVML_SUCCESS;
}
