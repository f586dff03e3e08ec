/* nvml-bench: in-process cost of one NVML query (nvmlDeviceGetMemoryInfo by default), timed over many calls
 * after a warm-up. Prints "<function> <calls> <ns per call>". */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <nvml.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    long calls = argc > 1 ? atol(argv[1]) : 1000000;
    if (calls < 1)
        calls = 1;
    if (nvmlInit_v2() != NVML_SUCCESS) {
        fprintf(stderr, "nvml-bench: nvmlInit failed\n");
        return 1;
    }
    nvmlDevice_t dev;
    if (nvmlDeviceGetHandleByIndex_v2(0, &dev) != NVML_SUCCESS) {
        fprintf(stderr, "nvml-bench: no device 0\n");
        return 1;
    }
    nvmlMemory_t mem;
    for (int i = 0; i < 1000; i++)
        nvmlDeviceGetMemoryInfo(dev, &mem);
    double t0 = now_s();
    for (long i = 0; i < calls; i++)
        if (nvmlDeviceGetMemoryInfo(dev, &mem) != NVML_SUCCESS)
            return 1;
    double dt = now_s() - t0;
    printf("nvmlDeviceGetMemoryInfo %ld %.1f\n", calls, dt * 1e9 / (double)calls);
    nvmlShutdown();
    return 0;
}
