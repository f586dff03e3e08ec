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
#include "fgc_timeline.h"
#include "fgc_unsup.h"

struct cublasContext {
    int device;
    cudaStream_t stream;
    void *workspace;
    size_t workspace_bytes;
    cublasMath_t math_mode;
    cublasPointerMode_t pointer_mode;
};

/* What the timeline log says of a GEMM's math (FGC_TL_GEMM's d, common/fgc_timeline.h): A's cudaDataType and the
 * compute type (-1 each when the routine's name says it: cublasSgemm_v2 is fp32), and whether the handle lets
 * fp32 GEMMs run on TF32 tensor cores (torch.backends.cuda.matmul.allow_tf32 sets that math mode). */
static inline unsigned long long fgblas_types(cublasHandle_t h, int atype, int compute)
{
    unsigned long long flags = h && (h->math_mode & 0xf) == CUBLAS_TF32_TENSOR_OP_MATH ? FGC_TL_GEMM_TF32 : 0;
    return (unsigned long long)(atype & 0xffff) | (unsigned long long)(compute & 0xffff) << 16 | flags << 48;
}

/* Count one GEMM-like call on `stream`: `batch` products of (m x k) by (k x n), which wrote the device matrices
 * outs[0..nouts) (record.c: the driver marks them as kernel-written); `types` (fgblas_types) go to the timeline
 * log. `api` is a string literal. On a capturing stream the call is recorded into the graph and counted each
 * time the graph is launched. */
FG_HIDDEN void fgblas_record(cudaStream_t stream, const char *api, long long m, long long n, long long k,
                             long long batch, const void *const *outs, size_t nouts, unsigned long long types);
/* The output pointers of a pointer-array batched GEMM (C[], in device memory), malloc'ed; NULL entries skipped. */
FG_HIDDEN const void **fgblas_batch_outputs(const void *const *C, long long batch, size_t *n);

#endif
