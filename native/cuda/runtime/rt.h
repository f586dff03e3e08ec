/* Internals of FakeGPU's libcudart.so.13. Like NVIDIA's runtime it stands on the driver API, here FakeGPU's
 * libcuda.so.1 (a DT_NEEDED found through our RPATH), so memory, streams and events have one owner whichever
 * API a program uses. The runtime adds what the driver does not know: the current device per thread, lazy
 * context creation, the sticky last error, and the registry of kernels that nvcc-generated code registers. */
#ifndef FGRT_H
#define FGRT_H

#pragma GCC visibility push(default)
#include <cuda.h>
#include <cuda_runtime_api.h>
#pragma GCC visibility pop

#include "fg_log.h"
#include "fgc_unsup.h"

/* Record `err` as the thread's last error (when it is one) and return it. */
FG_HIDDEN cudaError_t rt_ret(cudaError_t err);
/* The driver's result as the runtime's error (the numbering of the codes the driver returns agrees). */
FG_HIDDEN cudaError_t rt_err(CUresult rc);
/* Make the calling thread's current device's primary context current (lazy runtime init). */
FG_HIDDEN cudaError_t rt_context(void);
FG_HIDDEN int rt_device(void);

/* Graph replays (runtime/graph.c) count as executions of the kernels they hold (runtime/launch.c): the registry
 * entry of `func` (a kernel node's function: an entry itself, or the driver's function of one), NULL if none, and
 * count n launches of it. */
FG_HIDDEN const void *rt_kernel_of(const void *func);
FG_HIDDEN void rt_graph_replayed(const void *func, unsigned long long n);

/* The runtime version we answer: the CUDA version of the headers we were built against (13.x). */
#define FG_CUDART_VERSION CUDART_VERSION

#define RT(call) rt_ret(rt_err(call))
#define RT_CONTEXT()                                                                                              \
    do {                                                                                                          \
        cudaError_t rt_e_ = rt_context();                                                                         \
        if (rt_e_ != cudaSuccess)                                                                                 \
            return rt_ret(rt_e_);                                                                                 \
    } while (0)

#endif
