/* What each backend descriptor type requires at Finalize, and what the library derives then: the engines an
 * operation graph has, heuristics' ranked engine configs, workspace sizes. FakeGPU's engine model: a graph made
 * of one convolution has three engines, 0 an implicit GEMM that needs no workspace, 1 an explicit GEMM that needs
 * the unfolded input (im2col) as workspace, and 2 the channels-last engine cuDNN 9 picks on Hopper for float NCHW
 * convolutions, which needs copies of its operands (see nhwc_workspace); an attention graph has one engine with a
 * small workspace (see ATTENTION_WORKSPACE); any other graph has one engine without workspace. Heuristics rank
 * engine 2 first where it applies, then the others by index, whatever the mode. */
#include <stdbool.h>
#include <string.h>

#include "fgdnn.h"

/* The handle attributes of graphs and plans are deprecated since cuDNN 9 (a device-property descriptor may stand
 * in), so a graph or plan without one is accepted; one that is set must be a live handle. */

static const struct {
    cudnnBackendDescriptorType_t type;
    const char *kind;
} op_kinds[] = {
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, "ConvolutionFwd"},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, "ConvolutionBwdFilter"},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, "ConvolutionBwdData"},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "Pointwise"},
    {CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, "GenStats"},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "Matmul"},
    {CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR, "BnFinalizeStatistics"},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "Reduction"},
    {CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR, "BnBwdWeights"},
    {CUDNN_BACKEND_OPERATION_RESAMPLE_FWD_DESCRIPTOR, "ResampleFwd"},
    {CUDNN_BACKEND_OPERATION_RESAMPLE_BWD_DESCRIPTOR, "ResampleBwd"},
    {CUDNN_BACKEND_OPERATION_CONCAT_DESCRIPTOR, "Concat"},
    {CUDNN_BACKEND_OPERATION_SIGNAL_DESCRIPTOR, "Signal"},
    {CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR, "NormFwd"},
    {CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR, "NormBwd"},
    {CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "Reshape"},
    {CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR, "Rng"},
    {CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR, "PagedCacheLoad"},
    {CUDNN_BACKEND_OPERATION_BLOCK_SCALE_QUANTIZE_DESCRIPTOR, "BlockScaleQuantize"},
    {CUDNN_BACKEND_OPERATION_BLOCK_SCALE_DEQUANTIZE_DESCRIPTOR, "BlockScaleDequantize"},
    {CUDNN_BACKEND_OPERATION_EXPAND_BAND_MATRIX_DESCRIPTOR, "ExpandBandMatrix"},
    {CUDNN_BACKEND_OPERATION_CONTRACT_BAND_MATRIX_DESCRIPTOR, "ContractBandMatrix"},
    {CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, "SdpaFwd"},
    {CUDNN_BACKEND_OPERATION_MOE_GROUPED_MATMUL_DESCRIPTOR, "MoeGroupedMatmul"},
    {CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR, "SdpaBwd"},
    {CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR, "DiagonalBandMask"},
    {CUDNN_BACKEND_OPERATION_SOFTMAX_DESCRIPTOR, "Softmax"},
    {CUDNN_BACKEND_OPERATION_TRANSPOSE_DESCRIPTOR, "Transpose"},
    {CUDNN_BACKEND_OPERATION_SLICE_DESCRIPTOR, "Slice"},
    {CUDNN_BACKEND_OPERATION_MOE_GROUPED_MATMUL_BWD_DESCRIPTOR, "MoeGroupedMatmulBwd"},
    {CUDNN_BACKEND_OPERATION_ROPE_FWD_DESCRIPTOR, "RopeFwd"},
    {CUDNN_BACKEND_OPERATION_ROPE_BWD_DESCRIPTOR, "RopeBwd"},
};

const char *fgdnn_op_kind(cudnnBackendDescriptorType_t type)
{
    for (size_t i = 0; i < sizeof op_kinds / sizeof op_kinds[0]; i++)
        if (op_kinds[i].type == type)
            return op_kinds[i].kind;
    return NULL;
}

/* The attribute-number block of each descriptor type whose attributes we check (cudnn_graph.h numbers them by
 * descriptor); other types accept any attribute. */
static const struct {
    cudnnBackendDescriptorType_t type;
    int lo, hi;
} blocks[] = {
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, 100, 199},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, 200, 299},
    {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, 300, 399},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, 400, 499},
    {CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, 600, 699},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, 700, 705},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, 706, 711},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, 712, 717},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, 800, 899},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, 900, 999},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, 1000, 1099},
    {CUDNN_BACKEND_ENGINE_DESCRIPTOR, 1300, 1399},
};

