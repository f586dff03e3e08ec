/* Kernels: what nvcc-generated host code registers at load time (__cudaRegisterFatBinary, __cudaRegisterFunction,
 * __cudaRegisterVar) and how it launches (__cudaPushCallConfiguration/__cudaPopCallConfiguration, then
 * cudaLaunchKernel, or with CUDA 13 __cudaGetKernel + __cudaLaunchKernel). Device code is never run: a launch
 * is validated and counted per kernel name, and the counts go to the process report. Registered device
 * variables live at their host shadow's address, so cudaMemcpyToSymbol and cudaGetSymbolAddress work on it.
 *
 * As NVIDIA's runtime does, a registered fat binary becomes a driver module at the first launch of one of its
 * kernels (cuModuleLoadData, cuModuleGetFunction), and the launch goes on to cuLaunchKernel with the program's
 * arguments: the driver reads the kernel's parameter layout from the module and marks the device memory the
 * arguments point at as written by it (driver/written.c), which is how a later host read of kernel output is told
 * from a read of host-known data. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fgc_private.h"
#include "fgc_report.h"
#include "rt.h"

/* What __cudaRegisterFatBinary returns: nvcc's code only hands it back; the wrapper it registered comes first. */
typedef struct {
    void *fat_cubin;
    CUmodule module;
    int state; /* 0: not loaded yet, 1: loaded, -1: the driver refused the image */
} binary;

typedef struct {
    const void *host_fun; /* the host stub's address: the key programs launch by */
    const char *name;     /* the device function's (mangled) name, in the registering binary's rodata */
    const char *device_fun; /* the name to look up in the module (nvcc passes the same as name) */
    binary *bin;
    _Atomic(CUfunction) fn; /* the driver's function, once resolved */
    atomic_int fn_state;    /* 0: not resolved yet, 1: fn, -1: the driver has none */
    atomic_ullong launches;
    unsigned magic; /* KERNEL_MAGIC: tells our entries from other CUfunctions found in a graph */
} kernel;

#define KERNEL_MAGIC 0x6b65726eu

/* Open addressing keyed by host_fun; a libtorch_cuda registers tens of thousands of kernels at load time. */
static kernel **table;
static size_t table_cap, table_n;
static pthread_rwlock_t table_lock = PTHREAD_RWLOCK_INITIALIZER;
static atomic_ullong total_launches, unknown_launches, captured_launches;

static size_t slot_of(const void *key, size_t cap)
{
    uintptr_t h = (uintptr_t)key;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (size_t)h & (cap - 1);
}

static void put(kernel *k) /* caller holds the write lock and has room */
{
    size_t i = slot_of(k->host_fun, table_cap);
    while (table[i] && table[i]->host_fun != k->host_fun)
        i = (i + 1) & (table_cap - 1);
    if (!table[i])
        table_n++;
    table[i] = k;
}

static kernel *find(const void *host_fun)
{
    kernel *k = NULL;
    pthread_rwlock_rdlock(&table_lock);
    if (table_cap) {
        size_t i = slot_of(host_fun, table_cap);
        while (table[i] && table[i]->host_fun != host_fun)
            i = (i + 1) & (table_cap - 1);
        k = table[i];
    }
    pthread_rwlock_unlock(&table_lock);
    return k;
}

FGC_EXPORT void **__cudaRegisterFatBinary(void *fatCubin)
{
    /* Loaded as a module when one of its kernels is first launched (CUDA's lazy loading): a libtorch_cuda
     * registers hundreds of binaries and a program launches kernels of a few. */
    binary *b = calloc(1, sizeof *b);
    if (b)
        b->fat_cubin = fatCubin;
    return (void **)b;
}

FGC_EXPORT void __cudaRegisterFatBinaryEnd(void **handle) { (void)handle; }

FGC_EXPORT void __cudaUnregisterFatBinary(void **handle)
{
    /* Kernels of an unloaded binary stay in the table: their names are still wanted by the exit report, and
     * a host stub address cannot be launched once its library is gone. */
    (void)handle;
}

