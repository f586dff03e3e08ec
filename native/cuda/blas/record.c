/* The GEMM account of one library (cuBLAS or cuBLASLt): calls and FLOPs, written to the process report. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fgblas.h"
#include "fgc_report.h"

static atomic_ullong calls, flops_lo; /* FLOPs kept in a 64-bit counter: 1.8e19 is far beyond a run */

void fgblas_record(const char *api, long long m, long long n, long long k, long long batch)
{
    (void)api;
    atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&flops_lo, (unsigned long long)(2 * m * n * k * batch), memory_order_relaxed);
}

__attribute__((destructor)) static void write_report(void)
{
    if (!atomic_load(&calls))
        return;
    FILE *f = fgc_part_open("gemm-" FGBLAS_LIB);
    if (!f)
        return;
    fprintf(f, "{\"calls\": %llu, \"flops\": %llu}", (unsigned long long)atomic_load(&calls),
            (unsigned long long)atomic_load(&flops_lo));
    fgc_part_close(f, "gemm-" FGBLAS_LIB);
}