int fgdnn_attr_belongs(cudnnBackendDescriptorType_t type, cudnnBackendAttributeName_t name)
{
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++)
        if (blocks[i].type == type)
            return (int)name >= blocks[i].lo && (int)name <= blocks[i].hi;
    return 1;
}

int fgdnn_read_only(cudnnBackendDescriptorType_t type, cudnnBackendAttributeName_t name)
{
    (void)type;
    switch (name) {
    case CUDNN_ATTR_ENGINEHEUR_RESULTS:
    case CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE:
    case CUDNN_ATTR_ENGINECFG_INTERMEDIATE_INFO:
    case CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED:
    case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE:
    case CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT:
    case CUDNN_ATTR_ENGINE_KNOB_INFO:
    case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE:
    case CUDNN_ATTR_ENGINE_LAYOUT_INFO:
    case CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE:
        return 1;
    default:
        return 0;
    }
}

size_t fgdnn_dtype_size(cudnnDataType_t t)
{
    switch (t) {
    case CUDNN_DATA_DOUBLE:
    case CUDNN_DATA_INT64:
    case CUDNN_DATA_COMPLEX_FP32:
        return 8;
    case CUDNN_DATA_FLOAT:
    case CUDNN_DATA_INT32:
    case CUDNN_DATA_UINT32:
    case CUDNN_DATA_FAST_FLOAT_FOR_FP8:
        return 4;
    case CUDNN_DATA_HALF:
    case CUDNN_DATA_BFLOAT16:
        return 2;
    case CUDNN_DATA_INT8:
    case CUDNN_DATA_UINT8:
    case CUDNN_DATA_BOOLEAN:
    case CUDNN_DATA_BYTE_BOOLEAN:
    case CUDNN_DATA_FP8_E4M3:
    case CUDNN_DATA_FP8_E5M2:
    case CUDNN_DATA_FP8_E8M0:
    case CUDNN_DATA_FP8_E5M3:
    case CUDNN_DATA_FP4_E2M1: /* packed types round up to a byte: spans are an upper bound */
    case CUDNN_DATA_INT4:
    case CUDNN_DATA_UINT4:
        return 1;
    case CUDNN_DATA_COMPLEX_FP64:
        return 16;
    default:
        return 0;
    }
}

static int has(const fgdnn_desc *d, cudnnBackendAttributeName_t name)
{
    const fgdnn_attr *a = fgdnn_find(d, name);
    return a && a->count > 0;
}

static int64_t i64s(const fgdnn_desc *d, cudnnBackendAttributeName_t name, int64_t *out, int64_t max)
{
    const fgdnn_attr *a = fgdnn_find(d, name);
    if (!a || a->type != CUDNN_TYPE_INT64 || a->count > max)
        return -1;
    memcpy(out, a->data, (size_t)a->count * sizeof *out);
    return a->count;
}

static cudnnStatus_t finalize_tensor(fgdnn_desc *d)
{
    int64_t dims[FGDNN_MAX_DIMS + 1], strides[FGDNN_MAX_DIMS + 1], uid;
    int64_t nd = i64s(d, CUDNN_ATTR_TENSOR_DIMENSIONS, dims, FGDNN_MAX_DIMS);
    int64_t ns = i64s(d, CUDNN_ATTR_TENSOR_STRIDES, strides, FGDNN_MAX_DIMS);
    const fgdnn_attr *dt = fgdnn_find(d, CUDNN_ATTR_TENSOR_DATA_TYPE);
    if (!dt || dt->count != 1 || fgdnn_get_i64(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, &uid) != 0)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "tensor: data type and unique id are required");
    if (nd < 1 || nd != ns)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "tensor: %lld dimensions and %lld strides (1 to %d, equal)",
                          (long long)nd, (long long)ns, FGDNN_MAX_DIMS);
    for (int64_t i = 0; i < nd; i++)
        if (dims[i] < 1 || strides[i] < 0)
            return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "tensor %lld: dimension %lld is %lld, stride %lld",
                              (long long)uid, (long long)i, (long long)dims[i], (long long)strides[i]);
    if (!fgdnn_dtype_size(*(cudnnDataType_t *)dt->data))
        return fgdnn_fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "tensor %lld: data type %d", (long long)uid,
                          *(int *)dt->data);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t finalize_conv_desc(fgdnn_desc *d)
{
    int64_t nd = 0, v[FGDNN_MAX_DIMS];
    if (fgdnn_get_i64(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, &nd) != 0 || nd < 1 || nd > FGDNN_MAX_DIMS - 2 ||
        !has(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE) || !has(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "convolution: spatial dims, compute type and mode are required");
    static const cudnnBackendAttributeName_t arrays[] = {
        CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
        CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS};
    for (size_t i = 0; i < 4; i++) {
        int64_t n = i64s(d, arrays[i], v, FGDNN_MAX_DIMS);
        if (n != nd)
            return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "convolution: attribute %d has %lld values, spatial dims %lld",
                              (int)arrays[i], (long long)n, (long long)nd);
        for (int64_t k = 0; k < n; k++)
            if (v[k] < (i < 2 ? 1 : 0))
                return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "convolution: attribute %d value %lld", (int)arrays[i],
                                  (long long)v[k]);
    }
    return CUDNN_STATUS_SUCCESS;
}

