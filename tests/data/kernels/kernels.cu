// Small kernels of our own for analyze-kernel's tests: compiled by nvcc for several architectures, their
// registers and shared memory compared with cuobjdump's. Each exercises one thing a kernel can need.
#include <cuda_fp16.h>
#include <mma.h>

__constant__ float coefficients[64];

__global__ void saxpy(int n, float a, const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

// few registers allowed: at least 4 blocks of 256 threads per SM
__global__ void __launch_bounds__(256, 4) bounded_polynomial(int n, const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i], acc = 0.f;
#pragma unroll
    for (int k = 0; k < 64; ++k) acc = acc * v + coefficients[k];
    y[i] = acc;
}

template <typename T, int BLOCK>
__global__ void block_sum(const T *in, T *out, int n) {
    __shared__ T partial[BLOCK];
    int i = blockIdx.x * BLOCK + threadIdx.x;
    partial[threadIdx.x] = i < n ? in[i] : T(0);
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
template __global__ void block_sum<float, 256>(const float *, float *, int);
template __global__ void block_sum<double, 512>(const double *, double *, int);

extern __shared__ float dynamic_tile[];
__global__ void reverse_dynamic(float *data, int n) {
    int t = threadIdx.x;
    dynamic_tile[t] = data[t];
    __syncthreads();
    data[t] = dynamic_tile[n - t - 1];
}

// an array indexed at run time lives in local memory
__global__ void local_lookup(const int *index, float *out) {
    float table[48];
    for (int k = 0; k < 48; ++k) table[k] = k * 0.5f + threadIdx.x;
    table[index[threadIdx.x + 32] % 48] += 1.f;
    out[threadIdx.x] = table[index[threadIdx.x] % 48];
}

#define TILE 16
__global__ void tiled_matmul(const float *a, const float *b, float *c, int n) {
    __shared__ float as[TILE][TILE];
    __shared__ float bs[TILE][TILE + 1];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < n / TILE; ++t) {
        as[threadIdx.y][threadIdx.x] = a[row * n + t * TILE + threadIdx.x];
        bs[threadIdx.y][threadIdx.x] = b[(t * TILE + threadIdx.y) * n + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += as[threadIdx.y][k] * bs[k][threadIdx.x];
        __syncthreads();
    }
    c[row * n + col] = acc;
}

__global__ void histogram(const unsigned char *in, unsigned *bins, int n) {
    __shared__ unsigned local[256];
    local[threadIdx.x] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&local[in[i]], 1u);
    __syncthreads();
    atomicAdd(&bins[threadIdx.x], local[threadIdx.x]);
}

// recursion keeps a call stack
__device__ __noinline__ double series(double x, int terms) {
    if (terms == 0) return 0;
    return x / terms * (1 + series(x, terms - 1));
}
__global__ void exp_series(const double *x, double *y, int terms) {
    y[threadIdx.x] = series(x[threadIdx.x], terms);
}

// one 16x16x16 half-precision product per warp on the tensor cores
__global__ void wmma_tile(const half *a, const half *b, float *c) {
    using namespace nvcuda;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}

__global__ void __launch_bounds__(1024) wide_block(float *x) {
    __shared__ float buffer[1024];
    buffer[threadIdx.x] = x[threadIdx.x] * 2.f;
    __syncthreads();
    x[threadIdx.x] = buffer[1023 - threadIdx.x];
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Hopper's warpgroup MMA (sm_90a only): one m64n8k16 product from shared-memory descriptors
__global__ void wgmma_tile(unsigned long long desc_a, unsigned long long desc_b, float *c) {
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    asm volatile("wgmma.fence.sync.aligned;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, %4, %5, 1, 1, 1, 0, 0;\n"
                 "wgmma.commit_group.sync.aligned;\n"
                 "wgmma.wait_group.sync.aligned 0;\n"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(desc_a), "l"(desc_b));
    c[threadIdx.x * 4] = d0; c[threadIdx.x * 4 + 1] = d1; c[threadIdx.x * 4 + 2] = d2; c[threadIdx.x * 4 + 3] = d3;
}
#endif

void launch_all(float *x, float *y, int n, cudaStream_t stream) {
    saxpy<<<(n + 255) / 256, 256>>>(n, 2.f, x, y);
    block_sum<float, 256><<<n / 256, 256, 0, stream>>>(x, y, n);
    reverse_dynamic<<<1, 128, 128 * sizeof(float)>>>(x, 128);
    void *args[] = {&x};
    cudaLaunchKernel((const void *)wide_block, dim3(1), dim3(1024), args, 0, stream);
}
