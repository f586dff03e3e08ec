/* The legacy descriptors torch uses besides the backend API (cudnn_ops.h, cudnn_cnn.h): tensor, filter,
 * convolution and activation descriptors. Each keeps what was set and gives it back; Set checks what cuDNN
 * documents as CUDNN_STATUS_BAD_PARAM. */
#include <stdlib.h>
#include <string.h>

#include "fgdnn.h"

#define TENSOR_MAGIC 0x66676474u /* "fgdt" */
#define FILTER_MAGIC 0x66676466u /* "fgdf" */
#define CONV_MAGIC 0x66676463u   /* "fgdc" */
#define ACT_MAGIC 0x66676461u    /* "fgda" */

struct cudnnFilterStruct {
    uint32_t magic;
    int set;
    cudnnDataType_t dtype;
    cudnnTensorFormat_t format;
    int nbdims;
    int dims[FGDNN_MAX_DIMS];
};

struct cudnnConvolutionStruct {
    uint32_t magic;
    int set;
    int n;
    int pad[FGDNN_MAX_DIMS], stride[FGDNN_MAX_DIMS], dilation[FGDNN_MAX_DIMS];
    cudnnConvolutionMode_t mode;
    cudnnDataType_t compute;
    cudnnMathType_t math;
    int groups;
};

struct cudnnActivationStruct {
    uint32_t magic;
    cudnnActivationMode_t mode;
    cudnnNanPropagation_t nan;
    double coef;
};

#define CREATE(fn, T, MAGIC, init)                                                                                \
    FGC_EXPORT cudnnStatus_t fn(T **out)                                                                          \
    {                                                                                                             \
        if (!out)                                                                                                 \
            return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, #fn ": NULL");                                               \
        T *d = calloc(1, sizeof *d);                                                                              \
        if (!d)                                                                                                   \
            return fgdnn_fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, #fn ": out of host memory");     \
        d->magic = MAGIC;                                                                                         \
        init;                                                                                                     \
        *out = d;                                                                                                 \
        return CUDNN_STATUS_SUCCESS;                                                                              \
    }
#define DESTROY(fn, T, MAGIC)                                                                                     \
    FGC_EXPORT cudnnStatus_t fn(T *d)                                                                             \
    {                                                                                                             \
        if (!d) /* destroying NULL is a no-op in cuDNN */                                                         \
            return CUDNN_STATUS_SUCCESS;                                                                          \
        if (d->magic != MAGIC)                                                                                    \
            return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, #fn ": not a descriptor of this kind");                      \
        d->magic = 0;                                                                                             \
        free(d);                                                                                                  \
        return CUDNN_STATUS_SUCCESS;                                                                              \
    }

CREATE(cudnnCreateTensorDescriptor, struct cudnnTensorStruct, TENSOR_MAGIC, (void)0)
DESTROY(cudnnDestroyTensorDescriptor, struct cudnnTensorStruct, TENSOR_MAGIC)
CREATE(cudnnCreateFilterDescriptor, struct cudnnFilterStruct, FILTER_MAGIC, (void)0)
DESTROY(cudnnDestroyFilterDescriptor, struct cudnnFilterStruct, FILTER_MAGIC)
CREATE(cudnnCreateConvolutionDescriptor, struct cudnnConvolutionStruct, CONV_MAGIC, d->groups = 1)
DESTROY(cudnnDestroyConvolutionDescriptor, struct cudnnConvolutionStruct, CONV_MAGIC)
CREATE(cudnnCreateActivationDescriptor, struct cudnnActivationStruct, ACT_MAGIC, (void)0)
DESTROY(cudnnDestroyActivationDescriptor, struct cudnnActivationStruct, ACT_MAGIC)

int fgdnn_tensor_ok(const struct cudnnTensorStruct *t) { return t && t->magic == TENSOR_MAGIC && t->set; }

unsigned long long fgdnn_tensor_elements(const struct cudnnTensorStruct *t)
{
    unsigned long long n = 1;
    for (int i = 0; i < t->nbdims; i++)
        n *= (unsigned long long)t->dims[i];
    return n;
}

size_t fgdnn_tensor_span_bytes(const struct cudnnTensorStruct *t)
{
    unsigned long long last = 0;
    for (int i = 0; i < t->nbdims; i++)
        last += (unsigned long long)(t->dims[i] - 1) * (unsigned long long)t->strides[i];
    return (size_t)(last + 1) * fgdnn_dtype_size(t->dtype);
}

