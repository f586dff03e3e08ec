/* Batch normalization through the legacy API (cudnn_ops.h), the path torch's BatchNorm2d takes: argument checks
 * as cuDNN documents them, device pointers checked against the program's allocations, one launch recorded per
 * call. Workspace: none. Reserve space (training, kept for the backward pass): none for plain batch norm; one bit
 * per element when an activation is fused, the mask its backward needs. */
#include "fgdnn.h"

static cudnnStatus_t check_mode(cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const char *fn)
{
    if (mode != CUDNN_BATCHNORM_PER_ACTIVATION && mode != CUDNN_BATCHNORM_SPATIAL &&
        mode != CUDNN_BATCHNORM_SPATIAL_PERSISTENT)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: mode %d", fn, (int)mode);
    if (ops != CUDNN_BATCHNORM_OPS_BN && ops != CUDNN_BATCHNORM_OPS_BN_ACTIVATION &&
        ops != CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: bnOps %d", fn, (int)ops);
    return CUDNN_STATUS_SUCCESS;
}

/* x and y the same shape of 4 or 5 dimensions; the parameter tensor 1xCx1x1 (spatial) or 1xCxHxW. */
static cudnnStatus_t check_shapes(cudnnBatchNormMode_t mode, const struct cudnnTensorStruct *x,
                                  const struct cudnnTensorStruct *y, const struct cudnnTensorStruct *p, const char *fn)
{
    if (!fgdnn_tensor_ok(x) || !fgdnn_tensor_ok(y) || !fgdnn_tensor_ok(p))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: a tensor descriptor is missing or not set", fn);
    if ((x->nbdims != 4 && x->nbdims != 5) || y->nbdims != x->nbdims || p->nbdims != x->nbdims)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: tensors of %d, %d, %d dimensions", fn, x->nbdims, y->nbdims,
                          p->nbdims);
    for (int i = 0; i < x->nbdims; i++) {
        int want = i == 0 ? 1 : i == 1 || mode == CUDNN_BATCHNORM_PER_ACTIVATION ? x->dims[i] : 1;
        if (y->dims[i] != x->dims[i] || p->dims[i] != want)
            return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: dimension %d: x %d, y %d, parameters %d (want %d)", fn, i,
                              x->dims[i], y->dims[i], p->dims[i], want);
    }
    return CUDNN_STATUS_SUCCESS;
}

#define TRY(call)                                                                                                 \
    do {                                                                                                          \
        cudnnStatus_t try_s_ = (call);                                                                            \
        if (try_s_ != CUDNN_STATUS_SUCCESS)                                                                       \
            return try_s_;                                                                                        \
    } while (0)

/* A device pointer that may be NULL (optional in the API). */
static cudnnStatus_t optional(const void *p, int device, size_t bytes, const char *what)
{
    return p ? fgdnn_check_device_ptr(p, device, bytes, what) : CUDNN_STATUS_SUCCESS;
}

static size_t reserve_bytes(cudnnBatchNormOps_t ops, const struct cudnnTensorStruct *x)
{
    return ops == CUDNN_BATCHNORM_OPS_BN ? 0 : (size_t)((fgdnn_tensor_elements(x) + 31) / 32 * 4);
}

