/* Devices: count, current device, properties and attributes, all through the driver, whose answers come from
 * the device table. */
#include <stdio.h>
#include <string.h>

#include "rt.h"

static __thread int tls_device;
static __thread int tls_ready = -1; /* device whose context this thread made current */

/* The device of the driver's current context when there is one: it is what cudaSetDevice made current, or a
 * driver API user, or the other runtime (libcudart.so.12 and .13 can share a process, e.g. under a library
 * linked against the other one); else this thread's choice, device 0 by default. */
int rt_device(void)
{
    CUcontext ctx = NULL;
    CUdevice dev;
    if (cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx && cuCtxGetDevice(&dev) == CUDA_SUCCESS)
        tls_device = dev;
    return tls_device;
}

cudaError_t rt_err(CUresult rc) { return (cudaError_t)rc; }

/* cuInit, then what a real runtime checks first: a driver whose CUDA version is of an older major release than
 * this runtime's cannot serve it (CUDA 13's runtime on a 12.x driver); a newer minor release of the same major
 * runs, as CUDA's minor version compatibility allows. */
static cudaError_t rt_init(void)
{
    CUresult rc = cuInit(0);
    if (rc != CUDA_SUCCESS)
        return rc == CUDA_ERROR_NO_DEVICE ? cudaErrorNoDevice : rt_err(rc);
    int driver = 0;
    if (cuDriverGetVersion(&driver) == CUDA_SUCCESS && driver / 1000 < FG_CUDART_VERSION / 1000)
        return cudaErrorInsufficientDriver;
    return cudaSuccess;
}

/* Make `device`'s primary context the thread's current one. */
static cudaError_t make_current(int device)
{
    cudaError_t e = rt_init();
    if (e != cudaSuccess)
        return e;
    CUcontext ctx;
    CUresult rc = cuDevicePrimaryCtxRetain(&ctx, device);
    if (rc == CUDA_SUCCESS)
        rc = cuCtxSetCurrent(ctx);
    if (rc != CUDA_SUCCESS)
        return rt_err(rc);
    tls_device = tls_ready = device;
    return cudaSuccess;
}

cudaError_t rt_context(void)
{
    int device = rt_device();
    return tls_ready == device ? cudaSuccess : make_current(device);
}

FGC_EXPORT cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return rt_ret(cudaErrorInvalidValue);
    *count = 0;
    cudaError_t e = rt_init();
    if (e != cudaSuccess)
        return rt_ret(e);
    return RT(cuDeviceGetCount(count));
}

FGC_EXPORT cudaError_t cudaSetDevice(int device)
{
    cudaError_t e = rt_init();
    if (e != cudaSuccess)
        return rt_ret(e);
    int n = 0;
    cuDeviceGetCount(&n);
    if (device < 0 || device >= n)
        return rt_ret(cudaErrorInvalidDevice);
    /* CUDA 12+ initialises the device's primary context on cudaSetDevice. Not through rt_context(): that one
     * follows the driver's current context, which is still the previous device's. */
    return rt_ret(make_current(device));
}

FGC_EXPORT cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return rt_ret(cudaErrorInvalidValue);
    *device = rt_device();
    return cudaSuccess;
}

FGC_EXPORT cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags)
{
    (void)deviceFlags, (void)flags;
    /* Initialise the device without making it current: the thread's device and context are put back. */
    CUcontext saved_ctx = NULL;
    cuCtxGetCurrent(&saved_ctx);
    int saved = tls_device;
    cudaError_t e = cudaSetDevice(device);
    tls_device = saved;
    tls_ready = -1;
    cuCtxSetCurrent(saved_ctx);
    return e;
}

FGC_EXPORT cudaError_t cudaSetDeviceFlags(unsigned int flags)
{
    (void)flags;
    RT_CONTEXT();
    return cudaSuccess;
}

FGC_EXPORT cudaError_t cudaGetDeviceFlags(unsigned int *flags)
{
    if (!flags)
        return rt_ret(cudaErrorInvalidValue);
    *flags = 0;
    return cudaSuccess;
}

