// Which host reads of device memory native mode calls reads of kernel output (tests/native_cuda/test_device_reads.py).
// One scenario per run, named by argv[1]; each prints "done" when it got through. Kernels do not run under
// FakeGPU: what matters is which memory they were given, not what they would compute.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

struct Views {
    int n;
    float *out; // a pointer inside a by-value struct: the kernel may write through it too
};

__global__ void fill(float *x, float v) { x[threadIdx.x] = v; }
__global__ void fill_view(Views v) { v.out[threadIdx.x] = (float)v.n; }
__global__ void nothing(int n) { (void)n; }

static float host[256];

static void read_back(const float *d, size_t n) { cudaMemcpy(host, d, n * sizeof(float), cudaMemcpyDeviceToHost); }

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "";
    float *a = nullptr, *b = nullptr;
    cudaMalloc(&a, 256 * sizeof(float));
    cudaMalloc(&b, 256 * sizeof(float));
    for (int i = 0; i < 256; i++)
        host[i] = (float)i;
    if (!strcmp(what, "h2d")) { // copied in, copied out: host-known; a kernel given other memory changes nothing
        cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice);
        fill<<<1, 256>>>(b, 1.0f);
        nothing<<<1, 1>>>(7);
        read_back(a, 256);
    } else if (!strcmp(what, "kernel")) { // the kernel was given the pointer: its output is read
        cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice);
        fill<<<1, 256>>>(a, 1.0f);
        read_back(a, 256);
    } else if (!strcmp(what, "memset")) { // a memset after the kernel makes the bytes host-known again
        fill<<<1, 256>>>(a, 1.0f);
        cudaMemset(a, 0, 256 * sizeof(float));
        read_back(a, 256);
    } else if (!strcmp(what, "d2d")) { // a device copy carries what its source was; then host-known data over it
        fill<<<1, 256>>>(a, 1.0f);
        cudaMemcpy(b, a, 256 * sizeof(float), cudaMemcpyDeviceToDevice);
        read_back(b, 256);
        cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice);
        cudaMemcpy(b, a, 256 * sizeof(float), cudaMemcpyDeviceToDevice);
        read_back(b, 256);
    } else if (!strcmp(what, "suballoc")) { // one allocation, two tensors in it (a caching allocator's segment)
        float *seg = nullptr;
        cudaMalloc(&seg, 1 << 20);
        float *first = seg, *second = seg + 1024;
        cudaMemcpy(first, host, sizeof host, cudaMemcpyHostToDevice);
        cudaMemcpy(second + 256, host, sizeof host, cudaMemcpyHostToDevice); // a third, after the second
        fill<<<1, 256>>>(second, 1.0f);
        read_back(first, 256);       // below the kernel's pointer: host-known
        read_back(second + 256, 256); // the next known range stops the kernel's extent: host-known
        read_back(second, 256);       // the kernel's output
    } else if (!strcmp(what, "struct")) { // the pointer is a member of a by-value struct argument
        cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice);
        fill_view<<<1, 256>>>(Views{3, a});
        read_back(a, 256);
    } else if (!strcmp(what, "graph")) { // captured, then replayed after the memory was made host-known
        cudaStream_t s;
        cudaStreamCreate(&s);
        cudaGraph_t g;
        cudaGraphExec_t e;
        cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
        fill<<<1, 256, 0, s>>>(a, 1.0f);
        cudaStreamEndCapture(s, &g);
        cudaGraphInstantiate(&e, g, 0);
        cudaGraphDestroy(g); // the executable graph keeps its own copy of the arguments
        cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice);
        read_back(a, 256); // capture ran nothing: host-known
        cudaGraphLaunch(e, s);
        cudaStreamSynchronize(s);
        read_back(a, 256); // the replay wrote it
    } else if (!strcmp(what, "2d")) { // a pitched 2D read back is one read
        fill<<<1, 256>>>(a, 1.0f);
        cudaMemcpy2D(host, 64 * sizeof(float), a, 64 * sizeof(float), 32 * sizeof(float), 4, cudaMemcpyDeviceToHost);
    } else if (!strcmp(what, "freed")) { // memory freed and allocated again starts with nothing written
        fill<<<1, 256>>>(a, 1.0f);
        cudaFree(a);
        cudaMalloc(&a, 256 * sizeof(float));
        read_back(a, 256);
    } else if (!strcmp(what, "twice")) { // the warning is printed once; every read is counted
        fill<<<1, 256>>>(a, 1.0f);
        read_back(a, 256);
        read_back(a, 128);
        std::printf("after-first-read\n");
    } else {
        std::printf("unknown scenario %s\n", what);
        return 2;
    }
    std::printf("done %s\n", what);
    return 0;
}
