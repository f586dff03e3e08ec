/* The GEMM account of one library (cuBLAS or cuBLASLt): calls and FLOPs, written to the process report. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop

#include "fgblas.h"
#include "fgc_report.h"

static atomic_ullong calls, flops_lo; /* FLOPs kept in a 64-bit counter: 1.8e19 is far beyond a run */

static void count(unsigned long long flops)
{
    atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&flops_lo, flops, memory_order_relaxed);
}

/* A GEMM captured into a graph: a host node (the driver replays host nodes) counting it at each launch. The
 * record lives as long as the process, as a host node's user data must outlive every graph that holds it. */
static void replayed(void *flops) { count(*(unsigned long long *)flops); }

void fgblas_record(cudaStream_t stream, const char *api, long long m, long long n, long long k, long long batch)
{
    (void)api;
    unsigned long long flops = (unsigned long long)(2 * m * n * k * batch);
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (stream && cuStreamIsCapturing((CUstream)stream, &status) == CUDA_SUCCESS &&
        status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        unsigned long long *rec = malloc(sizeof *rec);
        if (rec) {
            *rec = flops;
            if (cuLaunchHostFunc((CUstream)stream, replayed, rec) == CUDA_SUCCESS)
                return;
            free(rec);
        }
    }
    count(flops);
}

__attribute__((destructor)) static void write_report(void)
{
    if (!atomic_load(&calls))
        return;
    char part[64]; /* one per library and CUDA major: libcublas.so.12 and .13 can share a process */
    snprintf(part, sizeof part, "gemm-%s-%d", FGBLAS_LIB, CUDART_VERSION / 1000);
    FILE *f = fgc_part_open(part);
    if (!f)
        return;
    fprintf(f, "{\"calls\": %llu, \"flops\": %llu}", (unsigned long long)atomic_load(&calls),
            (unsigned long long)atomic_load(&flops_lo));
    fgc_part_close(f, part);
}