FGC_EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    /* cudaDeviceAttr and CUdevice_attribute share their numbering. */
    cudaError_t e = rt_init();
    if (e != cudaSuccess)
        return rt_ret(e);
    CUresult rc = cuDeviceGetAttribute(value, (CUdevice_attribute)attr, device);
    return rt_ret(rc == CUDA_ERROR_INVALID_DEVICE ? cudaErrorInvalidDevice : rt_err(rc));
}

static int attr(CUdevice_attribute a, int dev)
{
    int v = 0;
    cuDeviceGetAttribute(&v, a, dev);
    return v;
}

/* The texture and surface limits cudaDeviceProp carries beyond the plain 1D, 2D, 3D and 2D layered sizes. */
static void textures(struct cudaDeviceProp *p, int dev)
{
    p->maxTexture1DMipmap = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH, dev);
    p->maxTexture2DMipmap[0] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH, dev);
    p->maxTexture2DMipmap[1] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT, dev);
    p->maxTexture2DLinear[0] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH, dev);
    p->maxTexture2DLinear[1] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT, dev);
    p->maxTexture2DLinear[2] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH, dev);
    p->maxTexture2DGather[0] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH, dev);
    p->maxTexture2DGather[1] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT, dev);
    p->maxTexture3DAlt[0] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE, dev);
    p->maxTexture3DAlt[1] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE, dev);
    p->maxTexture3DAlt[2] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE, dev);
    p->maxTextureCubemap = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH, dev);
    p->maxTexture1DLayered[0] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH, dev);
    p->maxTexture1DLayered[1] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS, dev);
    p->maxTextureCubemapLayered[0] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH, dev);
    p->maxTextureCubemapLayered[1] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS, dev);
    p->maxSurface1D = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH, dev);
    p->maxSurface2D[0] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH, dev);
    p->maxSurface2D[1] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT, dev);
    p->maxSurface3D[0] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH, dev);
    p->maxSurface3D[1] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT, dev);
    p->maxSurface3D[2] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH, dev);
    p->maxSurface1DLayered[0] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH, dev);
    p->maxSurface1DLayered[1] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS, dev);
    p->maxSurface2DLayered[0] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH, dev);
    p->maxSurface2DLayered[1] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT, dev);
    p->maxSurface2DLayered[2] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS, dev);
    p->maxSurfaceCubemap = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH, dev);
    p->maxSurfaceCubemapLayered[0] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH, dev);
    p->maxSurfaceCubemapLayered[1] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS, dev);
}

/* cudaDeviceProp as laid out by the headers this runtime is built against, every field from the driver's
 * attributes (which come from the profile). CUDA 12's headers rename the function to
 * cudaGetDeviceProperties_v2 (the name torch 2.10 imports) and carry eight fields that CUDA 13 removed;
 * CUDA 13 adds the NUMA and PCI ids. */
