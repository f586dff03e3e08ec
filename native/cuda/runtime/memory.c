/* Memory through the runtime: allocations, copies and fills go to the driver, which owns the account per device
 * and the memory mode (in accounting mode it drops writes to device memory and reads it as zeros). */
#include <stdint.h>
#include <string.h>

#include "rt.h"

FGC_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    if (!devPtr)
        return rt_ret(cudaErrorInvalidValue);
    RT_CONTEXT();
    if (size == 0) { /* CUDA answers a zero-byte request with a NULL pointer and success */
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr p = 0;
    CUresult rc = cuMemAlloc_v2(&p, size);
    *devPtr = rc == CUDA_SUCCESS ? (void *)(uintptr_t)p : NULL;
    return rt_ret(rc == CUDA_ERROR_OUT_OF_MEMORY ? cudaErrorMemoryAllocation : rt_err(rc));
}

/* The driver's result of an allocation as the runtime reports it: running out is cudaErrorMemoryAllocation. */
static cudaError_t alloc_ret(CUresult rc)
{
    return rt_ret(rc == CUDA_ERROR_OUT_OF_MEMORY ? cudaErrorMemoryAllocation : rt_err(rc));
}

/* Stream-ordered allocation from the device's current pool (driver/pool.c). */
FGC_EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream)
{
    if (!devPtr)
        return rt_ret(cudaErrorInvalidValue);
    RT_CONTEXT();
    if (size == 0) { /* as cudaMalloc: a NULL pointer and success */
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr p = 0;
    CUresult rc = cuMemAllocAsync(&p, size, stream);
    *devPtr = rc == CUDA_SUCCESS ? (void *)(uintptr_t)p : NULL;
    return alloc_ret(rc);
}

FGC_EXPORT cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
    if (!ptr)
        return rt_ret(cudaErrorInvalidValue);
    RT_CONTEXT();
    CUdeviceptr p = 0;
    CUresult rc = cuMemAllocFromPoolAsync(&p, size, memPool, stream);
    *ptr = rc == CUDA_SUCCESS ? (void *)(uintptr_t)p : NULL;
    return alloc_ret(rc);
}

FGC_EXPORT cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    (void)flags;
    return cudaMalloc(devPtr, size);
}

/* cudaFree(NULL) is how programs (PyTorch among them) ask for the context to exist. */
FGC_EXPORT cudaError_t cudaFree(void *devPtr)
{
    RT_CONTEXT();
    return RT(cuMemFree_v2((CUdeviceptr)(uintptr_t)devPtr));
}

FGC_EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream)
{
    RT_CONTEXT();
    return RT(cuMemFreeAsync((CUdeviceptr)(uintptr_t)devPtr, stream));
}

/* ---- memory pools: the driver's (cudaMemPool_t is CUmemoryPool, the attributes and access flags agree) ---- */

FGC_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
    return RT(cuDeviceGetDefaultMemPool(memPool, device));
}

FGC_EXPORT cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
    return RT(cuDeviceGetMemPool(memPool, device));
}

FGC_EXPORT cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool)
{
    return RT(cuDeviceSetMemPool(device, memPool));
}

FGC_EXPORT cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *poolProps)
{
    return RT(cuMemPoolCreate(memPool, (const CUmemPoolProps *)poolProps));
}

FGC_EXPORT cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool) { return RT(cuMemPoolDestroy(memPool)); }

FGC_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
    return RT(cuMemPoolTrimTo(memPool, minBytesToKeep));
}

FGC_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    return RT(cuMemPoolSetAttribute(memPool, (CUmemPool_attribute)attr, value));
}

FGC_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    return RT(cuMemPoolGetAttribute(memPool, (CUmemPool_attribute)attr, value));
}

FGC_EXPORT cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool, const struct cudaMemAccessDesc *descList,
                                            size_t count)
{
    return RT(cuMemPoolSetAccess(memPool, (const CUmemAccessDesc *)descList, count));
}

FGC_EXPORT cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value)
{
    return RT(cuDeviceGetGraphMemAttribute(device, (CUgraphMem_attribute)attr, value));
}

FGC_EXPORT cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value)
{
    return RT(cuDeviceSetGraphMemAttribute(device, (CUgraphMem_attribute)attr, value));
}

FGC_EXPORT cudaError_t cudaDeviceGraphMemTrim(int device) { return RT(cuDeviceGraphMemTrim(device)); }

FGC_EXPORT cudaError_t cudaMemPoolGetAccess(enum cudaMemAccessFlags *flags, cudaMemPool_t memPool,
                                            struct cudaMemLocation *location)
{
    return RT(cuMemPoolGetAccess((CUmemAccess_flags *)flags, memPool, (CUmemLocation *)location));
}

FGC_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    RT_CONTEXT();
    return rt_ret(cuMemAllocHost_v2(ptr, size) == CUDA_SUCCESS ? cudaSuccess : cudaErrorMemoryAllocation);
}

