// A CUDA program as a user writes it: how many devices, the first one's name, one allocation and one launch.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void scale(float *x, float a) { x[threadIdx.x] *= a; }

int main()
{
    int n = -1;
    cudaError_t rc = cudaGetDeviceCount(&n);
    cudaDeviceProp p = {};
    cudaGetDeviceProperties(&p, 0);
    std::printf("count %d rc %d name %s\n", n, (int)rc, p.name);
    float *d = nullptr;
    cudaMalloc(&d, 256 * sizeof(float));
    scale<<<1, 256>>>(d, 2.0f);
    std::printf("launch %d\n", (int)cudaDeviceSynchronize());
    return 0;
}
