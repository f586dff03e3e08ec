/* Stream capture and CUDA graphs through the runtime: the driver (driver/graph.c) owns captures and graphs;
 * the runtime adds what only it knows, its kernels. Launches into a capturing stream are recorded as kernel
 * nodes (runtime/launch.c); instantiating a graph notes which of our kernels it holds and how often, so each
 * cudaGraphLaunch counts those kernels as launched in the process report. */
#include <pthread.h>
#include <stdlib.h>

#include "rt.h"

/* One executable graph's kernels, aggregated: (function, launches per replay). */
typedef struct exec_kernels {
    cudaGraphExec_t exec;
    size_t n;
    struct {
        const void *func; /* our registry entry, NULL for a launch of an unregistered function */
        unsigned long long count;
    } *k;
    struct exec_kernels *next;
} exec_kernels;

static exec_kernels *execs;
static pthread_mutex_t execs_lock = PTHREAD_MUTEX_INITIALIZER;

static cudaError_t note_kernels(cudaGraphExec_t exec, cudaGraph_t graph)
{
    size_t n = 0;
    cudaError_t e = RT(cuGraphGetNodes(graph, NULL, &n));
    if (e != cudaSuccess)
        return e;
    exec_kernels *x = calloc(1, sizeof *x);
    CUgraphNode *nodes = calloc(n + 1, sizeof *nodes);
    if (x)
        x->k = calloc(n + 1, sizeof *x->k);
    if (!x || !nodes || !x->k) {
        free(nodes);
        if (x)
            free(x->k);
        free(x);
        return rt_ret(cudaErrorMemoryAllocation);
    }
    cuGraphGetNodes(graph, nodes, &n);
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType type;
        CUDA_KERNEL_NODE_PARAMS p;
        if (cuGraphNodeGetType(nodes[i], &type) != CUDA_SUCCESS || type != CU_GRAPH_NODE_TYPE_KERNEL ||
            cuGraphKernelNodeGetParams_v2(nodes[i], &p) != CUDA_SUCCESS)
            continue;
        const void *func = rt_kernel_of(p.func);
        size_t j = 0;
        while (j < x->n && x->k[j].func != func)
            j++;
        if (j == x->n)
            x->k[x->n++].func = func;
        x->k[j].count++;
    }
    free(nodes);
    x->exec = exec;
    pthread_mutex_lock(&execs_lock);
    x->next = execs;
    execs = x;
    pthread_mutex_unlock(&execs_lock);
    return cudaSuccess;
}

FGC_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    RT_CONTEXT();
    return RT(cuStreamBeginCapture_v2(s, (CUstreamCaptureMode)mode));
}

FGC_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph)
{
    return RT(cuStreamEndCapture(s, graph));
}

FGC_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status)
{
    return RT(cuStreamIsCapturing(s, (CUstreamCaptureStatus *)status));
}

static cudaError_t capture_info(cudaStream_t s, enum cudaStreamCaptureStatus *status, unsigned long long *id,
                                cudaGraph_t *graph, const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                size_t *ndeps)
{
    if (!status)
        return rt_ret(cudaErrorInvalidValue);
    return RT(cuStreamGetCaptureInfo_v3(s, (CUstreamCaptureStatus *)status, (cuuint64_t *)id, graph, deps,
                                        (const CUgraphEdgeData **)edges, ndeps));
}

#if CUDART_VERSION >= 13000
FGC_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus *status,
                                                unsigned long long *id, cudaGraph_t *graph,
                                                const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                                size_t *ndeps)
{
    return capture_info(s, status, id, graph, deps, edges, ndeps);
}
#else
/* CUDA 12 names the edge-less query _v2 (what torch 2.10 imports) and the one with edge data _v3. */
FGC_EXPORT cudaError_t cudaStreamGetCaptureInfo_v2(cudaStream_t s, enum cudaStreamCaptureStatus *status,
                                                   unsigned long long *id, cudaGraph_t *graph,
                                                   const cudaGraphNode_t **deps, size_t *ndeps)
{
    return capture_info(s, status, id, graph, deps, NULL, ndeps);
}

FGC_EXPORT cudaError_t cudaStreamGetCaptureInfo_v3(cudaStream_t s, enum cudaStreamCaptureStatus *status,
                                                   unsigned long long *id, cudaGraph_t *graph,
                                                   const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                                   size_t *ndeps)
{
    return capture_info(s, status, id, graph, deps, edges, ndeps);
}
#endif

FGC_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    return RT(cuThreadExchangeStreamCaptureMode((CUstreamCaptureMode *)mode));
}

FGC_EXPORT cudaError_t cudaGraphCreate(cudaGraph_t *graph, unsigned int flags)
{
    RT_CONTEXT();
    return RT(cuGraphCreate(graph, flags));
}

FGC_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph) { return RT(cuGraphDestroy(graph)); }

FGC_EXPORT cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *count)
{
    return RT(cuGraphGetNodes(graph, nodes, count));
}

FGC_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph,
                                                     unsigned long long flags)
{
    cudaError_t e = RT(cuGraphInstantiateWithFlags(exec, graph, flags));
    if (e != cudaSuccess)
        return e;
    e = note_kernels(*exec, graph);
    if (e != cudaSuccess)
        cuGraphExecDestroy(*exec);
    return e;
}

FGC_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
    return cudaGraphInstantiateWithFlags(exec, graph, flags);
}

FGC_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s)
{
    cudaError_t e = RT(cuGraphLaunch(exec, s));
    if (e != cudaSuccess)
        return e;
    pthread_mutex_lock(&execs_lock);
    for (exec_kernels *x = execs; x; x = x->next)
        if (x->exec == exec) {
            for (size_t i = 0; i < x->n; i++)
                rt_graph_replayed(x->k[i].func, x->k[i].count);
            break;
        }
    pthread_mutex_unlock(&execs_lock);
    return cudaSuccess;
}

FGC_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    pthread_mutex_lock(&execs_lock);
    for (exec_kernels **p = &execs; *p; p = &(*p)->next)
        if ((*p)->exec == exec) {
            exec_kernels *x = *p;
            *p = x->next;
            free(x->k);
            free(x);
            break;
        }
    pthread_mutex_unlock(&execs_lock);
    return RT(cuGraphExecDestroy(exec));
}
