/* The GEMM account of one library (cuBLAS or cuBLASLt): calls and FLOPs, written to the process report; and what
 * a GEMM writes: its output matrices, which the driver learns from the launch of a stand-in kernel named after
 * the routine whose packed parameters are the output pointers (common/fgc_image.h), as a GPU's cuBLAS launches a
 * kernel given its outputs. A later host read of the product is then told from a read of host-known data. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop

#include "fgblas.h"
#include "fgc_image.h"
#include "fgc_private.h"
#include "fgc_report.h"

static atomic_ullong calls, flops_lo; /* FLOPs kept in a 64-bit counter: 1.8e19 is far beyond a run */

static void count(unsigned long long flops)
{
    atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&flops_lo, flops, memory_order_relaxed);
}

/* The stand-in kernel of each routine, by the address of its name (a string literal); a handful per process. */
#define MAX_ROUTINES 64
static struct {
    const char *api;
    CUfunction fn;
} routines[MAX_ROUTINES];
static size_t nroutines;
static pthread_mutex_t routines_lock = PTHREAD_MUTEX_INITIALIZER;

static CUfunction routine(const char *api)
{
    CUfunction fn = NULL;
    pthread_mutex_lock(&routines_lock);
    size_t i = 0;
    while (i < nroutines && routines[i].api != api)
        i++;
    if (i < nroutines) {
        fn = routines[i].fn;
    } else if (nroutines < MAX_ROUTINES) {
        void *image = fgc_image_new(api, 0); /* launched with a packed buffer: any number of outputs */
        CUmodule mod;
        if (image && cuModuleLoadData(&mod, image) == CUDA_SUCCESS && cuModuleGetFunction(&fn, mod, api) != CUDA_SUCCESS)
            fn = NULL;
        routines[nroutines].api = api;
        routines[nroutines++].fn = fn;
    }
    pthread_mutex_unlock(&routines_lock);
    return fn;
}

static void wrote(CUstream stream, const char *api, const void *const *outs, size_t nouts, unsigned long long flops)
{
    CUfunction fn = nouts ? routine(api) : NULL;
    if (!fn)
        return;
    size_t size = nouts * sizeof *outs;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, (void *)outs, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    /* The grid is sized to the work, as a GPU GEMM's is (the driver times the GPU's busy time by it). */
    unsigned long long blocks = (flops + FGC_STANDIN_BLOCK_FLOPS - 1) / FGC_STANDIN_BLOCK_FLOPS;
    unsigned gx = blocks < 1 ? 1u : blocks > 0x7fffffffULL ? 0x7fffffffu : (unsigned)blocks;
    if (cuLaunchKernel(fn, gx, 1, 1, 1, 1, 1, 0, stream, NULL, extra) != CUDA_SUCCESS)
        fg_debug("%s: the launch recording %s's outputs failed", FGBLAS_LIB, api);
}

/* A GEMM captured into a graph: a host node (the driver replays host nodes) that counts it and marks its outputs
 * at each launch, so the graph's kernel nodes stay the program's own. The record lives as long as the process,
 * as a host node's user data must outlive every graph that holds it. */
typedef struct {
    unsigned long long flops;
    const char *api;
    size_t nouts;
    const void *outs[];
} captured;

static void replayed(void *data)
{
    const captured *c = data;
    count(c->flops);
    wrote(NULL, c->api, c->outs, c->nouts, c->flops); /* inside the graph's launch: nothing is capturing */
}

void fgblas_record(cudaStream_t stream, const char *api, long long m, long long n, long long k, long long batch,
                   const void *const *outs, size_t nouts, unsigned long long types)
{
    unsigned long long flops = (unsigned long long)(2 * m * n * k * batch);
    fgc_library_loaded("cublas"); /* a real cuBLAS's kernels would load into the context with its first GEMM */
    if (m <= 0 || n <= 0 || batch <= 0)
        nouts = 0; /* an empty product writes nothing */
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (stream && cuStreamIsCapturing((CUstream)stream, &status) == CUDA_SUCCESS &&
        status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        captured *rec = malloc(sizeof *rec + nouts * sizeof *outs);
        if (rec) {
            rec->flops = flops, rec->api = api, rec->nouts = nouts;
            if (nouts)
                memcpy(rec->outs, outs, nouts * sizeof *outs);
            if (cuLaunchHostFunc((CUstream)stream, replayed, rec) == CUDA_SUCCESS)
                return;
            free(rec);
        }
    }
    count(flops);
    /* The shape and dtypes the driver cannot see, just before the stand-in's launch, which carries the time. */
    fgc_tl_record r = {.kind = FGC_TL_GEMM, .device = FGC_TL_NO_DEVICE, .stream = (uint64_t)(uintptr_t)stream,
                       .a = (uint64_t)(m & 0xffffffff) | (uint64_t)(n & 0xffffffff) << 32,
                       .b = (uint64_t)(k & 0xffffffff) | (uint64_t)(batch & 0xffffffff) << 32, .d = types};
    fgc_timeline(&r, api);
    wrote((CUstream)stream, api, outs, nouts, flops);
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