FGC_EXPORT void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun, const char *deviceName,
                                       int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize)
{
    (void)thread_limit, (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
    kernel *k = calloc(1, sizeof *k);
    if (!k)
        return;
    k->host_fun = hostFun;
    k->name = deviceName ? deviceName : deviceFun;
    k->device_fun = deviceFun ? deviceFun : deviceName;
    k->bin = (binary *)handle;
    k->magic = KERNEL_MAGIC;
    pthread_rwlock_wrlock(&table_lock);
    if ((table_n + 1) * 2 > table_cap) {
        size_t cap = table_cap ? table_cap * 2 : 4096;
        kernel **old = table;
        size_t old_cap = table_cap;
        table = calloc(cap, sizeof *table);
        if (!table) {
            table = old;
            pthread_rwlock_unlock(&table_lock);
            free(k);
            return;
        }
        table_cap = cap;
        table_n = 0;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i])
                put(old[i]);
        free(old);
    }
    put(k);
    pthread_rwlock_unlock(&table_lock);
}

FGC_EXPORT void __cudaRegisterVar(void **handle, char *hostVar, char *deviceAddress, const char *deviceName, int ext,
                                  size_t size, int constant, int global)
{
    (void)handle, (void)hostVar, (void)deviceAddress, (void)deviceName, (void)ext, (void)size, (void)constant,
        (void)global;
}

FGC_EXPORT void __cudaRegisterManagedVar(void **handle, void **hostVarPtrAddress, char *deviceAddress,
                                         const char *deviceName, int ext, size_t size, int constant, int global)
{
    (void)handle, (void)hostVarPtrAddress, (void)deviceAddress, (void)deviceName, (void)ext, (void)size,
        (void)constant, (void)global;
}

FGC_EXPORT char __cudaInitModule(void **handle)
{
    (void)handle;
    return 1;
}

/* ---- the driver's function of a kernel ---- */

static pthread_mutex_t resolve_lock = PTHREAD_MUTEX_INITIALIZER;

/* Driver function -> kernel, for graphs: their kernel nodes hold the driver's function (runtime/graph.c counts
 * replays per kernel). Open addressing, filled as kernels are resolved, under resolve_lock. */
static kernel **by_fn;
static size_t by_fn_cap, by_fn_n;

static void by_fn_put(kernel *k)
{
    if ((by_fn_n + 1) * 2 > by_fn_cap) {
        size_t cap = by_fn_cap ? by_fn_cap * 2 : 1024;
        kernel **grown = calloc(cap, sizeof *grown);
        if (!grown)
            return;
        for (size_t i = 0; i < by_fn_cap; i++)
            if (by_fn[i]) {
                size_t j = slot_of(atomic_load(&by_fn[i]->fn), cap);
                while (grown[j])
                    j = (j + 1) & (cap - 1);
                grown[j] = by_fn[i];
            }
        free(by_fn);
        by_fn = grown;
        by_fn_cap = cap;
    }
    size_t j = slot_of(atomic_load(&k->fn), by_fn_cap);
    while (by_fn[j])
        j = (j + 1) & (by_fn_cap - 1);
    by_fn[j] = k;
    by_fn_n++;
}

static kernel *by_fn_find(const void *fn)
{
    kernel *k = NULL;
    pthread_mutex_lock(&resolve_lock);
    if (by_fn_cap) {
        size_t j = slot_of(fn, by_fn_cap);
        while (by_fn[j] && (const void *)atomic_load(&by_fn[j]->fn) != fn)
            j = (j + 1) & (by_fn_cap - 1);
        k = by_fn[j];
    }
    pthread_mutex_unlock(&resolve_lock);
    return k;
}

/* The kernel's function in the driver's module of its fat binary, loading the module first; NULL when the
 * driver has none (the binary was not one the driver reads: the launch is then counted only). */
static CUfunction function_of(kernel *k)
{
    int st = atomic_load_explicit(&k->fn_state, memory_order_acquire);
    if (st)
        return st > 0 ? atomic_load_explicit(&k->fn, memory_order_relaxed) : NULL;
    pthread_mutex_lock(&resolve_lock);
    if (!atomic_load(&k->fn_state)) {
        binary *b = k->bin;
        if (b && !b->state) {
            CUresult rc = cuModuleLoadData(&b->module, b->fat_cubin);
            b->state = rc == CUDA_SUCCESS ? 1 : -1;
            if (rc != CUDA_SUCCESS)
                fg_debug("libcudart: the driver refused the fat binary of %s (error %d): its kernels' writes are "
                         "not tracked", k->name ? k->name : "?", (int)rc);
        }
        CUfunction fn = NULL;
        if (b && b->state > 0 && k->device_fun && cuModuleGetFunction(&fn, b->module, k->device_fun) != CUDA_SUCCESS)
            fn = NULL;
        atomic_store(&k->fn, fn);
        if (fn)
            by_fn_put(k);
        atomic_store_explicit(&k->fn_state, fn ? 1 : -1, memory_order_release);
    }
    pthread_mutex_unlock(&resolve_lock);
    return atomic_load(&k->fn);
}

