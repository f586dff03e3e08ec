/* cuBLAS: handles, their settings (stream, workspace, math and pointer modes), and the calls PyTorch makes
 * while it sets a handle up. GEMMs are in gemm.c. */
#include <stdlib.h>

#include "fgblas.h"

FGC_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaFree(NULL) != cudaSuccess) /* a context, as cuBLAS needs */
        return CUBLAS_STATUS_NOT_INITIALIZED;
    struct cublasContext *h = calloc(1, sizeof *h);
    if (!h)
        return CUBLAS_STATUS_ALLOC_FAILED;
    h->device = dev;
    h->pointer_mode = CUBLAS_POINTER_MODE_HOST;
    h->math_mode = CUBLAS_DEFAULT_MATH;
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t h, cudaStream_t *s)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!s)
        return CUBLAS_STATUS_INVALID_VALUE;
    *s = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t bytes)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->workspace = ws;
    h->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t *mode)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode)
        return CUBLAS_STATUS_INVALID_VALUE;
    *mode = h->math_mode;
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t mode)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t *mode)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode)
        return CUBLAS_STATUS_INVALID_VALUE;
    *mode = h->pointer_mode;
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT cublasStatus_t cublasGetVersion_v2(cublasHandle_t h, int *version)
{
    (void)h;
    if (!version)
        return CUBLAS_STATUS_INVALID_VALUE;
    *version = CUBLAS_VERSION;
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT cublasStatus_t cublasGetProperty(libraryPropertyType type, int *value)
{
    if (!value)
        return CUBLAS_STATUS_INVALID_VALUE;
    *value = type == MAJOR_VERSION ? CUBLAS_VER_MAJOR : type == MINOR_VERSION ? CUBLAS_VER_MINOR : CUBLAS_VER_PATCH;
    return CUBLAS_STATUS_SUCCESS;
}