FGC_EXPORT cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t t, cudnnDataType_t dtype, int nbdims,
                                                    const int dims[], const int strides[])
{
    if (!t || t->magic != TENSOR_MAGIC)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensorNdDescriptor: not a tensor descriptor");
    if (nbdims < 1 || nbdims > FGDNN_MAX_DIMS || !dims || !strides)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensorNdDescriptor: %d dimensions (1 to %d)", nbdims,
                          FGDNN_MAX_DIMS);
    if (!fgdnn_dtype_size(dtype))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensorNdDescriptor: data type %d", (int)dtype);
    for (int i = 0; i < nbdims; i++)
        if (dims[i] < 1 || strides[i] < 1)
            return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensorNdDescriptor: dimension %d is %d, stride %d", i,
                              dims[i], strides[i]);
    t->dtype = dtype;
    t->nbdims = nbdims;
    memcpy(t->dims, dims, (size_t)nbdims * sizeof *dims);
    memcpy(t->strides, strides, (size_t)nbdims * sizeof *strides);
    t->set = 1;
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t t, int requested,
                                                    cudnnDataType_t *dtype, int *nbdims, int dims[], int strides[])
{
    if (!fgdnn_tensor_ok(t) || requested < 0 || !dtype || !nbdims || (requested && (!dims || !strides)))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetTensorNdDescriptor: bad descriptor or outputs");
    *dtype = t->dtype;
    *nbdims = t->nbdims;
    for (int i = 0; i < requested && i < t->nbdims; i++) {
        dims[i] = t->dims[i];
        strides[i] = t->strides[i];
    }
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t t, cudnnTensorFormat_t format,
                                                    cudnnDataType_t dtype, int n, int c, int h, int w)
{
    int dims[4] = {n, c, h, w}, strides[4];
    if (format == CUDNN_TENSOR_NCHW) {
        strides[3] = 1, strides[2] = w, strides[1] = h * w, strides[0] = c * h * w;
    } else if (format == CUDNN_TENSOR_NHWC) {
        strides[1] = 1, strides[3] = c, strides[2] = w * c, strides[0] = c * h * w;
    } else {
        return (cudnnStatus_t)fgc_refuse("cudnn", "cudnnSetTensor4dDescriptor(vectorized format)",
                                         CUDNN_STATUS_NOT_SUPPORTED);
    }
    return cudnnSetTensorNdDescriptor(t, dtype, 4, dims, strides);
}