FGC_EXPORT cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags)
{
    RT_CONTEXT();
    return rt_ret(cuMemHostAlloc(ptr, size, flags) == CUDA_SUCCESS ? cudaSuccess : cudaErrorMemoryAllocation);
}

FGC_EXPORT cudaError_t cudaFreeHost(void *ptr) { return RT(cuMemFreeHost(ptr)); }

/* Registering host memory pins it on a real system; here every host page is already reachable. */
FGC_EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    (void)flags;
    return rt_ret(ptr && size ? cudaSuccess : cudaErrorInvalidValue);
}

FGC_EXPORT cudaError_t cudaHostUnregister(void *ptr) { return rt_ret(ptr ? cudaSuccess : cudaErrorInvalidValue); }

FGC_EXPORT cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
    RT_CONTEXT();
    return RT(cuMemGetInfo_v2(free, total));
}

/* A copy now (synchronous API, stream NULL) or in `stream`'s order, which the driver records instead when the
 * stream is capturing a graph. */
static cudaError_t copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, int async,
                        cudaStream_t stream)
{
    if ((unsigned)kind > cudaMemcpyDefault)
        return rt_ret(cudaErrorInvalidMemcpyDirection);
    if (n && (!dst || !src))
        return rt_ret(cudaErrorInvalidValue);
    if (!n)
        return cudaSuccess;
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, s = (CUdeviceptr)(uintptr_t)src;
    return RT(async ? cuMemcpyAsync(d, s, n, stream) : cuMemcpy(d, s, n));
}

FGC_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    return copy(dst, src, n, kind, 0, NULL);
}

FGC_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                       cudaStream_t stream)
{
    return copy(dst, src, n, kind, 1, stream);
}

FGC_EXPORT cudaError_t cudaMemcpyPeer(void *dst, int dd, const void *src, int sd, size_t n)
{
    (void)dd, (void)sd;
    return copy(dst, src, n, cudaMemcpyDeviceToDevice, 0, NULL);
}

FGC_EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dd, const void *src, int sd, size_t n, cudaStream_t s)
{
    (void)dd, (void)sd;
    return copy(dst, src, n, cudaMemcpyDeviceToDevice, 1, s);
}

/* 2D copies are the driver's (one read of device memory, not one per row); pointers are unified addresses. */
static cudaError_t copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                          enum cudaMemcpyKind kind, int async, cudaStream_t stream)
{
    if ((unsigned)kind > cudaMemcpyDefault)
        return rt_ret(cudaErrorInvalidMemcpyDirection);
    if (width > dpitch || width > spitch)
        return rt_ret(cudaErrorInvalidPitchValue);
    CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_UNIFIED, .srcDevice = (CUdeviceptr)(uintptr_t)src,
                       .srcPitch = spitch, .dstMemoryType = CU_MEMORYTYPE_UNIFIED,
                       .dstDevice = (CUdeviceptr)(uintptr_t)dst, .dstPitch = dpitch, .WidthInBytes = width,
                       .Height = height};
    return RT(async ? cuMemcpy2DAsync_v2(&c, stream) : cuMemcpy2D_v2(&c));
}

FGC_EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                    size_t height, enum cudaMemcpyKind kind)
{
    return copy2d(dst, dpitch, src, spitch, width, height, kind, 0, NULL);
}

FGC_EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                         size_t height, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return copy2d(dst, dpitch, src, spitch, width, height, kind, 1, stream);
}

FGC_EXPORT cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    if (count && !devPtr)
        return rt_ret(cudaErrorInvalidValue);
    return count ? RT(cuMemsetD8_v2((CUdeviceptr)(uintptr_t)devPtr, (unsigned char)value, count)) : cudaSuccess;
}

FGC_EXPORT cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    if (count && !devPtr)
        return rt_ret(cudaErrorInvalidValue);
    return count ? RT(cuMemsetD8Async((CUdeviceptr)(uintptr_t)devPtr, (unsigned char)value, count, stream))
                 : cudaSuccess;
}

FGC_EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *ptr)
{
    if (!a)
        return rt_ret(cudaErrorInvalidValue);
    memset(a, 0, sizeof *a);
    unsigned type = 0;
    int device = 0;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
    if (cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS) {
        a->type = cudaMemoryTypeUnregistered; /* plain host memory: success since CUDA 11 */
        a->device = -2;
        a->hostPointer = (void *)ptr;
        return cudaSuccess;
    }
    cuPointerGetAttribute(&device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
    a->device = device;
    if (type == CU_MEMORYTYPE_HOST) {
        a->type = cudaMemoryTypeHost;
        a->hostPointer = a->devicePointer = (void *)ptr;
    } else {
        a->type = cudaMemoryTypeDevice;
        a->devicePointer = (void *)ptr;
    }
    return cudaSuccess;
}