/* The three tensors and the convolution of a convolution operation: x (input or its gradient), w (filter or its
 * gradient), y (output or its gradient). */
typedef struct {
    fgdnn_desc *x, *w, *y, *conv;
} conv_parts;

static int conv_parts_of(const fgdnn_desc *op, conv_parts *p)
{
    switch (op->type) {
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
        *p = (conv_parts){fgdnn_get_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X),
                          fgdnn_get_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W),
                          fgdnn_get_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y),
                          fgdnn_get_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC)};
        return 1;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
        *p = (conv_parts){fgdnn_get_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX),
                          fgdnn_get_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W),
                          fgdnn_get_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY),
                          fgdnn_get_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC)};
        return 1;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
        *p = (conv_parts){fgdnn_get_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X),
                          fgdnn_get_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW),
                          fgdnn_get_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY),
                          fgdnn_get_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC)};
        return 1;
    default:
        return 0;
    }
}

/* x [N, C, in...], w [K, C/groups, k...], y [N, K, out...] with out = (in + pre + post - dil*(k-1) - 1)/stride + 1. */
static cudnnStatus_t finalize_conv_op(fgdnn_desc *op)
{
    conv_parts p;
    conv_parts_of(op, &p);
    if (!p.x || !p.w || !p.y || !p.conv || p.x->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR ||
        p.w->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR || p.y->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR ||
        p.conv->type != CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: x, w, y tensors and a convolution descriptor are required",
                          fgdnn_op_kind(op->type));
    int64_t x[FGDNN_MAX_DIMS], w[FGDNN_MAX_DIMS], y[FGDNN_MAX_DIMS], nsp = 0;
    int64_t dil[FGDNN_MAX_DIMS], str[FGDNN_MAX_DIMS], pre[FGDNN_MAX_DIMS], post[FGDNN_MAX_DIMS];
    int64_t nx = i64s(p.x, CUDNN_ATTR_TENSOR_DIMENSIONS, x, FGDNN_MAX_DIMS);
    int64_t nw = i64s(p.w, CUDNN_ATTR_TENSOR_DIMENSIONS, w, FGDNN_MAX_DIMS);
    int64_t ny = i64s(p.y, CUDNN_ATTR_TENSOR_DIMENSIONS, y, FGDNN_MAX_DIMS);
    fgdnn_get_i64(p.conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, &nsp);
    i64s(p.conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, dil, FGDNN_MAX_DIMS);
    i64s(p.conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, str, FGDNN_MAX_DIMS);
    i64s(p.conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, pre, FGDNN_MAX_DIMS);
    i64s(p.conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, post, FGDNN_MAX_DIMS);
    const char *kind = fgdnn_op_kind(op->type);
    if (nx != nsp + 2 || nw != nx || ny != nx)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: tensors of %lld, %lld, %lld dimensions for %lld spatial ones",
                          kind, (long long)nx, (long long)nw, (long long)ny, (long long)nsp);
    if (x[0] != y[0] || y[1] != w[0] || w[1] < 1 || x[1] % w[1] != 0 || w[0] % (x[1] / w[1]) != 0)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: batch/channel mismatch x[%lld,%lld] w[%lld,%lld] y[%lld,%lld]",
                          kind, (long long)x[0], (long long)x[1], (long long)w[0], (long long)w[1], (long long)y[0],
                          (long long)y[1]);
    for (int64_t i = 0; i < nsp; i++) {
        int64_t span = x[i + 2] + pre[i] + post[i] - dil[i] * (w[i + 2] - 1) - 1;
        int64_t out = span < 0 ? 0 : span / str[i] + 1;
        if (out != y[i + 2])
            return fgdnn_fail(CUDNN_STATUS_BAD_PARAM,
                              "%s: spatial dim %lld: input %lld, filter %lld, stride %lld, dilation %lld, "
                              "padding %lld+%lld give %lld, output has %lld",
                              kind, (long long)i, (long long)x[i + 2], (long long)w[i + 2], (long long)str[i],
                              (long long)dil[i], (long long)pre[i], (long long)post[i], (long long)out,
                              (long long)y[i + 2]);
    }
    return CUDNN_STATUS_SUCCESS;
}

