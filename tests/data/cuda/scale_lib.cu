// A shared library of kernels, as a project builds one with nvcc's default (static) runtime unless told.
#include <cuda_runtime.h>

__global__ void scale(float *x, float a) { x[threadIdx.x] *= a; }

extern "C" int scale_on_device(int n)
{
    float *d = nullptr;
    if (cudaMalloc(&d, n * sizeof(float)) != cudaSuccess)
        return 1;
    scale<<<1, n>>>(d, 2.0f);
    return (int)cudaDeviceSynchronize();
}
