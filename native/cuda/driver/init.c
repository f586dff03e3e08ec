/* Lifetime, devices and contexts of FakeGPU's libcuda.so.1. Devices load once per process from the same
 * device table NVML reads; there is one (primary) context per device, and a context is current per thread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fg_driver.h"
#include "fg_state.h"
#include "fg_contract.h" /* FG_CUDA_CONTEXT_TABLE, generated from the workspace profiles */
#include "fg_faults.h" /* the run's fault board: lost GPUs, allocation triggers */
#include "fgd.h"
#include "fgd_timeline.h"
#include "fg_visible.h"

fgd_world fgd;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static __thread struct CUctx_st *tls_ctx;
static __thread int tls_ctx_set; /* the thread chose a context (possibly none) */

long long fgd_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* What a CUDA context holds on the device once created (module images, lazy loading on), outside any allocation,
 * and what it grows by later (FGD_PART_*, in workspace_profiles.LAZY_PARTS' order): the built-in workspace profiles
 * (fakegpu/profiles/workspace_profiles.yaml, one source with the estimators and fakecuda), compiled into
 * fg_contract.h by tools/gen_contract.py, one row per compute capability, ascending. */
struct context_row {
    int major, minor;
    unsigned long long created, parts[FGD_PARTS];
};
#define FGD_CONTEXT_ROW(major, minor, created, first_launch, cublas, cudnn) \
    {(major), (minor), (created), {(first_launch), (cublas), (cudnn)}},
static const struct context_row context_rows[] = {FG_CUDA_CONTEXT_TABLE(FGD_CONTEXT_ROW)};

/* The device's row; a capability the table lacks takes the one below it (the catalog's are all there). */
static const struct context_row *context_row(const fg_device *d)
{
    const struct context_row *row = &context_rows[0];
    for (size_t i = 0; i < sizeof context_rows / sizeof context_rows[0]; i++) {
        const struct context_row *r = &context_rows[i];
        if (r->major < d->cc_major || (r->major == d->cc_major && r->minor <= d->cc_minor))
            row = r;
    }
    return row;
}

unsigned long long fgd_context_bytes(const fg_device *d)
{
    return context_row(d)->created;
}

unsigned long long fgd_part_bytes(const fg_device *d, int part)
{
    return part < 0 || part >= FGD_PARTS ? 0 : context_row(d)->parts[part];
}

void fgd_load_part(int device, int part)
{
    if (device < 0 || (unsigned)device >= fgd.devs.count || part < 0 || part >= FGD_PARTS)
        return;
    fgd_mem *m = &fgd.mem[device];
    unsigned bit = 1u << part;
    if (atomic_fetch_or(&m->parts, bit) & bit)
        return;
    atomic_fetch_add(&m->context, fgd_part_bytes(&fgd.devs.dev[device], part));
    fgd_state_changed(device);
}

static void load(void)
{
    char err[512];
    int rc = fg_devices_load(&fgd.devs, err, sizeof err);
    if (rc != FG_DEV_OK) {
        fg_debug("libcuda: no devices: %s", err);
        fgd.devs.count = 0;
        fgd.load_error = CUDA_ERROR_NO_DEVICE;
    } else {
        fg_devices_cuda_view(&fgd.devs, getenv("CUDA_VISIBLE_DEVICES"), fgd.board);
        fgd.load_error = fgd.devs.count ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
    }
    fgd_limits_load();
    for (unsigned i = 0; i < fgd.devs.count; i++) {
        const fg_device *d = &fgd.devs.dev[i];
        fgd_mem *m = &fgd.mem[i];
        atomic_store(&m->context, fgd_context_bytes(d));
        m->total = d->cuda_total ? d->cuda_total : d->mem_total;
        fgd.ctx[i].device = (int)i;
    }
    /* The one driver NVML reports too (native/common/fg_driver.c). */
    fgd.driver_version = fg_cuda_driver_version();
    char dir[512];
    fg_faults_init(fg_state_dir(dir, sizeof dir));
    fgd.loaded = 1;
}

/* After Xid 79 a driver fails what needs the GPU with CUDA_ERROR_UNKNOWN (PyTorch: "CUDA error: unknown
 * error"); the process's other GPUs keep working. */
CUresult fgd_lost(int device)
{
    return device >= 0 && (unsigned)device < fgd.devs.count && fg_fault_lost(fgd.board[device]) ? CUDA_ERROR_UNKNOWN
                                                                                                : CUDA_SUCCESS;
}

CUresult fgd_init(void)
{
    pthread_once(&once, load);
    return fgd.load_error;
}

CUresult fgd_check_device(CUdevice dev)
{
    FGD_INIT();
    return dev >= 0 && (unsigned)dev < fgd.devs.count ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

struct CUctx_st *fgd_current(void)
{
    if (tls_ctx_set)
        return tls_ctx;
    return fgd_init() == CUDA_SUCCESS ? &fgd.ctx[0] : NULL;
}

void fgd_activate(struct CUctx_st *c)
{
    if (c && !atomic_exchange(&fgd.mem[c->device].active, 1))
        fgd_state_changed(c->device); /* the context now costs device memory, as nvidia-smi shows */
}

FGC_EXPORT CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return fgd_init();
}

FGC_EXPORT CUresult cuDriverGetVersion(int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&once, load); /* answers even without devices, like the real driver */
    *version = fgd.driver_version;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuDeviceGetCount(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = fgd_init();
    *count = rc == CUDA_SUCCESS ? (int)fgd.devs.count : 0;
    return rc == CUDA_ERROR_NO_DEVICE ? CUDA_SUCCESS : rc;
}

FGC_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = fgd_check_device(ordinal);
    if (rc == CUDA_SUCCESS)
        *device = ordinal;
    return rc;
}

