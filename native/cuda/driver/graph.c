/* CUDA graphs as recorded no-ops. A stream in capture records the work submitted to it (kernel launches, async
 * copies and fills, host functions) as nodes of a graph instead of doing it; instantiating snapshots the nodes;
 * launching the executable graph replays them: copies, fills and host functions are done again (they are what
 * native mode simulates), kernels are counted (they never run). cuBLAS records its GEMMs as host nodes that
 * count them at each launch. The runtime (libcudart) records its kernel launches through the public
 * cuGraphAddKernelNode, so graphs have one owner whichever API built them, and it counts replays per kernel.
 *
 * Simplifications: dependencies are not kept (every node follows the one recorded before it, which is the
 * order a single capturing stream gives), and a capture involves one stream (cross-stream capture through
 * events joins nothing). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgc_report.h"
#include "fgd.h"

struct CUgraphNode_st {
    CUgraphNodeType type;
    CUDA_KERNEL_NODE_PARAMS kernel;
    void *dst;
    const void *src;
    size_t bytes, width; /* memset: `bytes` elements of `width` bytes */
    unsigned value;
    CUhostFn host_fn; /* host node: called at each launch */
    void *host_data;
};

struct CUgraph_st {
    int device;
    pthread_mutex_t lock;
    struct CUgraphNode_st **nodes;
    size_t n, cap;
};

struct CUgraphExec_st {
    int device;
    struct CUgraphNode_st *nodes; /* copies of the graph's nodes at instantiation */
    size_t n;
};

static atomic_ullong captures, instantiated, launches, replayed_kernels, replayed_copies, capture_ids;
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static int current_device(void)
{
    struct CUctx_st *c = fgd_current();
    return c ? c->device : 0;
}

static struct CUgraph_st *graph_new(void)
{
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->device = current_device();
    pthread_mutex_init(&g->lock, NULL);
    return g;
}

static CUresult add(struct CUgraph_st *g, const struct CUgraphNode_st *proto, CUgraphNode *out)
{
    struct CUgraphNode_st *node = malloc(sizeof *node);
    if (!node)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *node = *proto;
    pthread_mutex_lock(&g->lock);
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 64;
        struct CUgraphNode_st **grown = realloc(g->nodes, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&g->lock);
            free(node);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        g->nodes = grown;
        g->cap = cap;
    }
    g->nodes[g->n++] = node;
    pthread_mutex_unlock(&g->lock);
    if (out)
        *out = node;
    return CUDA_SUCCESS;
}

/* ---- stream capture ---- */

FGC_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    FGD_INIT();
    if (fgd_default_stream(s))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot capture, as in CUDA */
    if (s->capture)
        return CUDA_ERROR_ILLEGAL_STATE;
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraph_st *g = graph_new();
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->capture_mode = (int)mode;
    s->capture_id = atomic_fetch_add(&capture_ids, 1) + 1;
    s->capture = g;
    atomic_fetch_add(&captures, 1);
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *graph)
{
    FGD_INIT();
    if (!graph)
        return CUDA_ERROR_INVALID_VALUE;
    if (fgd_default_stream(s) || !s->capture)
        return CUDA_ERROR_ILLEGAL_STATE;
    *graph = s->capture;
    s->capture = NULL;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status)
{
    FGD_INIT();
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    *status = !fgd_default_stream(s) && s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

static CUresult capture_info(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
    FGD_INIT();
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraph_st *g = fgd_default_stream(s) ? NULL : s->capture;
    *status = g ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    if (id)
        *id = g ? s->capture_id : 0;
    if (graph)
        *graph = g;
    if (deps)
        *deps = NULL;
    if (edges)
        *edges = NULL;
    if (ndeps)
        *ndeps = 0;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                              CUgraph *graph, const CUgraphNode **deps,
                                              const CUgraphEdgeData **edges, size_t *ndeps)
{
    return capture_info(s, status, id, graph, deps, edges, ndeps);
}

/* CUDA 12's entry point (no edge data); CUDA 13's headers no longer declare it, programs built with 12 call it. */
FGC_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                              CUgraph *graph, const CUgraphNode **deps, size_t *ndeps);
CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                   const CUgraphNode **deps, size_t *ndeps)
{
    return capture_info(s, status, id, graph, deps, NULL, ndeps);
}

FGC_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

int fgd_capture_copy(CUstream s, void *dst, const void *src, size_t n, CUresult *rc)
{
    if (fgd_default_stream(s) || !s->capture)
        return 0;
    struct CUgraphNode_st node = {.type = CU_GRAPH_NODE_TYPE_MEMCPY, .dst = dst, .src = src, .bytes = n};
    *rc = n && (!dst || !src) ? CUDA_ERROR_INVALID_VALUE : add(s->capture, &node, NULL);
    return 1;
}

int fgd_capture_fill(CUstream s, CUdeviceptr dst, unsigned value, size_t width, size_t n, CUresult *rc)
{
    if (fgd_default_stream(s) || !s->capture)
        return 0;
    struct CUgraphNode_st node = {
        .type = CU_GRAPH_NODE_TYPE_MEMSET, .dst = (void *)(uintptr_t)dst, .value = value, .width = width, .bytes = n};
    *rc = n && !dst ? CUDA_ERROR_INVALID_VALUE : add(s->capture, &node, NULL);
    return 1;
}