/* The single convolution of a graph, or NULL. */
static const fgdnn_desc *only_conv(const fgdnn_desc *graph)
{
    const fgdnn_attr *ops = fgdnn_find(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS);
    conv_parts p;
    if (!ops || ops->count != 1 || !conv_parts_of(((fgdnn_desc **)ops->data)[0], &p))
        return NULL;
    return ((fgdnn_desc **)ops->data)[0];
}

/* ---- the engine model ---- */

enum { ENGINE_IMPLICIT_GEMM, ENGINE_EXPLICIT_GEMM, ENGINE_NHWC, CONV_ENGINES };

/* Compute capability (major*10+minor) of the device a graph is for: its handle's, else the current device's. */
static int graph_cc(const fgdnn_desc *graph)
{
    const fgdnn_attr *h = fgdnn_find(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE);
    int dev = 0, major = 0, minor = 0;
    if (h && h->type == CUDNN_TYPE_HANDLE && h->count == 1 && fgdnn_handle_ok(*(cudnnHandle_t *)h->data))
        dev = (*(cudnnHandle_t *)h->data)->device;
    else if (cudaGetDevice(&dev) != cudaSuccess)
        return 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        cudaGetLastError(); /* not left as the runtime's sticky error */
        return 0;
    }
    return major * 10 + minor;
}

/* Bytes of a packed float tensor in NCHW order (row-major strides; a dimension of 1 may have any stride), else 0. */
static int64_t packed_float_bytes(const fgdnn_desc *t, int64_t *dims, int64_t *n)
{
    int64_t strides[FGDNN_MAX_DIMS];
    const fgdnn_attr *dt = fgdnn_find(t, CUDNN_ATTR_TENSOR_DATA_TYPE);
    *n = i64s(t, CUDNN_ATTR_TENSOR_DIMENSIONS, dims, FGDNN_MAX_DIMS);
    if (!dt || *(cudnnDataType_t *)dt->data != CUDNN_DATA_FLOAT ||
        i64s(t, CUDNN_ATTR_TENSOR_STRIDES, strides, FGDNN_MAX_DIMS) != *n || *n < 3)
        return 0;
    int64_t elements = 1;
    for (int64_t i = *n - 1; i >= 0; i--) {
        if (dims[i] != 1 && strides[i] != elements)
            return 0;
        elements *= dims[i];
    }
    return elements * 4;
}

/* Engine 2, as a real H200 (cuDNN 9.19, torch 2.11, cudnn.benchmark off) showed it in tests/data/gpu/h200: each
 * float convolution of packed NCHW tensors with channel counts divisible by 4 took a workspace that holds a copy
 * of every operand it reads and, for the data gradient, of the one it writes, plus a piece of at most 512 bytes
 * (the allocator's 512-byte granule is all the capture can see; 512 is its bound) - the copies a channels-last
 * kernel needs of NCHW tensors:
 *     forward          x + w + 512        (conv1d_layernorm, cnn_step's second conv, torch.json's conv2d)
 *     data gradient    dy + w + dx + 512  (conv1d_layernorm, cnn_step)
 *     filter gradient  x + dy + dw + 512  and more: 3146240 and 2064896 bytes more in the two measurements (split
 *                      partial sums of dw, by how cuDNN splits the reduction; two points fix no rule), so this is a
 *                      lower bound.
 * cnn_step's first convolution (3 input channels) took no workspace in either pass: engine 2 does not apply.
 * Assumed, not measured: that 4 divides the output channels too, one group, and the same engine for every
 * stride, padding and dilation; other data types, channels-last tensors and other architectures keep engines 0
 * and 1 (an engine's workspace is a property of its kernels, which are built per architecture). */
