/* Internals of FakeGPU's cuBLAS and cuBLASLt. A handle holds what the program set on it; a GEMM is validated,
 * counted with its FLOPs (for the process report) and not computed: in native mode kernels do not run, so
 * result values are not valid. */
#ifndef FGBLAS_H
#define FGBLAS_H

#pragma GCC visibility push(default)
#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#pragma GCC visibility pop

#include "fg_log.h"
#include "fgc_unsup.h"

struct cublasContext {
    int device;
    cudaStream_t stream;
    void *workspace;
    size_t workspace_bytes;
    cublasMath_t math_mode;
    cublasPointerMode_t pointer_mode;
};

/* Count one GEMM-like call on `stream`: `batch` products of (m x k) by (k x n), which wrote the device matrices
 * outs[0..nouts) (record.c: the driver marks them as kernel-written). `api` is a string literal. On a capturing
 * stream the call is recorded into the graph and counted each time the graph is launched. */
FG_HIDDEN void fgblas_record(cudaStream_t stream, const char *api, long long m, long long n, long long k,
                             long long batch, const void *const *outs, size_t nouts);
/* The output pointers of a pointer-array batched GEMM (C[], in device memory), malloc'ed; NULL entries skipped. */
FG_HIDDEN const void **fgblas_batch_outputs(const void *const *C, long long batch, size_t *n);

#endif