int fgd_capture_host(CUstream s, CUhostFn fn, void *user, CUresult *rc)
{
    if (fgd_default_stream(s) || !s->capture)
        return 0;
    struct CUgraphNode_st node = {.type = CU_GRAPH_NODE_TYPE_HOST, .host_fn = fn, .host_data = user};
    *rc = fn ? add(s->capture, &node, NULL) : CUDA_ERROR_INVALID_VALUE;
    return 1;
}

/* ---- graphs built by hand or by capture ---- */

FGC_EXPORT CUresult cuGraphCreate(CUgraph *graph, unsigned int flags)
{
    FGD_INIT();
    if (!graph || flags)
        return CUDA_ERROR_INVALID_VALUE;
    *graph = graph_new();
    return *graph ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

FGC_EXPORT CUresult cuGraphDestroy(CUgraph g)
{
    FGD_INIT();
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < g->n; i++)
        free(g->nodes[i]);
    free(g->nodes);
    pthread_mutex_destroy(&g->lock);
    free(g);
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                            const CUDA_KERNEL_NODE_PARAMS *params)
{
    (void)deps, (void)ndeps;
    FGD_INIT();
    if (!out || !g || !params)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphNode_st node = {.type = CU_GRAPH_NODE_TYPE_KERNEL, .kernel = *params};
    return add(g, &node, out);
}

FGC_EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps)
{
    (void)deps, (void)ndeps;
    FGD_INIT();
    if (!out || !g)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphNode_st node = {.type = CU_GRAPH_NODE_TYPE_EMPTY};
    return add(g, &node, out);
}

FGC_EXPORT CUresult cuGraphAddHostNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                       const CUDA_HOST_NODE_PARAMS *params)
{
    (void)deps, (void)ndeps;
    FGD_INIT();
    if (!out || !g || !params || !params->fn)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphNode_st node = {
        .type = CU_GRAPH_NODE_TYPE_HOST, .host_fn = params->fn, .host_data = params->userData};
    return add(g, &node, out);
}

FGC_EXPORT CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *count)
{
    FGD_INIT();
    if (!g || !count)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g->lock);
    if (nodes)
        for (size_t i = 0; i < *count && i < g->n; i++)
            nodes[i] = g->nodes[i];
    if (!nodes || *count > g->n)
        *count = g->n;
    pthread_mutex_unlock(&g->lock);
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type)
{
    FGD_INIT();
    if (!node || !type)
        return CUDA_ERROR_INVALID_VALUE;
    *type = node->type;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS *params)
{
    FGD_INIT();
    if (!node || !params || node->type != CU_GRAPH_NODE_TYPE_KERNEL)
        return CUDA_ERROR_INVALID_VALUE;
    *params = node->kernel;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph g, unsigned long long flags)
{
    (void)flags;
    FGD_INIT();
    if (!exec || !g)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g->lock);
    e->nodes = g->n ? malloc(g->n * sizeof *e->nodes) : NULL;
    if (g->n && !e->nodes) {
        pthread_mutex_unlock(&g->lock);
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < g->n; i++)
        e->nodes[i] = *g->nodes[i];
    e->n = g->n;
    e->device = g->device;
    pthread_mutex_unlock(&g->lock);
    *exec = e;
    atomic_fetch_add(&instantiated, 1);
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuGraphLaunch(CUgraphExec e, CUstream s)
{
    FGD_INIT();
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fgd_default_stream(s) && s->capture)
        return CUDA_ERROR_NOT_SUPPORTED; /* a graph launched into a capture would become a child graph */
    unsigned long long kernels = 0, copies = 0;
    for (size_t i = 0; i < e->n; i++) {
        const struct CUgraphNode_st *node = &e->nodes[i];
        CUresult rc = CUDA_SUCCESS;
        if (node->type == CU_GRAPH_NODE_TYPE_KERNEL)
            kernels++;
        else if (node->type == CU_GRAPH_NODE_TYPE_MEMCPY)
            rc = fgd_copy(node->dst, node->src, node->bytes), copies++;
        else if (node->type == CU_GRAPH_NODE_TYPE_MEMSET)
            rc = fgd_fill((CUdeviceptr)(uintptr_t)node->dst, node->value, node->width, node->bytes), copies++;
        else if (node->type == CU_GRAPH_NODE_TYPE_HOST)
            node->host_fn(node->host_data);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    atomic_fetch_add(&launches, 1);
    atomic_fetch_add(&replayed_kernels, kernels);
    atomic_fetch_add(&replayed_copies, copies);
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuGraphExecDestroy(CUgraphExec e)
{
    FGD_INIT();
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    free(e->nodes);
    free(e);
    return CUDA_SUCCESS;
}

/* The graph section of the process report (driver/report.c). */
FG_HIDDEN void fgd_graph_report(FILE *f);
void fgd_graph_report(FILE *f)
{
    fprintf(f,
            "{\"captures\": %llu, \"instantiated\": %llu, \"launches\": %llu, \"replayed_kernel_launches\": %llu, "
            "\"replayed_copies\": %llu}",
            (unsigned long long)atomic_load(&captures), (unsigned long long)atomic_load(&instantiated),
            (unsigned long long)atomic_load(&launches), (unsigned long long)atomic_load(&replayed_kernels),
            (unsigned long long)atomic_load(&replayed_copies));
}