FGC_EXPORT cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const cudnnTensorDescriptor_t x,
    const cudnnTensorDescriptor_t z, const cudnnTensorDescriptor_t y, const cudnnTensorDescriptor_t params,
    const cudnnActivationDescriptor_t act, size_t *size)
{
    (void)z, (void)act;
    static const char fn[] = "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize";
    if (!fgdnn_handle_ok(handle) || !size)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: bad handle or size", fn);
    TRY(check_mode(mode, ops, fn));
    TRY(check_shapes(mode, x, y, params, fn));
    *size = 0;
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const cudnnTensorDescriptor_t x,
    const cudnnTensorDescriptor_t y, const cudnnTensorDescriptor_t dy, const cudnnTensorDescriptor_t dz,
    const cudnnTensorDescriptor_t dx, const cudnnTensorDescriptor_t dparams, const cudnnActivationDescriptor_t act,
    size_t *size)
{
    (void)y, (void)dy, (void)dz, (void)act;
    static const char fn[] = "cudnnGetBatchNormalizationBackwardExWorkspaceSize";
    if (!fgdnn_handle_ok(handle) || !size)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: bad handle or size", fn);
    TRY(check_mode(mode, ops, fn));
    TRY(check_shapes(mode, x, dx, dparams, fn));
    *size = 0;
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnnHandle_t handle,
                                                                              cudnnBatchNormMode_t mode,
                                                                              cudnnBatchNormOps_t ops,
                                                                              const cudnnActivationDescriptor_t act,
                                                                              const cudnnTensorDescriptor_t x,
                                                                              size_t *size)
{
    (void)act;
    static const char fn[] = "cudnnGetBatchNormalizationTrainingExReserveSpaceSize";
    if (!fgdnn_handle_ok(handle) || !size || !fgdnn_tensor_ok(x))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: bad handle, tensor or size", fn);
    TRY(check_mode(mode, ops, fn));
    *size = reserve_bytes(ops, x);
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void *alpha, const void *beta,
    const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnTensorDescriptor_t zDesc, const void *z,
    const cudnnTensorDescriptor_t yDesc, void *y, const cudnnTensorDescriptor_t pDesc, const void *scale,
    const void *bias, double factor, void *runMean, void *runVar, double eps, void *saveMean, void *saveInvVar,
    cudnnActivationDescriptor_t act, void *ws, size_t wsBytes, void *reserve, size_t reserveBytes)
{
    (void)factor, (void)act, (void)ws, (void)wsBytes;
    static const char fn[] = "cudnnBatchNormalizationForwardTrainingEx";
    if (!fgdnn_handle_ok(handle) || !alpha || !beta)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: bad handle or NULL alpha/beta", fn);
    TRY(check_mode(mode, ops, fn));
    TRY(check_shapes(mode, xDesc, yDesc, pDesc, fn));
    if (eps < CUDNN_BN_MIN_EPSILON || (!saveMean) != (!saveInvVar) || (!runMean) != (!runVar))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: epsilon %g, or only one of a mean/variance pair given", fn,
                          eps);
    if (reserveBytes < reserve_bytes(ops, xDesc))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: reserve space of %zu bytes, %zu needed", fn, reserveBytes,
                          reserve_bytes(ops, xDesc));
    int dev = handle->device;
    size_t pb = fgdnn_tensor_span_bytes(pDesc);
    TRY(fgdnn_check_device_ptr(x, dev, fgdnn_tensor_span_bytes(xDesc), "x"));
    TRY(fgdnn_check_device_ptr(y, dev, fgdnn_tensor_span_bytes(yDesc), "y"));
    TRY(fgdnn_check_device_ptr(scale, dev, pb, "bnScale"));
    TRY(fgdnn_check_device_ptr(bias, dev, pb, "bnBias"));
    TRY(optional(runMean, dev, pb, "resultRunningMean"));
    TRY(optional(runVar, dev, pb, "resultRunningVariance"));
    TRY(optional(saveMean, dev, pb, "resultSaveMean"));
    TRY(optional(saveInvVar, dev, pb, "resultSaveInvVariance"));
    if (ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION)
        TRY(fgdnn_check_device_ptr(z, dev, fgdnn_tensor_ok(zDesc) ? fgdnn_tensor_span_bytes(zDesc) : 0, "z"));
    TRY(optional(reserve, dev, reserveBytes, "reserveSpace"));
    const void *outs[] = {y, runMean, runVar, saveMean, saveInvVar, reserve};
    return fgdnn_launch("cudnn:BatchNormalizationForwardTraining", atomic_load(&handle->stream),
                        fgdnn_tensor_elements(xDesc), outs, sizeof outs / sizeof outs[0]);
}

