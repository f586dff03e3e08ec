/* Streams and events (stream capture: driver/graph.c). Nothing runs asynchronously (kernels are recorded,
 * copies happen at the call), so every stream is always idle: queries succeed, synchronisation has nothing to wait
 * for (it only gives the CPU away briefly, fgd_sync_wait), and an event's time is the host clock when it was recorded, so elapsed times measure the host-side control
 * flow between two records. */
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "fgd.h"
#include "fgd_timeline.h"

/* What a synchronisation leaves the caller's other threads (issue 13). On a real device a synchronisation waits
 * (a round trip to the GPU at least, and as long as the work queued before it), and frameworks release their
 * locks around it: PyTorch releases the GIL in torch.cuda.synchronize and Stream/Event.synchronize. The threads
 * waiting for those locks run meanwhile; autograd's device thread, for one, still has to drop its reference to
 * the backward it just finished, which takes the GIL. Nothing is ever queued here, so a synchronisation that
 * returned at once would hand the GIL straight back to its caller, which on a busy machine may then run on into
 * Py_FinalizeEx with that thread still waiting: CPython ends it with pthread_exit, whose unwind crosses a
 * noexcept destructor ("terminate called without an active exception", SIGABRT). So the caller gives its CPU
 * away for a moment, as a host thread waiting on a device with cudaDeviceScheduleYield does:
 * FAKEGPU_SYNC_YIELD_US microseconds of sched_yield (default 50; 0 returns at once). */
void fgd_sync_wait(void)
{
    static long long budget_ns = -1; /* read once; racing first readers compute the same value */
    long long budget = __atomic_load_n(&budget_ns, __ATOMIC_RELAXED);
    if (budget < 0) {
        const char *v = getenv("FAKEGPU_SYNC_YIELD_US");
        long us = v && *v ? atol(v) : 50;
        budget = (us < 0 ? 0 : us > 100000 ? 100000 : us) * 1000LL;
        __atomic_store_n(&budget_ns, budget, __ATOMIC_RELAXED);
    }
    if (!budget)
        return;
    long long end = fgd_now_ns() + budget;
    do
        sched_yield();
    while (fgd_now_ns() < end);
}

static int stream_device(void)
{
    struct CUctx_st *c = fgd_current();
    return c ? c->device : 0;
}

/* The device whose work stream `s` (the default stream: the current context's) holds. */
static int device_of(CUstream s) { return fgd_default_stream(s) ? stream_device() : s->device; }

#define FGD_MAX_HUNG 64
static atomic_int hung[FGD_MAX_HUNG];

void fgd_hang(int device)
{
    if (device >= 0 && device < FGD_MAX_HUNG && !atomic_exchange(&hung[device], 1))
        fg_warn("CUDA device %d hangs: an NCCL operation on it never completes (fault plan); synchronising with it "
                "waits until the process ends", device);
}

int fgd_hung(int device) { return device >= 0 && device < FGD_MAX_HUNG && atomic_load(&hung[device]); }

void fgd_wait_if_hung(int device)
{
    while (fgd_hung(device)) {
        struct timespec ts = {0, 10000000}; /* 10 ms: a waiting host thread, as with cudaDeviceScheduleBlockingSync */
        nanosleep(&ts, NULL);
    }
}