/* ---- launch configuration: a small per-thread stack, pushed by <<<>>> and popped by the launch stub ---- */

typedef struct {
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
} config;

static __thread config stack[16];
static __thread unsigned depth;

FGC_EXPORT unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem, struct CUstream_st *stream)
{
    if (depth < sizeof stack / sizeof stack[0])
        stack[depth] = (config){grid, block, shmem, stream};
    depth++;
    return 0;
}

FGC_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shmem, void *stream)
{
    if (depth == 0)
        return rt_ret(cudaErrorInvalidConfiguration);
    depth--;
    if (depth < sizeof stack / sizeof stack[0]) {
        config c = stack[depth];
        if (grid)
            *grid = c.grid;
        if (block)
            *block = c.block;
        if (shmem)
            *shmem = c.shmem;
        if (stream)
            *(cudaStream_t *)stream = c.stream;
    }
    return cudaSuccess;
}

/* A launch into a capturing stream becomes a kernel node of the driver's graph (its function: the driver's, with
 * the arguments, which the driver copies; else our registry entry), counted as captured; graph launches count it
 * as executed (rt_graph_replayed). */
static int captured(kernel *k, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream, void **args,
                    cudaError_t *err)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUgraph graph = NULL;
    if (cuStreamGetCaptureInfo_v3(stream, &status, NULL, &graph, NULL, NULL, NULL) != CUDA_SUCCESS ||
        status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return 0;
    CUfunction fn = k ? function_of(k) : NULL;
    CUDA_KERNEL_NODE_PARAMS p = {.func = fn ? fn : (CUfunction)k, .gridDimX = grid.x, .gridDimY = grid.y,
                                 .gridDimZ = grid.z, .blockDimX = block.x, .blockDimY = block.y, .blockDimZ = block.z,
                                 .sharedMemBytes = (unsigned)shmem, .kernelParams = fn ? args : NULL};
    CUgraphNode node;
    *err = RT(cuGraphAddKernelNode_v2(&node, graph, NULL, 0, &p));
    if (*err == cudaSuccess)
        atomic_fetch_add_explicit(&captured_launches, 1, memory_order_relaxed);
    return 1;
}

const void *rt_kernel_of(const void *func)
{
    const kernel *k = func;
    if (k && k->magic == KERNEL_MAGIC && find(k->host_fun) == k)
        return k;
    return func ? by_fn_find(func) : NULL;
}

void rt_graph_replayed(const void *func, unsigned long long n)
{
    atomic_fetch_add_explicit(&total_launches, n, memory_order_relaxed);
    if (func)
        atomic_fetch_add_explicit(&((kernel *)func)->launches, n, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&unknown_launches, n, memory_order_relaxed);
}

static cudaError_t launch(kernel *k, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream, void **args)
{
    RT_CONTEXT();
    int max_threads = 0, max_smem = 0, dev = rt_device();
    cudaDeviceGetAttribute(&max_threads, cudaDevAttrMaxThreadsPerBlock, dev);
    cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    /* What a real launch rejects before running anything. */
    if (!grid.x || !grid.y || !grid.z || !threads || threads > (unsigned)max_threads || grid.y > 65535 ||
        grid.z > 65535 || block.z > 64 || shmem > (size_t)max_smem)
        return rt_ret(cudaErrorInvalidConfiguration);
    cudaError_t err;
    if (captured(k, grid, block, shmem, stream, args, &err))
        return err;
    CUfunction fn = k ? function_of(k) : NULL;
    if (fn) {
        err = RT(cuLaunchKernel(fn, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shmem, stream, args,
                                NULL));
        if (err != cudaSuccess)
            return err;
    } else { /* the driver never sees this launch: the timeline log has it from here (fgc_timeline.h) */
        fgc_tl_record r = {.kind = FGC_TL_KERNEL, .device = FGC_TL_NO_DEVICE, .stream = (uint64_t)(uintptr_t)stream,
                           .b = grid.x | (uint64_t)grid.y << 32,
                           .c = (grid.z & 0xffff) | (uint64_t)(block.x & 0xffff) << 16 |
                                (uint64_t)(block.y & 0xffff) << 32 | (uint64_t)(block.z & 0xffff) << 48,
                           .d = shmem};
        fgc_timeline(&r, k && k->name ? k->name : "(unregistered kernel)");
    }
    atomic_fetch_add_explicit(&total_launches, 1, memory_order_relaxed);
    if (k)
        atomic_fetch_add_explicit(&k->launches, 1, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&unknown_launches, 1, memory_order_relaxed);
    return cudaSuccess;
}

