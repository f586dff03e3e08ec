/* The GEMM account of one library (cuBLAS or cuBLASLt): calls and FLOPs, written to the process report. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fgblas.h"

static atomic_ullong calls, flops_lo; /* FLOPs kept in a 64-bit counter: 1.8e19 is far beyond a run */

void fgblas_record(const char *api, long long m, long long n, long long k, long long batch)
{
    (void)api;
    atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&flops_lo, (unsigned long long)(2 * m * n * k * batch), memory_order_relaxed);
}

__attribute__((destructor)) static void write_report(void)
{
    const char *dir = getenv("FAKEGPU_REPORT_DIR");
    if (!dir || !*dir || !atomic_load(&calls))
        return;
    char path[1024];
    snprintf(path, sizeof path, "%s/" FGBLAS_LIB "-%d.json", dir, (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "{\"library\": \"%s\", \"mode\": \"native\", \"pid\": %d, \"gemm_calls\": %llu, \"gemm_flops\": %llu}\n",
            FGBLAS_LIB, (int)getpid(), (unsigned long long)atomic_load(&calls),
            (unsigned long long)atomic_load(&flops_lo));
    fclose(f);
}
