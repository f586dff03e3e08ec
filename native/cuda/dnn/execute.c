/* cudnnBackendExecute: a finalized plan runs on a finalized variant pack. Every non-virtual tensor of the plan's
 * operation graph must have a device pointer in the pack, on the handle's device, with the tensor's extent inside
 * its allocation; a plan that needs workspace must be given enough of it. Then the graph is one kernel launch on
 * the handle's stream, named after its operations ("cudnn:ConvolutionFwd", "cudnn:ConvolutionFwd+Pointwise"),
 * whose outputs (every tensor an operation does not only read) count as written by it. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "fgdnn.h"

static const fgdnn_desc *plan_graph(const fgdnn_desc *plan)
{
    const fgdnn_desc *cfg = fgdnn_get_desc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
    const fgdnn_desc *engine = cfg ? fgdnn_get_desc(cfg, CUDNN_ATTR_ENGINECFG_ENGINE) : NULL;
    return engine ? fgdnn_get_desc(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH) : NULL;
}

static bool flag(const fgdnn_desc *t, cudnnBackendAttributeName_t name)
{
    const fgdnn_attr *a = fgdnn_find(t, name);
    return a && a->type == CUDNN_TYPE_BOOLEAN && a->count == 1 && *(const bool *)a->data;
}

/* Bytes from a tensor's first element to past its last one, and its element count. */
static size_t tensor_extent(const fgdnn_desc *t, unsigned long long *elements)
{
    const fgdnn_attr *dims = fgdnn_find(t, CUDNN_ATTR_TENSOR_DIMENSIONS);
    const fgdnn_attr *strides = fgdnn_find(t, CUDNN_ATTR_TENSOR_STRIDES);
    const fgdnn_attr *dt = fgdnn_find(t, CUDNN_ATTR_TENSOR_DATA_TYPE);
    unsigned long long last = 0, n = 1;
    for (int64_t i = 0; i < dims->count; i++) {
        int64_t d = ((const int64_t *)dims->data)[i];
        last += (unsigned long long)(d - 1) * (unsigned long long)((const int64_t *)strides->data)[i];
        n *= (unsigned long long)d;
    }
    *elements = n;
    return (size_t)(last + 1) * fgdnn_dtype_size(*(const cudnnDataType_t *)dt->data);
}

/* The tensor attributes each operation only reads; its other tensors are outputs (an operation not listed here
 * counts all its tensors as written). */
static const struct {
    cudnnBackendDescriptorType_t op;
    cudnnBackendAttributeName_t in[3];
} inputs[] = {
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W}},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
     {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY}},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY}},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
     {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
      CUDNN_ATTR_OPERATION_POINTWISE_DYDESC}},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, {CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC}},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, {CUDNN_ATTR_OPERATION_REDUCTION_XDESC}},
    {CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, {CUDNN_ATTR_OPERATION_GENSTATS_XDESC}},
};

static bool only_read(cudnnBackendDescriptorType_t op, cudnnBackendAttributeName_t attr)
{
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++)
        if (inputs[i].op == op)
            for (size_t j = 0; j < 3; j++)
                if (inputs[i].in[j] == attr && attr)
                    return true;
    return false;
}

typedef struct {
    const void *p[FGDNN_MAX_OUTPUTS];
    size_t n;
} outputs;