FGC_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
                                        cudaStream_t stream)
{
    if (!func)
        return rt_ret(cudaErrorInvalidDeviceFunction);
    return launch(find(func), grid, block, shmem, stream, args);
}

FGC_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 grid, dim3 block, void **args,
                                                   size_t shmem, cudaStream_t stream)
{
    return cudaLaunchKernel(func, grid, block, args, shmem, stream);
}

FGC_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *cfg, const void *func, void **args)
{
    if (!cfg)
        return rt_ret(cudaErrorInvalidValue);
    return cudaLaunchKernel(func, cfg->gridDim, cfg->blockDim, args, cfg->dynamicSmemBytes, cfg->stream);
}

/* CUDA 13's launch path: the generated stub asks once for a kernel handle, then launches by handle. Our
 * handle is the registry entry. */
FGC_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *out, const void *hostFun)
{
    if (!out)
        return rt_ret(cudaErrorInvalidValue);
    kernel *k = find(hostFun);
    *out = (cudaKernel_t)k;
    return k ? cudaSuccess : rt_ret(cudaErrorInvalidDeviceFunction);
}

FGC_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kern, dim3 grid, dim3 block, void **args, size_t shmem,
                                          cudaStream_t stream)
{
    if (!kern)
        return rt_ret(cudaErrorInvalidDeviceFunction);
    return launch((kernel *)kern, grid, block, shmem, stream, args);
}

FGC_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kern, dim3 grid, dim3 block, void **args, size_t shmem,
                                               cudaStream_t stream)
{
    return __cudaLaunchKernel(kern, grid, block, args, shmem, stream);
}

/* ---- function attributes and occupancy, from the device's limits ---- */

FGC_EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *func)
{
    if (!a || !func)
        return rt_ret(cudaErrorInvalidValue);
    RT_CONTEXT();
    int dev = rt_device(), major = 0, minor = 0, threads = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cudaDeviceGetAttribute(&threads, cudaDevAttrMaxThreadsPerBlock, dev);
    memset(a, 0, sizeof *a);
    /* No binary to inspect: a typical kernel's numbers (32 registers, no static shared memory). */
    a->maxThreadsPerBlock = threads;
    a->numRegs = 32;
    a->ptxVersion = a->binaryVersion = major * 10 + minor;
    a->maxDynamicSharedSizeBytes = 48 * 1024;
    a->preferredShmemCarveout = -1;
    return cudaSuccess;
}

FGC_EXPORT cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    (void)attr, (void)value;
    return rt_ret(func ? cudaSuccess : cudaErrorInvalidDeviceFunction);
}

FGC_EXPORT cudaError_t cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache cfg)
{
    (void)cfg;
    return rt_ret(func ? cudaSuccess : cudaErrorInvalidDeviceFunction);
}

FGC_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *num, const void *func,
                                                                             int blockSize, size_t smem,
                                                                             unsigned int flags)
{
    (void)flags;
    if (!num || !func || blockSize <= 0)
        return rt_ret(cudaErrorInvalidValue);
    RT_CONTEXT();
    int dev = rt_device(), per_sm = 0, blocks = 0, warp = 32, smem_sm = 0, regs_sm = 0;
    cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, dev);
    cudaDeviceGetAttribute(&blocks, cudaDevAttrMaxBlocksPerMultiprocessor, dev);
    cudaDeviceGetAttribute(&warp, cudaDevAttrWarpSize, dev);
    cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
    cudaDeviceGetAttribute(&regs_sm, cudaDevAttrMaxRegistersPerMultiprocessor, dev);
    int threads = (blockSize + warp - 1) / warp * warp;
    int n = per_sm / threads;
    if (n > blocks)
        n = blocks;
    int by_regs = regs_sm / (32 * threads); /* the 32 registers cudaFuncGetAttributes reports */
    if (n > by_regs)
        n = by_regs;
    if (smem && (int)(smem_sm / smem) < n)
        n = (int)(smem_sm / smem);
    *num = n;
    return cudaSuccess;
}