FGC_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev)
{
    if (!p)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_init();
    if (e != cudaSuccess)
        return rt_ret(e);
    int n = 0;
    cuDeviceGetCount(&n);
    if (dev < 0 || dev >= n)
        return rt_ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    cuDeviceGetName(p->name, sizeof p->name, dev);
    cuDeviceGetUuid_v2((CUuuid *)&p->uuid, dev);
    cuDeviceTotalMem_v2(&p->totalGlobalMem, dev);
    p->sharedMemPerBlock = (size_t)attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, dev);
    p->regsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, dev);
    p->warpSize = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev);
    p->memPitch = (size_t)attr(CU_DEVICE_ATTRIBUTE_MAX_PITCH, dev);
    p->maxThreadsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev);
    p->maxThreadsDim[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, dev);
    p->maxThreadsDim[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, dev);
    p->maxThreadsDim[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, dev);
    p->maxGridSize[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, dev);
    p->maxGridSize[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, dev);
    p->maxGridSize[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, dev);
    p->totalConstMem = (size_t)attr(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, dev);
    p->major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    p->minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    p->textureAlignment = (size_t)attr(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, dev);
    p->texturePitchAlignment = (size_t)attr(CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, dev);
    p->multiProcessorCount = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    p->integrated = attr(CU_DEVICE_ATTRIBUTE_INTEGRATED, dev);
    p->canMapHostMemory = attr(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, dev);
    p->maxTexture1D = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH, dev);
    p->maxTexture2D[0] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH, dev);
    p->maxTexture2D[1] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT, dev);
    p->maxTexture3D[0] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH, dev);
    p->maxTexture3D[1] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT, dev);
    p->maxTexture3D[2] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH, dev);
    p->maxTexture2DLayered[0] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH, dev);
    p->maxTexture2DLayered[1] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT, dev);
    p->maxTexture2DLayered[2] = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS, dev);
    textures(p, dev);
    p->surfaceAlignment = (size_t)attr(CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT, dev);
    p->concurrentKernels = attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, dev);
    p->ECCEnabled = attr(CU_DEVICE_ATTRIBUTE_ECC_ENABLED, dev);
    p->pciBusID = attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev);
    p->pciDeviceID = attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev);
    p->pciDomainID = attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev);
    p->tccDriver = attr(CU_DEVICE_ATTRIBUTE_TCC_DRIVER, dev);
    p->asyncEngineCount = attr(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, dev);
    p->unifiedAddressing = attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, dev);
    p->memoryBusWidth = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, dev);
    p->l2CacheSize = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev);
    p->persistingL2CacheMaxSize = attr(CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, dev);
    p->maxThreadsPerMultiProcessor = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev);
    p->streamPrioritiesSupported = attr(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, dev);
    p->globalL1CacheSupported = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED, dev);
    p->localL1CacheSupported = attr(CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED, dev);
    p->sharedMemPerMultiprocessor = (size_t)attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev);
    p->regsPerMultiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, dev);
    p->managedMemory = attr(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, dev);
    p->isMultiGpuBoard = attr(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD, dev);
    p->multiGpuBoardGroupID = attr(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID, dev);
    p->hostNativeAtomicSupported = attr(CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, dev);
    p->pageableMemoryAccess = attr(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, dev);
    p->concurrentManagedAccess = attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, dev);
    p->computePreemptionSupported = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED, dev);
    p->canUseHostPointerForRegisteredMem = attr(CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, dev);
    p->cooperativeLaunch = attr(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, dev);
    p->sharedMemPerBlockOptin = (size_t)attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev);
    p->maxBlocksPerMultiProcessor = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, dev);
    p->accessPolicyMaxWindowSize = attr(CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, dev);
    p->reservedSharedMemPerBlock = (size_t)attr(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, dev);
    p->hostRegisterSupported = attr(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, dev);
    p->memoryPoolsSupported = attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev);
    p->clusterLaunch = attr(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, dev);
    p->sparseCudaArraySupported = attr(CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED, dev);
    p->hostRegisterReadOnlySupported = attr(CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, dev);
    p->timelineSemaphoreInteropSupported = attr(CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED, dev);
    p->gpuDirectRDMASupported = attr(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, dev);
    p->gpuDirectRDMAFlushWritesOptions = (unsigned)attr(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS, dev);
    p->gpuDirectRDMAWritesOrdering = attr(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING, dev);
    p->memoryPoolSupportedHandleTypes = (unsigned)attr(CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, dev);
    p->deferredMappingCudaArraySupported = attr(CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED, dev);
    p->ipcEventSupported = attr(CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, dev);
    p->unifiedFunctionPointers = attr(CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS, dev);
    p->pageableMemoryAccessUsesHostPageTables = attr(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, dev);
    p->directManagedMemAccessFromHost = attr(CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST, dev);
#if CUDART_VERSION >= 13000
    p->deviceNumaConfig = attr(CU_DEVICE_ATTRIBUTE_NUMA_CONFIG, dev);
    p->deviceNumaId = attr(CU_DEVICE_ATTRIBUTE_NUMA_ID, dev);
    p->hostNumaId = attr(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev);
    p->mpsEnabled = attr(CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev);
    p->hostNumaMultinodeIpcSupported = attr(CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED, dev);
    p->gpuPciDeviceID = (unsigned)attr(CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID, dev);
    p->gpuPciSubsystemID = (unsigned)attr(CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID, dev);