#define NHWC_SMALL_PIECE 512

static int64_t nhwc_workspace(const fgdnn_desc *graph, const fgdnn_desc *op)
{
    conv_parts p;
    int64_t x[FGDNN_MAX_DIMS], w[FGDNN_MAX_DIMS], y[FGDNN_MAX_DIMS], nx, nw, ny;
    if (!conv_parts_of(op, &p) || graph_cc(graph) / 10 != 9)
        return -1;
    int64_t bx = packed_float_bytes(p.x, x, &nx), bw = packed_float_bytes(p.w, w, &nw);
    int64_t by = packed_float_bytes(p.y, y, &ny);
    if (!bx || !bw || !by || x[1] != w[1] || x[1] % 4 != 0 || w[0] % 4 != 0)
        return -1;
    switch (op->type) {
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
        return bx + bw + NHWC_SMALL_PIECE;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
        return by + bw + bx + NHWC_SMALL_PIECE;
    default:
        return bx + by + bw + NHWC_SMALL_PIECE;
    }
}

/* A graph as cudnn-frontend lowers scaled dot-product attention (torch 2.11 takes cuDNN's attention on Hopper):
 * two or more matrix products and a reduction (the softmax's). On the H200 both the forward plan (two shapes:
 * 8x8x512x64 and 4x16x1024x128, bf16, causal) and the backward one (8x8x512x64) asked for a workspace the
 * caching allocator served with one 512-byte block, beside the frontend's own dQ accumulator and softmax sums,
 * which torch allocates with it either way (mem_workloads.json's sdpa_causal_bf16, torch.json's sdpa_bf16). 512
 * bytes is the bound of what was measured, assumed for every shape on Hopper. */
#define ATTENTION_WORKSPACE 512

static int attention(const fgdnn_desc *graph)
{
    const fgdnn_attr *ops = fgdnn_find(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS);
    int matmuls = 0, reductions = 0;
    for (int64_t i = 0; ops && i < ops->count; i++) {
        cudnnBackendDescriptorType_t t = ((fgdnn_desc **)ops->data)[i]->type;
        matmuls += t == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR;
        reductions += t == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR;
    }
    return matmuls >= 2 && reductions >= 1;
}

static int64_t engine_count(const fgdnn_desc *graph) { return only_conv(graph) ? CONV_ENGINES : 1; }

/* The workspace engine `index` needs for `graph`; -1 when it does not support the graph. */
static int64_t workspace_of(const fgdnn_desc *graph, int64_t index)
{
    const fgdnn_desc *op = only_conv(graph);
    if (!op) /* measured on Hopper only: elsewhere attention keeps no workspace */
        return index == 0 ? (attention(graph) && graph_cc(graph) / 10 == 9 ? ATTENTION_WORKSPACE : 0) : -1;
    if (index == ENGINE_NHWC)
        return nhwc_workspace(graph, op);
    if (index != ENGINE_EXPLICIT_GEMM)
        return 0;
    conv_parts p;
    conv_parts_of(op, &p);
    int64_t x[FGDNN_MAX_DIMS], w[FGDNN_MAX_DIMS], y[FGDNN_MAX_DIMS];
    int64_t n = i64s(p.x, CUDNN_ATTR_TENSOR_DIMENSIONS, x, FGDNN_MAX_DIMS);
    i64s(p.w, CUDNN_ATTR_TENSOR_DIMENSIONS, w, FGDNN_MAX_DIMS);
    i64s(p.y, CUDNN_ATTR_TENSOR_DIMENSIONS, y, FGDNN_MAX_DIMS);
    const fgdnn_attr *dt = fgdnn_find(p.x, CUDNN_ATTR_TENSOR_DATA_TYPE);
    int64_t bytes = x[0] * x[1] * (int64_t)fgdnn_dtype_size(*(cudnnDataType_t *)dt->data);
    for (int64_t i = 2; i < n; i++)
        bytes *= w[i] * y[i];
    return bytes; /* the unfolded input (im2col) */
}

static int64_t engine_workspace(const fgdnn_desc *engine)
{
    const fgdnn_desc *graph = fgdnn_get_desc(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH);
    int64_t index = 0;
    fgdnn_get_i64(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, &index);
    int64_t ws = graph ? workspace_of(graph, index) : 0;
    return ws < 0 ? 0 : ws;
}

