/* Matrix-vector products, outer products and dot products (torch.mv, addmv, addr, dot, vdot and matmul of a
 * vector): argument checks as cuBLAS makes them, then counted and not computed, as GEMMs are (gemm.c). None takes
 * workspace of the program's allocator, so memory is what torch allocates around them. */
#include "fgblas.h"

static int bad_inc(int inc) { return inc == 0; }

/* y = alpha op(A) x + beta y, A m x n: y has m elements (n when op transposes). */
#define GEMV(name, T)                                                                                             \
    FGC_EXPORT cublasStatus_t name(cublasHandle_t h, cublasOperation_t trans, int m, int n, const T *alpha,        \
                                   const T *A, int lda, const T *x, int incx, const T *beta, T *y, int incy)       \
    {                                                                                                             \
        (void)alpha, (void)A, (void)x, (void)beta;                                                                \
        if (!h)                                                                                                   \
            return CUBLAS_STATUS_NOT_INITIALIZED;                                                                 \
        if (m < 0 || n < 0 || lda < (m > 1 ? m : 1) || bad_inc(incx) || bad_inc(incy) ||                         \
            (trans != CUBLAS_OP_N && trans != CUBLAS_OP_T && trans != CUBLAS_OP_C))                               \
            return CUBLAS_STATUS_INVALID_VALUE;                                                                   \
        const void *out[] = {y};                                                                                  \
        fgblas_record(h->stream, #name, trans == CUBLAS_OP_N ? m : n, 1, trans == CUBLAS_OP_N ? n : m, 1, out, 1,     \
                      fgblas_types(h, -1, -1));                                                                       \
        return CUBLAS_STATUS_SUCCESS;                                                                             \
    }
GEMV(cublasSgemv_v2, float)
GEMV(cublasDgemv_v2, double)
GEMV(cublasCgemv_v2, cuComplex)
GEMV(cublasZgemv_v2, cuDoubleComplex)

/* A += alpha x y^T (or y^H), A m x n. */
#define GER(name, T)                                                                                              \
    FGC_EXPORT cublasStatus_t name(cublasHandle_t h, int m, int n, const T *alpha, const T *x, int incx,           \
                                   const T *y, int incy, T *A, int lda)                                            \
    {                                                                                                             \
        (void)alpha, (void)x, (void)y;                                                                            \
        if (!h)                                                                                                   \
            return CUBLAS_STATUS_NOT_INITIALIZED;                                                                 \
        if (m < 0 || n < 0 || lda < (m > 1 ? m : 1) || bad_inc(incx) || bad_inc(incy))                           \
            return CUBLAS_STATUS_INVALID_VALUE;                                                                   \
        const void *out[] = {A};                                                                                  \
        fgblas_record(h->stream, #name, m, n, 1, 1, out, 1, fgblas_types(h, -1, -1));                                 \
        return CUBLAS_STATUS_SUCCESS;                                                                             \
    }
GER(cublasSger_v2, float)
GER(cublasDger_v2, double)
GER(cublasCgeru_v2, cuComplex)
GER(cublasCgerc_v2, cuComplex)
GER(cublasZgeru_v2, cuDoubleComplex)
GER(cublasZgerc_v2, cuDoubleComplex)

/* result = x . y (conjugated for dotc). With the result in device memory (torch's pointer mode) it is a kernel's
 * output; with it in host memory the program would read a value at once, which native mode cannot compute: that
 * mode is refused, loudly, rather than answered with a made-up number. */
#define DOT(name, T)                                                                                              \
    FGC_EXPORT cublasStatus_t name(cublasHandle_t h, int n, const T *x, int incx, const T *y, int incy,            \
                                   T *result)                                                                      \
    {                                                                                                             \
        (void)x, (void)y, (void)incx, (void)incy;                                                                 \
        if (!h)                                                                                                   \
            return CUBLAS_STATUS_NOT_INITIALIZED;                                                                 \
        if (!result)                                                                                              \
            return CUBLAS_STATUS_INVALID_VALUE;                                                                   \
        if (h->pointer_mode != CUBLAS_POINTER_MODE_DEVICE)                                                        \
            return (cublasStatus_t)fgc_refuse("cublas", #name "(host pointer mode)", CUBLAS_STATUS_NOT_SUPPORTED); \
        const void *out[] = {result};                                                                             \
        fgblas_record(h->stream, #name, 1, 1, n > 0 ? n : 0, 1, out, 1, fgblas_types(h, -1, -1));                     \
        return CUBLAS_STATUS_SUCCESS;                                                                             \
    }
DOT(cublasSdot_v2, float)
DOT(cublasDdot_v2, double)
DOT(cublasCdotu_v2, cuComplex)
DOT(cublasCdotc_v2, cuComplex)
DOT(cublasZdotu_v2, cuDoubleComplex)
DOT(cublasZdotc_v2, cuDoubleComplex)
