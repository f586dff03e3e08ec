/* Triangular solves and LU solves of the batched cuBLAS API (torch.linalg.solve_triangular, triangular_solve,
 * lu_solve): argument checks, then counted and not computed, as GEMMs are (gemm.c); B is solved in place, so it is
 * the output. FLOPs as a solve's: m*n*t for a triangle of order t. No workspace of the program's allocator. */
#include <stdlib.h>

#include "fgblas.h"

static cublasStatus_t check_trsm(cublasHandle_t h, cublasSideMode_t side, int m, int n, int lda, int ldb, int *t)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    *t = side == CUBLAS_SIDE_LEFT ? m : n;
    if ((side != CUBLAS_SIDE_LEFT && side != CUBLAS_SIDE_RIGHT) || m < 0 || n < 0 || lda < (*t > 1 ? *t : 1) ||
        ldb < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

#define TRSM(name, T)                                                                                             \
    FGC_EXPORT cublasStatus_t name(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,                 \
                                   cublasOperation_t trans, cublasDiagType_t diag, int m, int n, const T *alpha,   \
                                   const T *A, int lda, T *B, int ldb)                                             \
    {                                                                                                             \
        (void)uplo, (void)trans, (void)diag, (void)alpha, (void)A;                                                \
        int t;                                                                                                    \
        cublasStatus_t s = check_trsm(h, side, m, n, lda, ldb, &t);                                               \
        const void *out[] = {B};                                                                                  \
        if (s == CUBLAS_STATUS_SUCCESS)                                                                           \
            fgblas_record(h->stream, #name, m, n, (t + 1) / 2, 1, out, 1, fgblas_types(h, -1, -1));                   \
        return s;                                                                                                 \
    }
TRSM(cublasStrsm_v2, float)
TRSM(cublasDtrsm_v2, double)
TRSM(cublasCtrsm_v2, cuComplex)
TRSM(cublasZtrsm_v2, cuDoubleComplex)

#define TRSM_BATCHED(name, T)                                                                                     \
    FGC_EXPORT cublasStatus_t name(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,                 \
                                   cublasOperation_t trans, cublasDiagType_t diag, int m, int n, const T *alpha,   \
                                   const T *const A[], int lda, T *const B[], int ldb, int batch)                  \
    {                                                                                                             \
        (void)uplo, (void)trans, (void)diag, (void)alpha, (void)A;                                                \
        int t;                                                                                                    \
        cublasStatus_t s = check_trsm(h, side, m, n, lda, ldb, &t);                                               \
        if (s == CUBLAS_STATUS_SUCCESS && batch < 0)                                                              \
            s = CUBLAS_STATUS_INVALID_VALUE;                                                                      \
        if (s != CUBLAS_STATUS_SUCCESS)                                                                           \
            return s;                                                                                             \
        size_t nouts;                                                                                             \
        const void **out = fgblas_batch_outputs((const void *const *)B, batch, &nouts);                           \
        fgblas_record(h->stream, #name, m, n, (t + 1) / 2, batch, out, nouts, fgblas_types(h, -1, -1));               \
        free(out);                                                                                                \
        return CUBLAS_STATUS_SUCCESS;                                                                             \
    }
TRSM_BATCHED(cublasStrsmBatched, float)
TRSM_BATCHED(cublasDtrsmBatched, double)
TRSM_BATCHED(cublasCtrsmBatched, cuComplex)
TRSM_BATCHED(cublasZtrsmBatched, cuDoubleComplex)

/* Solves with LU factors: *info (host memory) is minus the position of the first invalid argument (the handle
 * first), 0 when none was; the solve's own outcome is not reported there, so 0 is what a GPU answers too. */
#define GETRS_BATCHED(name, T)                                                                                    \
    FGC_EXPORT cublasStatus_t name(cublasHandle_t h, cublasOperation_t trans, int n, int nrhs, const T *const A[],  \
                                   int lda, const int *ipiv, T *const B[], int ldb, int *info, int batch)          \
    {                                                                                                             \
        (void)A, (void)ipiv;                                                                                      \
        if (!h)                                                                                                   \
            return CUBLAS_STATUS_NOT_INITIALIZED;                                                                 \
        int bad = trans != CUBLAS_OP_N && trans != CUBLAS_OP_T && trans != CUBLAS_OP_C ? -2                       \
                  : n < 0                                                         ? -3                            \
                  : nrhs < 0                                                      ? -4                            \
                  : lda < (n > 1 ? n : 1)                                         ? -6                            \
                  : ldb < (n > 1 ? n : 1)                                         ? -9                            \
                  : batch < 0                                                     ? -11                           \
                                                                                  : 0;                            \
        if (!info)                                                                                                \
            return CUBLAS_STATUS_INVALID_VALUE;                                                                   \
        *info = bad;                                                                                              \
        if (bad)                                                                                                  \
            return CUBLAS_STATUS_INVALID_VALUE;                                                                   \
        size_t nouts;                                                                                             \
        const void **out = fgblas_batch_outputs((const void *const *)B, batch, &nouts);                           \
        fgblas_record(h->stream, #name, n, nrhs, n, batch, out, nouts, fgblas_types(h, -1, -1));                      \
        free(out);                                                                                                \
        return CUBLAS_STATUS_SUCCESS;                                                                             \
    }
GETRS_BATCHED(cublasSgetrsBatched, float)
GETRS_BATCHED(cublasDgetrsBatched, double)
GETRS_BATCHED(cublasCgetrsBatched, cuComplex)
GETRS_BATCHED(cublasZgetrsBatched, cuDoubleComplex)