#else
    p->clockRate = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev);
    p->deviceOverlap = attr(CU_DEVICE_ATTRIBUTE_GPU_OVERLAP, dev);
    p->kernelExecTimeoutEnabled = attr(CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT, dev);
    p->computeMode = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, dev);
    p->maxTexture1DLinear = attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH, dev);
    p->memoryClockRate = attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev);
    p->singleToDoublePrecisionPerfRatio = attr(CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO, dev);
    p->cooperativeMultiDeviceLaunch = attr(CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH, dev);
#endif
    return cudaSuccess;
}

/* cudaLimit and CUlimit share their numbering, as the runtime's errors and the driver's do. */
FGC_EXPORT cudaError_t cudaDeviceGetLimit(size_t *value, enum cudaLimit limit)
{
    RT_CONTEXT();
    return RT(cuCtxGetLimit(value, (CUlimit)limit));
}

FGC_EXPORT cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value)
{
    RT_CONTEXT();
    return RT(cuCtxSetLimit((CUlimit)limit, value));
}

FGC_EXPORT cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device)
{
    return RT(cuDeviceGetPCIBusId(pciBusId, len, device));
}

FGC_EXPORT cudaError_t cudaDeviceGetByPCIBusId(int *device, const char *pciBusId)
{
    return RT(cuDeviceGetByPCIBusId(device, pciBusId));
}

FGC_EXPORT cudaError_t cudaDriverGetVersion(int *v) { return RT(cuDriverGetVersion(v)); }

FGC_EXPORT cudaError_t cudaRuntimeGetVersion(int *v)
{
    if (!v)
        return rt_ret(cudaErrorInvalidValue);
    *v = FG_CUDART_VERSION; /* the runtime we stand in for: CUDART_VERSION of the headers we built against */
    return cudaSuccess;
}

FGC_EXPORT cudaError_t cudaDeviceSynchronize(void)
{
    RT_CONTEXT();
    return RT(cuCtxSynchronize()); /* nothing runs asynchronously, but pools trim at synchronization */
}

FGC_EXPORT cudaError_t cudaDeviceReset(void) { return cudaSuccess; }

FGC_EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    RT_CONTEXT();
    return RT(cuCtxGetStreamPriorityRange(least, greatest));
}

FGC_EXPORT cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer)
{
    int n = 0;
    if (!can)
        return rt_ret(cudaErrorInvalidValue);
    if (rt_init() != cudaSuccess || cuDeviceGetCount(&n) != CUDA_SUCCESS || device < 0 || device >= n || peer < 0 ||
        peer >= n)
        return rt_ret(cudaErrorInvalidDevice);
    *can = device != peer; /* every fake device reaches every other (NVLink or PCIe P2P) */
    return cudaSuccess;
}

static __thread unsigned long long peers_enabled; /* per device would be exact; one bit per peer suffices here */

FGC_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
    if (flags != 0)
        return rt_ret(cudaErrorInvalidValue);
    RT_CONTEXT();
    int n = 0;
    cuDeviceGetCount(&n);
    if (peer < 0 || peer >= n || peer == rt_device())
        return rt_ret(cudaErrorInvalidDevice);
    unsigned long long bit = 1ULL << ((unsigned)(rt_device() * 8 + peer) % 64);
    if (peers_enabled & bit)
        return rt_ret(cudaErrorPeerAccessAlreadyEnabled);
    peers_enabled |= bit;
    return cudaSuccess;
}

FGC_EXPORT cudaError_t cudaDeviceDisablePeerAccess(int peer)
{
    unsigned long long bit = 1ULL << ((unsigned)(rt_device() * 8 + peer) % 64);
    if (!(peers_enabled & bit))
        return rt_ret(cudaErrorPeerAccessNotEnabled);
    peers_enabled &= ~bit;
    return cudaSuccess;
}

FGC_EXPORT cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
FGC_EXPORT cudaError_t cudaProfilerStop(void) { return cudaSuccess; }