FGC_EXPORT CUresult cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority)
{
    FGD_INIT();
    if (!ph)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->device = stream_device();
    s->flags = flags;
    s->priority = priority > 0 ? 0 : priority < -5 ? -5 : priority; /* clamped to the range, as CUDA does */
    *ph = s;
    fgd_timeline_simple(FGC_TL_STREAM_CREATE, 0, s, flags, (unsigned long long)(long long)s->priority,
                        fgd_timeline_stamp());
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuStreamCreate(CUstream *ph, unsigned int flags) { return cuStreamCreateWithPriority(ph, flags, 0); }

FGC_EXPORT CUresult cuStreamDestroy_v2(CUstream s)
{
    FGD_INIT();
    if (fgd_default_stream(s))
        return CUDA_ERROR_INVALID_HANDLE;
    free(s);
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuStreamQuery(CUstream s)
{
    FGD_INIT();
    return fgd_hung(device_of(s)) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}
FGC_EXPORT CUresult cuStreamSynchronize(CUstream s)
{
    FGD_INIT();
    fgd_stamp t0 = fgd_timeline_stamp();
    struct CUctx_st *c = fgd_current();
    if (fgd_lost(fgd_default_stream(s) ? (c ? c->device : 0) : s->device))
        return CUDA_ERROR_UNKNOWN;
    fgd_wait_if_hung(device_of(s));
    fgd_activity("cuStreamSynchronize", NULL, 0);
    fgd_pools_synced(); /* where pools above their release threshold give memory back */
    fgd_synced(fgd_default_stream(s) ? (c ? c->device : 0) : s->device);
    fgd_sync_wait();
    fgd_timeline_simple(FGC_TL_SYNC, FGC_TL_SYNC_STREAM, s, 0, 0, t0);
    return CUDA_SUCCESS;
}
FGC_EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags)
{
    (void)flags;
    FGD_INIT();
    fgd_timeline_simple(FGC_TL_STREAM_WAIT, 0, s, (unsigned long long)(uintptr_t)e, 0, fgd_timeline_stamp());
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuStreamGetPriority(CUstream s, int *priority)
{
    FGD_INIT();
    if (!priority)
        return CUDA_ERROR_INVALID_VALUE;
    *priority = fgd_default_stream(s) ? 0 : s->priority;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuStreamGetFlags(CUstream s, unsigned int *flags)
{
    FGD_INIT();
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = fgd_default_stream(s) ? 0 : s->flags;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuStreamGetDevice(CUstream s, CUdevice *dev)
{
    FGD_INIT();
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    *dev = fgd_default_stream(s) ? stream_device() : s->device;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuStreamGetId(CUstream s, unsigned long long *id)
{
    FGD_INIT();
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    *id = fgd_default_stream(s) ? (unsigned long long)(uintptr_t)s : (unsigned long long)(uintptr_t)s;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *user, unsigned int flags)
{
    (void)flags;
    FGD_INIT();
    if (!cb)
        return CUDA_ERROR_INVALID_VALUE;
    cb(s, CUDA_SUCCESS, user); /* all earlier work on the stream is already done */
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *user)
{
    FGD_INIT();
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc;
    if (fgd_capture_host(s, fn, user, &rc))
        return rc; /* a host node of the graph being captured, called at each launch */
    fn(user);
    return CUDA_SUCCESS;
}

/* ---- events ---- */

FGC_EXPORT CUresult cuEventCreate(CUevent *ph, unsigned int flags)
{
    FGD_INIT();
    if (!ph)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->device = stream_device();
    e->flags = flags;
    *ph = e;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuEventDestroy_v2(CUevent e)
{
    FGD_INIT();
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    free(e);
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
    FGD_INIT();
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    int dev = device_of(s);
    atomic_store(&e->hung, fgd_hung(dev) ? dev + 1 : 0);
    atomic_store(&e->t_ns, fgd_now_ns());
    fgd_timeline_simple(FGC_TL_EVENT_RECORD, 0, s, (unsigned long long)(uintptr_t)e, 0, fgd_timeline_stamp());
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags)
{
    (void)flags;
    return cuEventRecord(e, s);
}

FGC_EXPORT CUresult cuEventQuery(CUevent e)
{
    FGD_INIT();
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    return atomic_load(&e->hung) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuEventSynchronize(CUevent e)
{
    fgd_stamp t0 = fgd_timeline_stamp();
    CUresult rc = cuEventQuery(e);
    if (rc == CUDA_ERROR_NOT_READY) { /* recorded on a hung device */
        fgd_wait_if_hung(atomic_load(&e->hung) - 1);
        rc = CUDA_SUCCESS;
    }
    if (rc == CUDA_SUCCESS) {
        fgd_activity("cuEventSynchronize", NULL, 0);
        fgd_pools_synced();
        struct CUctx_st *c = fgd_current();
        fgd_synced(c ? c->device : 0);
        fgd_sync_wait();
        fgd_timeline_simple(FGC_TL_SYNC, FGC_TL_SYNC_EVENT, NULL, (unsigned long long)(uintptr_t)e, 0, t0);
    }
    return rc;
}

FGC_EXPORT CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end)
{
    FGD_INIT();
    if (!ms || !start || !end)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING)
        return CUDA_ERROR_INVALID_HANDLE;
    long long a = atomic_load(&start->t_ns), b = atomic_load(&end->t_ns);
    if (!a || !b)
        return CUDA_ERROR_INVALID_HANDLE; /* never recorded */
    *ms = (float)((double)(b - a) / 1e6);
    return CUDA_SUCCESS;
}