/* Heuristics' order: engine 2 first where it supports the graph, then the others by index. */
static int64_t ranked(const fgdnn_desc *graph, int64_t *order)
{
    int64_t n = 0;
    if (engine_count(graph) > ENGINE_NHWC && workspace_of(graph, ENGINE_NHWC) >= 0)
        order[n++] = ENGINE_NHWC;
    for (int64_t i = 0; i < engine_count(graph) && i < ENGINE_NHWC; i++)
        order[n++] = i;
    return n;
}

static cudnnStatus_t finalize_graph(fgdnn_desc *d)
{
    const fgdnn_attr *h = fgdnn_find(d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE);
    if (h && (h->type != CUDNN_TYPE_HANDLE || h->count != 1 || !fgdnn_handle_ok(*(cudnnHandle_t *)h->data)))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "operation graph: not a valid cuDNN handle");
    const fgdnn_attr *ops = fgdnn_find(d, CUDNN_ATTR_OPERATIONGRAPH_OPS);
    if (!ops || ops->type != CUDNN_TYPE_BACKEND_DESCRIPTOR || ops->count < 1)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "operation graph: no operations");
    for (int64_t i = 0; i < ops->count; i++) {
        cudnnBackendDescriptorType_t t = ((fgdnn_desc **)ops->data)[i]->type;
        if (!fgdnn_op_kind(t))
            return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "operation graph: element %lld (type %d) is no operation",
                              (long long)i, (int)t);
    }
    int64_t count = engine_count(d);
    return fgdnn_put(d, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &count);
}

static cudnnStatus_t finalize_engine(fgdnn_desc *d)
{
    const fgdnn_desc *graph = fgdnn_get_desc(d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH);
    int64_t index = -1;
    if (!graph || graph->type != CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR ||
        fgdnn_get_i64(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, &index) != 0)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "engine: an operation graph and a global index are required");
    if (index < 0 || index >= engine_count(graph))
        return fgdnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "engine: global index %lld, the graph has %lld engines",
                          (long long)index, (long long)engine_count(graph));
    if (workspace_of(graph, index) < 0)
        return fgdnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "engine %lld does not support this graph", (long long)index);
    /* No tunable knobs, notes or layout preferences. */
    cudnnStatus_t s = fgdnn_put(d, CUDNN_ATTR_ENGINE_KNOB_INFO, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, NULL);
    if (s == CUDNN_STATUS_SUCCESS)
        s = fgdnn_put(d, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 0, NULL);
    if (s == CUDNN_STATUS_SUCCESS)
        s = fgdnn_put(d, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 0, NULL);
    if (s == CUDNN_STATUS_SUCCESS)
        s = fgdnn_put(d, CUDNN_ATTR_ENGINE_LAYOUT_INFO, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, NULL);
    return s;
}

static cudnnStatus_t finalize_engine_cfg(fgdnn_desc *d)
{
    const fgdnn_desc *engine = fgdnn_get_desc(d, CUDNN_ATTR_ENGINECFG_ENGINE);
    if (!engine || engine->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "engine config: an engine is required");
    const fgdnn_attr *knobs = fgdnn_find(d, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES);
    if (knobs && knobs->count > 0)
        return fgdnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "engine config: the engine has no knobs to choose");
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    if (!knobs)
        s = fgdnn_put(d, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, NULL);
    int64_t ws = engine_workspace(engine);
    return s == CUDNN_STATUS_SUCCESS ? fgdnn_put(d, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &ws)
                                     : s;
}

/* Make a finalized descriptor of `type` from attributes given as (name, type, descriptor) triples. */
static fgdnn_desc *built(cudnnBackendDescriptorType_t type, cudnnBackendAttributeName_t a1, fgdnn_desc *v1,
                         cudnnBackendAttributeName_t a2, int64_t v2)
{
    fgdnn_desc *d = fgdnn_desc_new(type);
    if (!d)
        return NULL;
    cudnnStatus_t s = fgdnn_put(d, a1, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v1);
    if (s == CUDNN_STATUS_SUCCESS && a2)
        s = fgdnn_put(d, a2, CUDNN_TYPE_INT64, 1, &v2);
    if (s == CUDNN_STATUS_SUCCESS)
        s = fgdnn_finalize(d);
    if (s != CUDNN_STATUS_SUCCESS) {
        fgdnn_desc_free(d);
        return NULL;
    }
    d->finalized = 1;
    return d;
}

