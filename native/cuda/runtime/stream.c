/* Streams and events. cudaStream_t and cudaEvent_t are the driver's CUstream and CUevent, so handles pass freely
 * between the runtime, cuBLAS and the driver API. Stream capture and graphs: runtime/graph.c. */
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
    if (!fn)
        return rt_ret(cudaErrorInvalidValue);
    return RT(cuLaunchHostFunc(s, fn, user)); /* the driver records it when `s` is capturing */
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
