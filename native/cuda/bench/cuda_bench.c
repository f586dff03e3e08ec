/* In-process cost of cudaMalloc+cudaFree pairs (and cudaMemGetInfo) on FakeGPU's runtime, for
 * bench/bench_cuda.py. Prints "name ns_per_op" lines. Devices come from the environment as usual. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_runtime_api.h>

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
    return rc;
}