FGC_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *num, const void *func, int blockSize,
                                                                     size_t smem)
{
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(num, func, blockSize, smem, 0);
}

/* ---- device variables: they live at their host shadow's address ---- */

FGC_EXPORT cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol)
{
    if (!devPtr || !symbol)
        return rt_ret(cudaErrorInvalidSymbol);
    *devPtr = (void *)symbol;
    return cudaSuccess;
}

FGC_EXPORT cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count, size_t offset,
                                          enum cudaMemcpyKind kind)
{
    (void)kind;
    if (!symbol || (count && !src))
        return rt_ret(cudaErrorInvalidSymbol);
    memmove((char *)symbol + offset, src, count);
    return cudaSuccess;
}

FGC_EXPORT cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count, size_t offset,
                                            enum cudaMemcpyKind kind)
{
    (void)kind;
    if (!symbol || (count && !dst))
        return rt_ret(cudaErrorInvalidSymbol);
    memmove(dst, (const char *)symbol + offset, count);
    return cudaSuccess;
}

/* ---- the driver API through the runtime: our libcuda's entry points, never NVIDIA's ---- */

FGC_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                                        unsigned long long flags,
                                                        enum cudaDriverEntryPointQueryResult *status)
{
    if (!symbol || !funcPtr)
        return rt_ret(cudaErrorInvalidValue);
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult rc = cuGetProcAddress_v2(symbol, funcPtr, (int)cudaVersion, flags, &q);
    if (status)
        *status = q == CU_GET_PROC_ADDRESS_SUCCESS ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    /* Like CUDA: a missing symbol is reported through the status, the call itself succeeds. */
    return rc == CUDA_SUCCESS || rc == CUDA_ERROR_NOT_FOUND ? cudaSuccess : rt_ret(rt_err(rc));
}

FGC_EXPORT cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                               enum cudaDriverEntryPointQueryResult *status)
{
    return cudaGetDriverEntryPointByVersion(symbol, funcPtr, FG_CUDART_VERSION, flags, status);
}

/* ---- the report: launches per kernel, the most launched first (FAKEGPU_REPORT_TOP_KERNELS, default 50) ---- */

static int by_launches(const void *a, const void *b)
{
    unsigned long long x = atomic_load(&(*(kernel *const *)a)->launches);
    unsigned long long y = atomic_load(&(*(kernel *const *)b)->launches);
    return x < y ? 1 : x > y ? -1 : 0;
}

__attribute__((destructor)) static void write_report(void)
{
    /* Both runtimes (libcudart.so.12 and .13) are preloaded; one the process never used has nothing to say. */
    if (!table_n && !atomic_load(&total_launches) && !atomic_load(&captured_launches))
        return;
    char part[32];
    snprintf(part, sizeof part, "kernels-%d", CUDART_VERSION / 1000); /* merged with the other runtime's */
    FILE *f = fgc_part_open(part);
    if (!f)
        return;
    const char *top_env = getenv("FAKEGPU_REPORT_TOP_KERNELS");
    size_t top = top_env && *top_env ? (size_t)atol(top_env) : 50;
    pthread_rwlock_rdlock(&table_lock);
    kernel **launched = calloc(table_n + 1, sizeof *launched);
    size_t n = 0;
    for (size_t i = 0; launched && i < table_cap; i++)
        if (table[i] && atomic_load(&table[i]->launches))
            launched[n++] = table[i];
    if (launched)
        qsort(launched, n, sizeof *launched, by_launches);
    fprintf(f,
            "{\"registered\": %zu, \"launched_kernels\": %zu, \"launches\": %llu, \"captured_launches\": %llu, "
            "\"unregistered_launches\": %llu, \"top\": [",
            table_n, n, (unsigned long long)atomic_load(&total_launches),
            (unsigned long long)atomic_load(&captured_launches), (unsigned long long)atomic_load(&unknown_launches));
    for (size_t i = 0; i < n && i < top; i++) {
        fputs(i ? ", {\"name\": " : "{\"name\": ", f);
        fgc_json_string(f, launched[i]->name ? launched[i]->name : "?");
        fprintf(f, ", \"launches\": %llu}", (unsigned long long)atomic_load(&launched[i]->launches));
    }
    pthread_rwlock_unlock(&table_lock);
    free(launched);
    fputs("]}", f);
    fgc_part_close(f, part);
}
