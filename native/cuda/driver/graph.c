/* CUDA graphs as recorded no-ops. A stream in capture records the work submitted to it (kernel launches, async
 * copies and fills, host functions) as nodes of a graph instead of doing it; instantiating snapshots the nodes;
 * launching the executable graph replays them: copies, fills and host functions are done again (they are what
 * native mode simulates), kernels are counted (they never run) and, when a node's function is one of this
 * driver's, the memory its parameters point at counts as written by it again (driver/written.c): a kernel node
 * keeps a copy of its parameter values, as CUDA's does. cuBLAS records its GEMMs as host nodes that count them at
 * each launch. The runtime (libcudart) records its kernel launches through the public cuGraphAddKernelNode, so
 * graphs have one owner whichever API built them, and it counts replays per kernel.
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
#include "fgd_module.h"

struct CUgraphNode_st {
    CUgraphNodeType type;
    CUDA_KERNEL_NODE_PARAMS kernel;
    fgd_param_copy args; /* a kernel node of one of our functions: its parameter values */
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

/* A node's copy owns its parameter values, so a graph and its executable copies can be destroyed apart. */
static int node_copy(struct CUgraphNode_st *to, const struct CUgraphNode_st *from)
{
    *to = *from;
    memset(&to->args, 0, sizeof to->args);
    if (from->type != CU_GRAPH_NODE_TYPE_KERNEL || !from->args.bytes)
        return 0;
    const struct CUfunc_st *f = (const struct CUfunc_st *)from->kernel.func;
    to->args.bytes = malloc(from->args.size);
    to->args.size = from->args.size;
    to->args.packed = from->args.packed;
    to->args.ptrs = from->args.ptrs ? calloc(f->nparams, sizeof *to->args.ptrs) : NULL;
    if (!to->args.bytes || (from->args.ptrs && !to->args.ptrs)) {
        fgd_params_free(&to->args);
        return -1;
    }
    memcpy(to->args.bytes, from->args.bytes, from->args.size);
    for (unsigned i = 0; to->args.ptrs && i < f->nparams; i++)
        if (from->args.ptrs[i])
            to->args.ptrs[i] = to->args.bytes + ((unsigned char *)from->args.ptrs[i] - from->args.bytes);
    to->kernel.kernelParams = to->args.ptrs;
    to->kernel.extra = NULL;
    return 0;
}

static CUresult add(struct CUgraph_st *g, const struct CUgraphNode_st *proto, CUgraphNode *out)
{
    struct CUgraphNode_st *node = malloc(sizeof *node);
    if (!node)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *node = *proto; /* the caller's parameter copy moves into the node */
    pthread_mutex_lock(&g->lock);
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 64;
        struct CUgraphNode_st **grown = realloc(g->nodes, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&g->lock);
            free(node); /* its parameter copy stays the caller's to free */
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

/* A kernel node for function f with its parameters copied (the caller's pointers die with its stack frame). */
static CUresult add_kernel(struct CUgraph_st *g, const CUDA_KERNEL_NODE_PARAMS *p, CUgraphNode *out)
{
    struct CUgraphNode_st node = {.type = CU_GRAPH_NODE_TYPE_KERNEL, .kernel = *p};
    if (fgd_is_function(p->func)) {
        if (fgd_params_copy(p->func, p->kernelParams, p->extra, &node.args) != 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
        node.kernel.kernelParams = node.args.ptrs;
        node.kernel.extra = NULL;
    } else {
        node.kernel.kernelParams = NULL; /* a function of the runtime's: its parameters are not ours to read */
        node.kernel.extra = NULL;
    }
    CUresult rc = add(g, &node, out);
    if (rc != CUDA_SUCCESS)
        fgd_params_free(&node.args);
    return rc;
}

int fgd_capture_kernel(CUstream s, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned smem, void **params, void **extra, CUresult *rc)
{
    if (fgd_default_stream(s) || !s->capture)
        return 0;
    CUDA_KERNEL_NODE_PARAMS p = {.func = f, .gridDimX = gx, .gridDimY = gy, .gridDimZ = gz, .blockDimX = bx,
                                 .blockDimY = by, .blockDimZ = bz, .sharedMemBytes = smem, .kernelParams = params,
                                 .extra = extra};
    *rc = add_kernel(s->capture, &p, NULL);
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
    for (size_t i = 0; i < g->n; i++) {
        fgd_params_free(&g->nodes[i]->args);
        free(g->nodes[i]);
    }
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
    return add_kernel(g, params, out);
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
    size_t copied = 0;
    while (copied < g->n && node_copy(&e->nodes[copied], g->nodes[copied]) == 0)
        copied++;
    e->n = copied;
    if (copied < g->n) {
        pthread_mutex_unlock(&g->lock);
        cuGraphExecDestroy(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
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
        if (node->type == CU_GRAPH_NODE_TYPE_KERNEL) {
            kernels++;
            int known = fgd_is_function(node->kernel.func);
            if (known)
                fgd_launched_copy(node->kernel.func, e->device, &node->args);
            fgd_launch_busy(e->device, known ? node->kernel.func->name : NULL,
                            (unsigned long long)node->kernel.gridDimX * node->kernel.gridDimY * node->kernel.gridDimZ);
            fgd_load_part(e->device, FGD_PART_FIRST_LAUNCH);
        }
        else if (node->type == CU_GRAPH_NODE_TYPE_MEMCPY)
            rc = fgd_copy(node->dst, node->src, node->bytes, "cuGraphLaunch"), copies++;
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
    for (size_t i = 0; i < e->n; i++)
        fgd_params_free(&e->nodes[i].args);
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
