/* In-process cost of cudaMalloc+cudaFree pairs, cudaMemGetInfo and a kernel launch on FakeGPU's runtime, for
 * bench/bench_cuda.py. Prints "name ns_per_op" lines. Devices come from the environment as usual. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "fgc_image.h"

/* What nvcc-generated code calls at load time (no public header declares them). */
extern void **__cudaRegisterFatBinary(void *fatCubin);
extern void __cudaRegisterFatBinaryEnd(void **handle);
extern void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun, const char *deviceName,
                                   int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int pair(const char *label, size_t bytes, int n)
{
    void *p;
    double t0 = now_ns();
    for (int i = 0; i < n; i++) {
        if (cudaMalloc(&p, bytes) != cudaSuccess || cudaFree(p) != cudaSuccess) {
            fprintf(stderr, "cuda-bench: %s failed\n", label);
            return 1;
        }
    }
    printf("%s %.1f\n", label, (now_ns() - t0) / n);
    return 0;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    if (cudaFree(NULL) != cudaSuccess) { /* context first, as every program does */
        fprintf(stderr, "cuda-bench: no device\n");
        return 1;
    }
    int rc = pair("malloc_free_512B", 512, n) | pair("malloc_free_2MiB", 2u << 20, n) |
             pair("malloc_free_1GiB", 1u << 30, n);
    size_t f, t;
    double t0 = now_ns();
    for (int i = 0; i < n; i++)
        cudaMemGetInfo(&f, &t);
    printf("mem_get_info %.1f\n", (now_ns() - t0) / n);
    /* A kernel of two pointer parameters (a stand-in image, as FakeGPU's cuDNN registers its own), launched on a
     * buffer of a sub-allocated segment: the launch reads the parameters and marks the memory written. */
    static char anchor, name[] = "bench_kernel";
    void **module = __cudaRegisterFatBinary(fgc_image_new(name, 2));
    __cudaRegisterFatBinaryEnd(module);
    __cudaRegisterFunction(module, &anchor, name, name, -1, NULL, NULL, NULL, NULL, NULL);
    char *seg = NULL;
    cudaMalloc((void **)&seg, 2u << 20);
    void *x = seg + 4096, *y = seg + 65536;
    void *args[] = {&x, &y};
    dim3 grid = {64, 1, 1}, block = {256, 1, 1};
    t0 = now_ns();
    for (int i = 0; i < n; i++)
        if (cudaLaunchKernel(&anchor, grid, block, args, 0, NULL) != cudaSuccess) {
            fprintf(stderr, "cuda-bench: launch failed\n");
            return 1;
        }
    printf("launch_2ptr %.1f\n", (now_ns() - t0) / n);
    cudaFree(seg);
    return rc;
}