FGC_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult rc = fgd_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    fg_strlcpy(name, fgd.devs.dev[dev].name, (size_t)len);
    return CUDA_SUCCESS;
}

/* "GPU-4d848940-5f8d-7a56-4be6-e569ff6f9f01" -> 16 bytes. */
static void parse_uuid(const char *text, unsigned char out[16])
{
    memset(out, 0, 16);
    const char *p = strncmp(text, "GPU-", 4) == 0 ? text + 4 : text;
    unsigned n = 0;
    while (*p && n < 32) {
        int v = -1;
        if (*p >= '0' && *p <= '9')
            v = *p - '0';
        else if (*p >= 'a' && *p <= 'f')
            v = *p - 'a' + 10;
        else if (*p >= 'A' && *p <= 'F')
            v = *p - 'A' + 10;
        if (v >= 0) {
            out[n / 2] |= (unsigned char)(n % 2 ? v : v << 4);
            n++;
        }
        p++;
    }
}

FGC_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    CUresult rc = fgd_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    parse_uuid(fgd.devs.dev[dev].uuid, (unsigned char *)uuid->bytes);
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuDeviceGetLuid(char *luid, unsigned int *mask, CUdevice dev)
{
    (void)luid, (void)mask, (void)dev;
    return CUDA_ERROR_NOT_SUPPORTED; /* LUIDs exist on Windows only */
}

FGC_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult rc = fgd_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    const fg_device *d = &fgd.devs.dev[dev];
    *bytes = d->cuda_total ? d->cuda_total : d->mem_total;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    CUresult rc = fgd_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!major || !minor)
        return CUDA_ERROR_INVALID_VALUE;
    *major = fgd.devs.dev[dev].cc_major;
    *minor = fgd.devs.dev[dev].cc_minor;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    CUresult rc = fgd_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pciBusId || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    const fg_device *d = &fgd.devs.dev[dev];
    /* CUDA's form has a 4-digit domain (NVML's has 8): 0000:18:00.0 */
    snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.%x", d->pci_domain, d->pci_bus, d->pci_dev, d->pci_function);
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    FGD_INIT();
    if (!dev || !pciBusId)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned dom = 0, bus = 0, slot = 0, fn = 0;
    if (sscanf(pciBusId, "%x:%x:%x.%x", &dom, &bus, &slot, &fn) != 4) {
        dom = 0;
        if (sscanf(pciBusId, "%x:%x.%x", &bus, &slot, &fn) != 3)
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (unsigned i = 0; i < fgd.devs.count; i++) {
        const fg_device *d = &fgd.devs.dev[i];
        if (d->pci_domain == dom && d->pci_bus == bus && d->pci_dev == slot && d->pci_function == fn) {
            *dev = (CUdevice)i;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

/* ---- contexts: one primary context per device ---- */

FGC_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult rc = fgd_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    atomic_fetch_add(&fgd.ctx[dev].retained, 1);
    fgd_activate(&fgd.ctx[dev]);
    *pctx = &fgd.ctx[dev];
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult rc = fgd_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    int before = atomic_load(&fgd.ctx[dev].retained);
    while (before > 0 && !atomic_compare_exchange_weak(&fgd.ctx[dev].retained, &before, before - 1))
        ;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult rc = fgd_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = fgd.ctx[dev].flags;
    *active = atomic_load(&fgd.mem[dev].active);
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    CUresult rc = fgd_check_device(dev);
    if (rc == CUDA_SUCCESS)
        fgd.ctx[dev].flags = flags;
    return rc;
}

FGC_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    CUresult rc = fgd_check_device(dev);
    if (rc == CUDA_SUCCESS)
        fgd_limits_reset(dev);
    return rc;
}

FGC_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    FGD_INIT();
    if (ctx && (ctx < &fgd.ctx[0] || ctx >= &fgd.ctx[fgd.devs.count]))
        return CUDA_ERROR_INVALID_CONTEXT;
    tls_ctx = ctx;
    tls_ctx_set = 1;
    fgd_activate(ctx);
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    FGD_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = tls_ctx_set ? tls_ctx : NULL;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    return cuCtxSetCurrent(ctx); /* a one-deep stack: FakeGPU has only primary contexts */
}

FGC_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    FGD_INIT();
    if (pctx)
        *pctx = tls_ctx;
    tls_ctx = NULL;
    tls_ctx_set = 1;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    FGD_INIT();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c = fgd_current();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = c->device;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuCtxSynchronize(void)
{
    FGD_INIT(); /* nothing ever runs asynchronously */
    fgd_stamp t0 = fgd_timeline_stamp();
    struct CUctx_st *c = fgd_current();
    if (c && fgd_lost(c->device))
        return CUDA_ERROR_UNKNOWN;
    if (c)
        fgd_wait_if_hung(c->device);
    fgd_activity("cuCtxSynchronize", NULL, 0);
    fgd_pools_synced();
    if (c)
        fgd_synced(c->device);
    fgd_sync_wait();
    fgd_timeline_simple(FGC_TL_SYNC, FGC_TL_SYNC_DEVICE, NULL, 0, 0, t0);
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
    FGD_INIT();
    /* What current boards report: priorities 0 (lowest) to -5 (highest). */
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    (void)ctx;
    FGD_INIT();
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = 3020; /* every context since CUDA 3.2 reports this */
    return CUDA_SUCCESS;
}