FGC_EXPORT cudnnStatus_t cudnnGetTensor4dDescriptor(const cudnnTensorDescriptor_t t, cudnnDataType_t *dtype, int *n,
                                                    int *c, int *h, int *w, int *ns, int *cs, int *hs, int *ws)
{
    if (!fgdnn_tensor_ok(t) || t->nbdims != 4 || !dtype || !n || !c || !h || !w || !ns || !cs || !hs || !ws)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetTensor4dDescriptor: not a 4-d tensor, or NULL output");
    *dtype = t->dtype;
    *n = t->dims[0], *c = t->dims[1], *h = t->dims[2], *w = t->dims[3];
    *ns = t->strides[0], *cs = t->strides[1], *hs = t->strides[2], *ws = t->strides[3];
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnGetTensorSizeInBytes(const cudnnTensorDescriptor_t t, size_t *size)
{
    if (!fgdnn_tensor_ok(t) || !size)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetTensorSizeInBytes: bad descriptor or size");
    *size = fgdnn_tensor_span_bytes(t);
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t f, cudnnDataType_t dtype,
                                                    cudnnTensorFormat_t format, int nbdims, const int dims[])
{
    if (!f || f->magic != FILTER_MAGIC || nbdims < 3 || nbdims > FGDNN_MAX_DIMS || !dims ||
        !fgdnn_dtype_size(dtype) || (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC &&
                                     format != CUDNN_TENSOR_NCHW_VECT_C))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetFilterNdDescriptor: bad descriptor, type, format or %d "
                                                  "dimensions (3 to %d)", nbdims, FGDNN_MAX_DIMS);
    for (int i = 0; i < nbdims; i++)
        if (dims[i] < 1)
            return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetFilterNdDescriptor: dimension %d is %d", i, dims[i]);
    f->dtype = dtype;
    f->format = format;
    f->nbdims = nbdims;
    memcpy(f->dims, dims, (size_t)nbdims * sizeof *dims);
    f->set = 1;
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnGetFilterNdDescriptor(const cudnnFilterDescriptor_t f, int requested,
                                                    cudnnDataType_t *dtype, cudnnTensorFormat_t *format, int *nbdims,
                                                    int dims[])
{
    if (!f || f->magic != FILTER_MAGIC || !f->set || requested < 0 || !dtype || !format || !nbdims ||
        (requested && !dims))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetFilterNdDescriptor: bad descriptor or outputs");
    *dtype = f->dtype;
    *format = f->format;
    *nbdims = f->nbdims;
    for (int i = 0; i < requested && i < f->nbdims; i++)
        dims[i] = f->dims[i];
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t c, int n, const int pad[],
                                                         const int stride[], const int dilation[],
                                                         cudnnConvolutionMode_t mode, cudnnDataType_t compute)
{
    if (!c || c->magic != CONV_MAGIC || n < 1 || n > FGDNN_MAX_DIMS - 2 || !pad || !stride || !dilation ||
        (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) || !fgdnn_dtype_size(compute))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionNdDescriptor: bad descriptor, mode, type or "
                                                  "%d spatial dimensions", n);
    for (int i = 0; i < n; i++)
        if (pad[i] < 0 || stride[i] < 1 || dilation[i] < 1)
            return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionNdDescriptor: dimension %d: pad %d, "
                                                      "stride %d, dilation %d", i, pad[i], stride[i], dilation[i]);
    c->n = n;
    memcpy(c->pad, pad, (size_t)n * sizeof *pad);
    memcpy(c->stride, stride, (size_t)n * sizeof *stride);
    memcpy(c->dilation, dilation, (size_t)n * sizeof *dilation);
    c->mode = mode;
    c->compute = compute;
    c->set = 1;
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnGetConvolutionNdDescriptor(const cudnnConvolutionDescriptor_t c, int requested, int *n,
                                                         int pad[], int stride[], int dilation[],
                                                         cudnnConvolutionMode_t *mode, cudnnDataType_t *compute)
{
    if (!c || c->magic != CONV_MAGIC || !c->set || requested < 0 || !n || !mode || !compute ||
        (requested && (!pad || !stride || !dilation)))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolutionNdDescriptor: bad descriptor or outputs");
    *n = c->n;
    for (int i = 0; i < requested && i < c->n; i++) {
        pad[i] = c->pad[i];
        stride[i] = c->stride[i];
        dilation[i] = c->dilation[i];
    }
    *mode = c->mode;
    *compute = c->compute;
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t c, cudnnMathType_t math)
{
    if (!c || c->magic != CONV_MAGIC || (int)math < CUDNN_DEFAULT_MATH || (int)math > CUDNN_FMA_MATH)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionMathType: bad descriptor or math type %d",
                          (int)math);
    c->math = math;
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnGetConvolutionMathType(cudnnConvolutionDescriptor_t c, cudnnMathType_t *math)
{
    if (!c || c->magic != CONV_MAGIC || !math)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolutionMathType: bad descriptor or output");
    *math = c->math;
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t c, int groups)
{
    if (!c || c->magic != CONV_MAGIC || groups < 1)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionGroupCount: bad descriptor or %d groups",
                          groups);
    c->groups = groups;
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnGetConvolutionGroupCount(cudnnConvolutionDescriptor_t c, int *groups)
{
    if (!c || c->magic != CONV_MAGIC || !groups)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolutionGroupCount: bad descriptor or output");
    *groups = c->groups;
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t a, cudnnActivationMode_t mode,
                                                      cudnnNanPropagation_t nan, double coef)
{
    if (!a || a->magic != ACT_MAGIC || (int)mode < CUDNN_ACTIVATION_SIGMOID || (int)mode > CUDNN_ACTIVATION_SWISH ||
        (nan != CUDNN_NOT_PROPAGATE_NAN && nan != CUDNN_PROPAGATE_NAN))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetActivationDescriptor: bad descriptor, mode %d or NaN "
                                                  "option %d", (int)mode, (int)nan);
    a->mode = mode;
    a->nan = nan;
    a->coef = coef;
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnGetActivationDescriptor(const cudnnActivationDescriptor_t a,
                                                      cudnnActivationMode_t *mode, cudnnNanPropagation_t *nan,
                                                      double *coef)
{
    if (!a || a->magic != ACT_MAGIC || !mode || !nan || !coef)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetActivationDescriptor: bad descriptor or outputs");
    *mode = a->mode;
    *nan = a->nan;
    *coef = a->coef;
    return CUDNN_STATUS_SUCCESS;
}
