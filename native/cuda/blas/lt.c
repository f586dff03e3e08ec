/* cuBLASLt: descriptors hold their attributes in plain structs; the heuristic offers one algorithm with no
 * workspace; a matmul is validated against its layouts, counted, and not computed. */
#include <stdlib.h>
#include <string.h>

#include "fgblas.h"

struct cublasLtContext {
    int unused;
};

typedef struct {
    int transa, transb;
    int compute; /* cublasComputeType_t, for the timeline log */
} lt_desc;

typedef struct {
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int type; /* cudaDataType, for the timeline log */
} lt_layout;

FGC_EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    if (!h)
        return CUBLAS_STATUS_INVALID_VALUE;
    *h = calloc(1, sizeof(struct cublasLtContext));
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

FGC_EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }
FGC_EXPORT size_t cublasLtGetCudartVersion(void) { return CUDART_VERSION; }

FGC_EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t c, cudaDataType_t s)
{
    (void)s;
    if (!d)
        return CUBLAS_STATUS_INVALID_VALUE;
    *d = calloc(1, sizeof(lt_desc) < sizeof(cublasLtMatmulDescOpaque_t) ? sizeof(cublasLtMatmulDescOpaque_t)
                                                                          : sizeof(lt_desc));
    if (*d)
        ((lt_desc *)*d)->compute = (int)c;
    return *d ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

FGC_EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                         const void *buf, size_t n)
{
    if (!d || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    lt_desc *x = (lt_desc *)d;
    if (a == CUBLASLT_MATMUL_DESC_TRANSA && n >= sizeof(int32_t))
        x->transa = *(const int32_t *)buf;
    else if (a == CUBLASLT_MATMUL_DESC_TRANSB && n >= sizeof(int32_t))
        x->transb = *(const int32_t *)buf;
    return CUBLAS_STATUS_SUCCESS; /* epilogues, bias and scale pointers are accepted and have no effect */
}

FGC_EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows,
                                                     uint64_t cols, int64_t ld)
{
    if (!l)
        return CUBLAS_STATUS_INVALID_VALUE;
    lt_layout *x = calloc(1, sizeof(cublasLtMatrixLayoutOpaque_t) > sizeof(lt_layout)
                                 ? sizeof(cublasLtMatrixLayoutOpaque_t)
                                 : sizeof(lt_layout));
    if (!x)
        return CUBLAS_STATUS_ALLOC_FAILED;
    x->rows = rows;
    x->cols = cols;
    x->ld = ld;
    x->batch = 1;
    x->type = (int)t;
    *l = (cublasLtMatrixLayout_t)x;
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                           cublasLtMatrixLayoutAttribute_t a, const void *buf,
                                                           size_t n)
{
    if (!l || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && n >= sizeof(int32_t))
        ((lt_layout *)l)->batch = *(const int32_t *)buf;
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    if (!p)
        return CUBLAS_STATUS_INVALID_VALUE;
    *p = calloc(1, sizeof(cublasLtMatmulPreferenceOpaque_t));
    return *p ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

FGC_EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                               cublasLtMatmulPreferenceAttributes_t a,
                                                               const void *buf, size_t n)
{
    (void)a, (void)n;
    return p && buf ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

FGC_EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                                         cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                         cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd,
                                                         cublasLtMatmulPreference_t p, int requested,
                                                         cublasLtMatmulHeuristicResult_t *out, int *returned)
{
    (void)p;
    if (!h || !d || !a || !b || !c || !dd || requested <= 0 || !out || !returned)
        return CUBLAS_STATUS_INVALID_VALUE;
    memset(&out[0], 0, sizeof out[0]);
    out[0].workspaceSize = 0;
    out[0].state = CUBLAS_STATUS_SUCCESS;
    out[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha,
                                         const void *A, cublasLtMatrixLayout_t Ad, const void *B,
                                         cublasLtMatrixLayout_t Bd, const void *beta, const void *C,
                                         cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
                                         const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsBytes,
                                         cudaStream_t stream)
{
    (void)alpha, (void)A, (void)B, (void)beta, (void)C, (void)Cd, (void)D, (void)algo, (void)ws, (void)wsBytes;
    if (!h || !desc || !Ad || !Bd || !Dd)
        return CUBLAS_STATUS_INVALID_VALUE;
    const lt_desc *x = (const lt_desc *)desc;
    const lt_layout *a = (const lt_layout *)Ad, *d = (const lt_layout *)Dd;
    long long k = x->transa == CUBLAS_OP_N ? (long long)a->cols : (long long)a->rows;
    const void *out[] = {D};
    fgblas_record(stream, "cublasLtMatmul", (long long)d->rows, (long long)d->cols, k, d->batch > 0 ? d->batch : 1,
                  out, 1, fgblas_types(NULL, a->type, x->compute));
    return CUBLAS_STATUS_SUCCESS;
}

FGC_EXPORT const char *cublasLtGetStatusName(cublasStatus_t s) { return cublasGetStatusName(s); }
FGC_EXPORT const char *cublasLtGetStatusString(cublasStatus_t s) { return cublasGetStatusString(s); }