static cudnnStatus_t finalize_heuristics(fgdnn_desc *d)
{
    fgdnn_desc *graph = fgdnn_get_desc(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
    if (!graph || graph->type != CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR || !has(d, CUDNN_ATTR_ENGINEHEUR_MODE))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "engine heuristics: an operation graph and a mode are required");
    int64_t order[CONV_ENGINES], n = ranked(graph, order);
    fgdnn_desc *cfgs[CONV_ENGINES] = {0};
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    for (int64_t i = 0; i < n && s == CUDNN_STATUS_SUCCESS; i++) {
        fgdnn_desc *engine = built(CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph,
                                   CUDNN_ATTR_ENGINE_GLOBAL_INDEX, order[i]);
        cfgs[i] = engine ? built(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, CUDNN_ATTR_ENGINECFG_ENGINE, engine, 0, 0) : NULL;
        fgdnn_desc_free(engine);
        if (!cfgs[i])
            s = fgdnn_fail(CUDNN_STATUS_INTERNAL_ERROR, "engine heuristics: engine %lld did not build",
                           (long long)order[i]);
    }
    if (s == CUDNN_STATUS_SUCCESS)
        s = fgdnn_put(d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, cfgs);
    for (int64_t i = 0; i < n; i++)
        fgdnn_desc_free(cfgs[i]);
    return s;
}

static cudnnStatus_t finalize_plan(fgdnn_desc *d)
{
    const fgdnn_attr *h = fgdnn_find(d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE);
    const fgdnn_desc *cfg = fgdnn_get_desc(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
    if (h && (h->type != CUDNN_TYPE_HANDLE || h->count != 1 || !fgdnn_handle_ok(*(cudnnHandle_t *)h->data)))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "execution plan: not a valid cuDNN handle");
    if (!cfg || cfg->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "execution plan: an engine config is required");
    if (has(d, CUDNN_ATTR_EXECUTION_PLAN_RUN_ONLY_INTERMEDIATE_UIDS))
        return (cudnnStatus_t)fgc_refuse("cudnn", "cudnnBackendFinalize(execution plan with intermediates)",
                                         CUDNN_STATUS_NOT_SUPPORTED);
    int64_t ws = 0;
    fgdnn_get_i64(cfg, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, &ws);
    return fgdnn_put(d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &ws);
}

static cudnnStatus_t finalize_variant_pack(fgdnn_desc *d)
{
    const fgdnn_attr *uids = fgdnn_find(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
    const fgdnn_attr *ptrs = fgdnn_find(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    int64_t nu = uids ? uids->count : 0, np = ptrs ? ptrs->count : 0;
    if (nu != np || (uids && uids->type != CUDNN_TYPE_INT64) || (ptrs && ptrs->type != CUDNN_TYPE_VOID_PTR))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "variant pack: %lld unique ids for %lld data pointers",
                          (long long)nu, (long long)np);
    if (has(d, CUDNN_ATTR_VARIANT_PACK_INTERMEDIATES))
        return (cudnnStatus_t)fgc_refuse("cudnn", "cudnnBackendFinalize(variant pack with intermediates)",
                                         CUDNN_STATUS_NOT_SUPPORTED);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t fgdnn_finalize(fgdnn_desc *d)
{
    switch (d->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
        return finalize_tensor(d);
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
        return finalize_conv_desc(d);
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
        return finalize_conv_op(d);
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
        return finalize_graph(d);
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
        return finalize_engine(d);
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
        return finalize_engine_cfg(d);
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
        return finalize_heuristics(d);
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
        return finalize_plan(d);
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
        return finalize_variant_pack(d);
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR:
        if (!has(d, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE) || !has(d, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE))
            return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "knob choice: type and value are required");
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_BACKEND_INTERMEDIATE_INFO_DESCRIPTOR:
    case CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR:
    case CUDNN_BACKEND_LAYOUT_INFO_DESCRIPTOR:
        /* Read-only descriptors the library fills; the API says finalizing one is not supported. */
        return fgdnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "descriptor type %d is read-only", (int)d->type);
    default:
        /* Other operations and their parameter descriptors (pointwise, matmul, reduction, ...): kept as set;
         * their execution is recorded by kind, nothing about them is computed. */
        return CUDNN_STATUS_SUCCESS;
    }
}
