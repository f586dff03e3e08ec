/* GEMMs: argument checks as cuBLAS makes them, then counted (calls, FLOPs) and not computed; their outputs count
 * as kernel-written (record.c). */
#include <stdlib.h>

#include "fgblas.h"

const void **fgblas_batch_outputs(const void *const *C, long long batch, size_t *n)
{
    *n = 0;
    const void **out = C && batch > 0 ? malloc((size_t)batch * sizeof *out) : NULL;
    for (long long i = 0; out && i < batch; i++)
        if (C[i]) /* in accounting memory mode the pointer array reads as zeros */
            out[(*n)++] = C[i];
    return out;
}

static cublasStatus_t check(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            int lda, int ldb, int ldc)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int rows_a = ta == CUBLAS_OP_N ? m : k, rows_b = tb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || lda < (rows_a > 1 ? rows_a : 1) || ldb < (rows_b > 1 ? rows_b : 1) ||
        ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

#define GEMM(name, T)                                                                                             \
    FGC_EXPORT cublasStatus_t name(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,     \
                                   int k, const T *alpha, const T *A, int lda, const T *B, int ldb, const T *beta, \
                                   T *C, int ldc)                                                                  \
    {                                                                                                             \
        (void)alpha, (void)A, (void)B, (void)beta;                                                                \
        cublasStatus_t s = check(h, ta, tb, m, n, k, lda, ldb, ldc);                                              \
        const void *out[] = {C};                                                                                  \
        if (s == CUBLAS_STATUS_SUCCESS)                                                                           \
            fgblas_record(h->stream, #name, m, n, k, 1, out, 1, fgblas_types(h, -1, -1));                             \
        return s;                                                                                                 \
    }
GEMM(cublasSgemm_v2, float)
GEMM(cublasDgemm_v2, double)
GEMM(cublasCgemm_v2, cuComplex)
GEMM(cublasZgemm_v2, cuDoubleComplex)

#define GEMM_STRIDED(name, T)                                                                                     \
    FGC_EXPORT cublasStatus_t name(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,     \
                                   int k, const T *alpha, const T *A, int lda, long long sa, const T *B, int ldb,  \
                                   long long sb, const T *beta, T *C, int ldc, long long sc, int batch)            \
    {                                                                                                             \
        (void)alpha, (void)A, (void)B, (void)beta, (void)sa, (void)sb, (void)sc;                                  \
        cublasStatus_t s = check(h, ta, tb, m, n, k, lda, ldb, ldc);                                              \
        if (s == CUBLAS_STATUS_SUCCESS && batch < 0)                                                              \
            s = CUBLAS_STATUS_INVALID_VALUE;                                                                      \
        const void *out[] = {C}; /* the batch's matrices lie from C on */                                         \
        if (s == CUBLAS_STATUS_SUCCESS)                                                                           \
            fgblas_record(h->stream, #name, m, n, k, batch, out, 1, fgblas_types(h, -1, -1));                         \
        return s;                                                                                                 \
    }
GEMM_STRIDED(cublasSgemmStridedBatched, float)
GEMM_STRIDED(cublasDgemmStridedBatched, double)
GEMM_STRIDED(cublasCgemmStridedBatched, cuComplex)
GEMM_STRIDED(cublasZgemmStridedBatched, cuDoubleComplex)

#define GEMM_BATCHED(name, T)                                                                                     \
    FGC_EXPORT cublasStatus_t name(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,     \
                                   int k, const T *alpha, const T *const A[], int lda, const T *const B[],         \
                                   int ldb, const T *beta, T *const C[], int ldc, int batch)                      \
    {                                                                                                             \
        (void)alpha, (void)A, (void)B, (void)beta;                                                                \
        cublasStatus_t s = check(h, ta, tb, m, n, k, lda, ldb, ldc);                                              \
        if (s == CUBLAS_STATUS_SUCCESS && batch < 0)                                                              \
            s = CUBLAS_STATUS_INVALID_VALUE;                                                                      \
        if (s == CUBLAS_STATUS_SUCCESS) {                                                                         \
            size_t nout = 0;                                                                                      \
            const void **out = fgblas_batch_outputs((const void *const *)C, batch, &nout);                        \
            fgblas_record(h->stream, #name, m, n, k, batch, out, nout, fgblas_types(h, -1, -1));                      \
            free(out);                                                                                            \
        }                                                                                                         \
        return s;                                                                                                 \
    }
GEMM_BATCHED(cublasSgemmBatched, float)
GEMM_BATCHED(cublasDgemmBatched, double)
GEMM_BATCHED(cublasCgemmBatched, cuComplex)
GEMM_BATCHED(cublasZgemmBatched, cuDoubleComplex)

FGC_EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                       int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                       const void *B, cudaDataType bt, int ldb, const void *beta, void *C,
                                       cudaDataType ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)alpha, (void)A, (void)at, (void)B, (void)bt, (void)beta, (void)ct, (void)compute, (void)algo;
    cublasStatus_t s = check(h, ta, tb, m, n, k, lda, ldb, ldc);
    const void *out[] = {C};
    if (s == CUBLAS_STATUS_SUCCESS)
        fgblas_record(h->stream, "cublasGemmEx", m, n, k, 1, out, 1, fgblas_types(h, (int)at, (int)compute));
    return s;
}

FGC_EXPORT cublasStatus_t cublasSgemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                        int k, const float *alpha, const void *A, cudaDataType at, int lda,
                                        const void *B, cudaDataType bt, int ldb, const float *beta, void *C,
                                        cudaDataType ct, int ldc)
{
    (void)alpha, (void)A, (void)at, (void)B, (void)bt, (void)beta, (void)ct;
    cublasStatus_t s = check(h, ta, tb, m, n, k, lda, ldb, ldc);
    const void *out[] = {C};
    if (s == CUBLAS_STATUS_SUCCESS)
        fgblas_record(h->stream, "cublasSgemmEx", m, n, k, 1, out, 1, fgblas_types(h, (int)at, -1));
    return s;
}

FGC_EXPORT cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                                     int m, int n, int k, const void *alpha, const void *A,
                                                     cudaDataType at, int lda, long long sa, const void *B,
                                                     cudaDataType bt, int ldb, long long sb, const void *beta,
                                                     void *C, cudaDataType ct, int ldc, long long sc, int batch,
                                                     cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)alpha, (void)A, (void)at, (void)sa, (void)B, (void)bt, (void)sb, (void)beta, (void)ct, (void)sc,
        (void)compute, (void)algo;
    cublasStatus_t s = check(h, ta, tb, m, n, k, lda, ldb, ldc);
    if (s == CUBLAS_STATUS_SUCCESS && batch < 0)
        s = CUBLAS_STATUS_INVALID_VALUE;
    const void *out[] = {C};
    if (s == CUBLAS_STATUS_SUCCESS)
        fgblas_record(h->stream, "cublasGemmStridedBatchedEx", m, n, k, batch, out, 1,
                      fgblas_types(h, (int)at, (int)compute));
    return s;
}