static cudnnStatus_t check_tensors(const fgdnn_desc *op, const fgdnn_desc *pack, int device,
                                   unsigned long long *largest, outputs *outs)
{
    const fgdnn_attr *uids = fgdnn_find(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
    const fgdnn_attr *ptrs = fgdnn_find(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    int64_t n = uids ? uids->count : 0;
    for (size_t i = 0; i < op->nattrs; i++) {
        const fgdnn_attr *a = &op->attrs[i];
        if (a->type != CUDNN_TYPE_BACKEND_DESCRIPTOR)
            continue;
        for (int64_t k = 0; k < a->count; k++) {
            const fgdnn_desc *t = ((fgdnn_desc *const *)a->data)[k];
            if (t->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR || flag(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL))
                continue;
            int64_t uid = 0;
            fgdnn_get_i64(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, &uid);
            int64_t j = 0;
            while (j < n && ((const int64_t *)uids->data)[j] != uid)
                j++;
            if (j == n)
                return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendExecute: no pointer for tensor %lld in the "
                                                          "variant pack", (long long)uid);
            unsigned long long elements = 0;
            size_t bytes = tensor_extent(t, &elements);
            if (elements > *largest)
                *largest = elements;
            if (flag(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE)) /* a host scalar */
                continue;
            char what[64];
            snprintf(what, sizeof what, "cudnnBackendExecute: tensor %lld", (long long)uid);
            const void *p = ((void *const *)ptrs->data)[j];
            cudnnStatus_t s = fgdnn_check_device_ptr(p, device, bytes, what);
            if (s != CUDNN_STATUS_SUCCESS)
                return s;
            if (!only_read(op->type, a->name) && outs->n < FGDNN_MAX_OUTPUTS)
                outs->p[outs->n++] = p;
        }
    }
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t executionPlan,
                                             cudnnBackendDescriptor_t variantPack)
{
    fgdnn_desc *plan = fgdnn_desc_of(executionPlan), *pack = fgdnn_desc_of(variantPack);
    if (!fgdnn_handle_ok(handle))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendExecute: not a cuDNN handle");
    if (!plan || plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !pack ||
        pack->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendExecute: needs an execution plan and a variant pack");
    if (!plan->finalized || !pack->finalized)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendExecute: plan or variant pack not finalized");
    /* A finalized plan is read-only and may be shared between threads (torch caches plans); the pack is the
     * caller's own. */
    pthread_mutex_lock(&pack->lock);
    const fgdnn_desc *graph = plan_graph(plan);
    const fgdnn_attr *ops = graph ? fgdnn_find(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS) : NULL;
    cudnnStatus_t s = ops ? CUDNN_STATUS_SUCCESS
                          : fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendExecute: the plan has no operation graph");
    unsigned long long largest = 0;
    outputs outs = {.n = 0};
    char name[256] = "cudnn:";
    for (int64_t i = 0; s == CUDNN_STATUS_SUCCESS && i < ops->count; i++) {
        const fgdnn_desc *op = ((fgdnn_desc *const *)ops->data)[i];
        s = check_tensors(op, pack, handle->device, &largest, &outs);
        size_t len = strlen(name);
        snprintf(name + len, sizeof name - len, "%s%s", i ? "+" : "", fgdnn_op_kind(op->type));
    }
    int64_t ws = 0;
    fgdnn_get_i64(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, &ws);
    if (s == CUDNN_STATUS_SUCCESS && ws > 0) {
        const fgdnn_attr *w = fgdnn_find(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE);
        s = fgdnn_check_device_ptr(w && w->count == 1 ? *(void *const *)w->data : NULL, handle->device, (size_t)ws,
                                   "cudnnBackendExecute: workspace");
    }
    pthread_mutex_unlock(&pack->lock);
    if (s == CUDNN_STATUS_SUCCESS)
        s = fgdnn_launch(name, atomic_load(&handle->stream), largest, outs.p, outs.n);
    return s;
}

FGC_EXPORT cudnnStatus_t cudnnGetExecutionPlanWorkspaceSize(cudnnHandle_t handle, cudnnBackendDescriptor_t executionPlan,
                                                            cudnnBackendDescriptor_t variantPack, size_t *size)
{
    (void)variantPack; /* the size depends on the plan only: no dynamic shapes */
    fgdnn_desc *plan = fgdnn_desc_of(executionPlan);
    if (!fgdnn_handle_ok(handle) || !plan || plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !size)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetExecutionPlanWorkspaceSize: bad handle, plan or size");
    if (!plan->finalized)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetExecutionPlanWorkspaceSize: plan not finalized");
    int64_t ws = 0;
    fgdnn_get_i64(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, &ws);
    *size = (size_t)ws;
    return CUDNN_STATUS_SUCCESS;
}
