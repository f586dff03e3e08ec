/* Streams, events and the stream-capture queries. cudaStream_t and cudaEvent_t are the driver's CUstream and
 * CUevent, so handles pass freely between the runtime, cuBLAS and the driver API. Graph capture itself is not
 * supported yet: streams report that they are never capturing, and beginning a capture is refused. */
#include "rt.h"

FGC_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int priority)
{
    RT_CONTEXT();
    return RT(cuStreamCreateWithPriority(s, flags, priority));
}
FGC_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    return cudaStreamCreateWithPriority(s, flags, 0);
}
FGC_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithPriority(s, 0, 0); }
FGC_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) { return RT(cuStreamDestroy_v2(s)); }
FGC_EXPORT cudaError_t cudaStreamQuery(cudaStream_t s) { return RT(cuStreamQuery(s)); }
FGC_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) { return RT(cuStreamSynchronize(s)); }
FGC_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    return RT(cuStreamWaitEvent(s, e, flags));
}
FGC_EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t s, int *priority) { return RT(cuStreamGetPriority(s, priority)); }
FGC_EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned int *flags) { return RT(cuStreamGetFlags(s, flags)); }
FGC_EXPORT cudaError_t cudaStreamGetId(cudaStream_t s, unsigned long long *id) { return RT(cuStreamGetId(s, id)); }

FGC_EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t cb, void *user, unsigned int flags)
{
    (void)flags;
    if (!cb)
        return rt_ret(cudaErrorInvalidValue);
    cb(s, cudaSuccess, user); /* all earlier work on the stream is already done */
    return cudaSuccess;
}

FGC_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *user)
{
    (void)s;
    if (!fn)
        return rt_ret(cudaErrorInvalidValue);
    fn(user);
    return cudaSuccess;
}

FGC_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status)
{
    (void)s;
    if (!status)
        return rt_ret(cudaErrorInvalidValue);
    *status = cudaStreamCaptureStatusNone;
    return cudaSuccess;
}

FGC_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus *status,
                                                unsigned long long *id, cudaGraph_t *graph,
                                                const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                                size_t *ndeps)
{
    (void)s;
    if (!status)
        return rt_ret(cudaErrorInvalidValue);
    *status = cudaStreamCaptureStatusNone;
    if (id)
        *id = 0;
    if (graph)
        *graph = NULL;
    if (deps)
        *deps = NULL;
    if (edges)
        *edges = NULL;
    if (ndeps)
        *ndeps = 0;
    return cudaSuccess;
}

static __thread enum cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;

FGC_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    if (!mode)
        return rt_ret(cudaErrorInvalidValue);
    enum cudaStreamCaptureMode old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return cudaSuccess;
}

/* ---- events ---- */

FGC_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    RT_CONTEXT();
    return RT(cuEventCreate(e, flags));
}
FGC_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
FGC_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) { return RT(cuEventDestroy_v2(e)); }
FGC_EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return RT(cuEventRecord(e, s)); }
FGC_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int flags)
{
    return RT(cuEventRecordWithFlags(e, s, flags));
}
FGC_EXPORT cudaError_t cudaEventQuery(cudaEvent_t e) { return RT(cuEventQuery(e)); }
FGC_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e) { return RT(cuEventSynchronize(e)); }
FGC_EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    return RT(cuEventElapsedTime_v2(ms, start, end));
}