FGC_EXPORT cudnnStatus_t cudnnBatchNormalizationBackwardEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void *alphaData,
    const void *betaData, const void *alphaParam, const void *betaParam, const cudnnTensorDescriptor_t xDesc,
    const void *x, const cudnnTensorDescriptor_t yDesc, const void *y, const cudnnTensorDescriptor_t dyDesc,
    const void *dy, const cudnnTensorDescriptor_t dzDesc, void *dz, const cudnnTensorDescriptor_t dxDesc, void *dx,
    const cudnnTensorDescriptor_t dpDesc, const void *scale, const void *bias, void *dScale, void *dBias, double eps,
    const void *savedMean, const void *savedInvVar, cudnnActivationDescriptor_t act, void *ws, size_t wsBytes,
    void *reserve, size_t reserveBytes)
{
    (void)yDesc, (void)y, (void)dzDesc, (void)dz, (void)bias, (void)act, (void)ws, (void)wsBytes;
    static const char fn[] = "cudnnBatchNormalizationBackwardEx";
    if (!fgdnn_handle_ok(handle) || !alphaData || !betaData || !alphaParam || !betaParam)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: bad handle or NULL scaling factors", fn);
    TRY(check_mode(mode, ops, fn));
    TRY(check_shapes(mode, xDesc, dxDesc, dpDesc, fn));
    if (!fgdnn_tensor_ok(dyDesc) || fgdnn_tensor_elements(dyDesc) != fgdnn_tensor_elements(xDesc))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: dy does not match x", fn);
    if (eps < CUDNN_BN_MIN_EPSILON || (!savedMean) != (!savedInvVar))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: epsilon %g, or only one of saved mean/inverse variance", fn,
                          eps);
    if (reserveBytes < reserve_bytes(ops, xDesc))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: reserve space of %zu bytes, %zu needed", fn, reserveBytes,
                          reserve_bytes(ops, xDesc));
    int dev = handle->device;
    size_t pb = fgdnn_tensor_span_bytes(dpDesc);
    TRY(fgdnn_check_device_ptr(x, dev, fgdnn_tensor_span_bytes(xDesc), "x"));
    TRY(fgdnn_check_device_ptr(dy, dev, fgdnn_tensor_span_bytes(dyDesc), "dy"));
    TRY(fgdnn_check_device_ptr(dx, dev, fgdnn_tensor_span_bytes(dxDesc), "dx"));
    TRY(fgdnn_check_device_ptr(scale, dev, pb, "bnScale"));
    TRY(fgdnn_check_device_ptr(dScale, dev, pb, "dBnScaleResult"));
    TRY(fgdnn_check_device_ptr(dBias, dev, pb, "dBnBiasResult"));
    TRY(optional(savedMean, dev, pb, "savedMean"));
    TRY(optional(savedInvVar, dev, pb, "savedInvVariance"));
    TRY(optional(reserve, dev, reserveBytes, "reserveSpace"));
    const void *outs[] = {dx, dScale, dBias};
    return fgdnn_launch("cudnn:BatchNormalizationBackward", atomic_load(&handle->stream),
                        fgdnn_tensor_elements(xDesc), outs, sizeof outs / sizeof outs[0]);
}

FGC_EXPORT cudnnStatus_t cudnnBatchNormalizationForwardInference(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void *alpha, const void *beta,
    const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnTensorDescriptor_t yDesc, void *y,
    const cudnnTensorDescriptor_t pDesc, const void *scale, const void *bias, const void *mean, const void *var,
    double eps)
{
    static const char fn[] = "cudnnBatchNormalizationForwardInference";
    if (!fgdnn_handle_ok(handle) || !alpha || !beta)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: bad handle or NULL alpha/beta", fn);
    TRY(check_mode(mode, CUDNN_BATCHNORM_OPS_BN, fn));
    TRY(check_shapes(mode, xDesc, yDesc, pDesc, fn));
    if (eps < CUDNN_BN_MIN_EPSILON)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: epsilon %g", fn, eps);
    int dev = handle->device;
    size_t pb = fgdnn_tensor_span_bytes(pDesc);
    TRY(fgdnn_check_device_ptr(x, dev, fgdnn_tensor_span_bytes(xDesc), "x"));
    TRY(fgdnn_check_device_ptr(y, dev, fgdnn_tensor_span_bytes(yDesc), "y"));
    TRY(fgdnn_check_device_ptr(scale, dev, pb, "bnScale"));
    TRY(fgdnn_check_device_ptr(bias, dev, pb, "bnBias"));
    TRY(fgdnn_check_device_ptr(mean, dev, pb, "estimatedMean"));
    TRY(fgdnn_check_device_ptr(var, dev, pb, "estimatedVariance"));
    const void *outs[] = {y};
    return fgdnn_launch("cudnn:BatchNormalizationForwardInference", atomic_load(&handle->stream),
                        fgdnn_tensor_elements(xDesc), outs, 1);
}
