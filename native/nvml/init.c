/* Library lifetime: reference-counted init/shutdown, device loading, configuration, error strings. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fg_driver.h"
#include "fg_nvml.h"

fg_devset fg_devs;
fg_config fg_cfg;
struct nvmlDevice_st fg_handles[FG_MAX_DEVICES];

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int refcount;
/* Devices load once per process and are never freed or rewritten: a handle a thread still holds across
 * another thread's shutdown/init stays valid. */
static int loaded;

int fg_is_initialized(void) { return atomic_load_explicit(&refcount, memory_order_acquire) > 0; }

nvmlReturn_t fg_lookup(nvmlDevice_t h, const fg_device **d)
{
    if (!fg_is_initialized())
        return NVML_ERROR_UNINITIALIZED;
    uintptr_t p = (uintptr_t)h, base = (uintptr_t)fg_handles;
    if (p < base || p >= base + fg_devs.count * sizeof fg_handles[0] || (p - base) % sizeof fg_handles[0]) {
        const fg_mig_instance *m = NULL;
        nvmlReturn_t rc = fg_lookup_any(h, d, &m);
        return rc == NVML_SUCCESS ? NVML_ERROR_NOT_SUPPORTED : rc;
    }
    *d = &fg_devs.dev[h->index];
    return fg_fault_lost(h->index) ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

nvmlReturn_t fg_copy_out(char *dst, unsigned length, const char *src)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(src);
    if (n + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, n + 1);
    return NVML_SUCCESS;
}

static int env_int(const char *name, int fallback)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return fallback;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (*end || x < 0 || x > 1000000) {
        fg_debug("ignoring %s=%s: not a whole number", name, v);
        return fallback;
    }
    return (int)x;
}

static void load_config(void)
{
    fg_driver_version(fg_cfg.driver_version, sizeof fg_cfg.driver_version);
    fg_cfg.cuda_version = fg_cuda_driver_version();
    fg_cfg.pin_temperature = env_int("FAKEGPU_TEMPERATURE", -1);
    fg_cfg.pin_gpu_util = env_int("FAKEGPU_UTILIZATION", -1);
    fg_cfg.pin_mem_util = env_int("FAKEGPU_MEMORY_UTILIZATION", -1);
    int watts = env_int("FAKEGPU_POWER_W", -1);
    fg_cfg.pin_power_mw = watts < 0 ? -1 : watts * 1000;
    fg_cfg.state_ttl_ms = (unsigned)env_int("FAKEGPU_STATE_TTL_MS", 50);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    fg_cfg.cpu_count = (unsigned)env_int("FAKEGPU_CPU_COUNT", online > 0 ? (int)online : 1);
    if (fg_cfg.cpu_count == 0)
        fg_cfg.cpu_count = 1;
    fg_state_dir(fg_cfg.state_dir, sizeof fg_cfg.state_dir);
    fg_faults_init(fg_cfg.state_dir);
}

static nvmlReturn_t init_locked(void)
{
    if (!loaded) {
        static fg_devset fresh; /* 64 devices do not belong on a caller's stack */
        char err[512];
        int rc = fg_devices_load(&fresh, err, sizeof err);
        if (rc != FG_DEV_OK) {
            fg_debug("nvmlInit failed: %s", err);
            return rc == FG_DEV_MISSING ? NVML_ERROR_LIBRARY_NOT_FOUND : NVML_ERROR_UNINITIALIZED;
        }
        fg_devs = fresh;
        for (unsigned i = 0; i < FG_MAX_DEVICES; i++)
            fg_handles[i].index = i;
        fg_mig_handles_init();
        load_config();
        loaded = 1;
        fg_debug("NVML ready: %u device(s) from %s", fg_devs.count, fg_devs.source);
    }
    atomic_fetch_add_explicit(&refcount, 1, memory_order_release);
    fg_state_invalidate();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags; /* NO_GPUS / NO_ATTACH change nothing for devices that exist only on paper */
    pthread_mutex_lock(&init_lock);
    nvmlReturn_t rc = init_locked();
    pthread_mutex_unlock(&init_lock);
    return rc;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&init_lock);
    nvmlReturn_t rc = NVML_ERROR_UNINITIALIZED;
    if (atomic_load(&refcount) > 0) {
        atomic_fetch_sub(&refcount, 1);
        rc = NVML_SUCCESS;
    }
    pthread_mutex_unlock(&init_lock);
    return rc;
}

/* The texts driver 580 gives (tests/data/gpu/h200/nvml.json, ErrorStrings); nvidia-smi prints some of them as values
 * ("Requested functionality has been deprecated" for the display mode). */
const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires reset";
    case NVML_ERROR_OPERATING_SYSTEM: return "GPU access blocked by the operating system";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "Driver/library version mismatch";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "vGPU ECC not supported";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient Resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Invalid Frequency";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Requested functionality has been deprecated";
    case NVML_ERROR_NOT_READY: return "System is not in ready state";
    case NVML_ERROR_GPU_NOT_FOUND: return "No supported GPUs were found";
    case NVML_ERROR_INVALID_STATE: return "Resource not in correct state to perform requested operation";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
    }
}
