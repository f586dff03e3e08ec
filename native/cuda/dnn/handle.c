/* Handles, versions and errors. A handle belongs to the device current at cudnnCreate and holds the stream the
 * program sets on it. Versions are those of the cudnn.h this library was compiled against, the header of the
 * nvidia-cudnn wheel the torch install brings: torch compares the runtime version (cudnnGetProperty) with the
 * one it was built against, and the wheel it depends on is that one. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "fgdnn.h"

/* cuDNN 9.11+ (and CUDA 13) support compute capability 7.5 and newer only. */
#define FGDNN_MIN_CC 75

static __thread char last_error[256];

cudnnStatus_t fgdnn_fail(cudnnStatus_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(last_error, sizeof last_error, "%s: ", cudnnGetErrorString(status));
    if (n > 0 && (size_t)n < sizeof last_error)
        vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, ap);
    va_end(ap);
    fg_debug("cudnn: %s", last_error);
    return status;
}

int fgdnn_handle_ok(cudnnHandle_t h) { return h && h->magic == FGDNN_HANDLE_MAGIC; }

FGC_EXPORT cudnnStatus_t cudnnCreate(cudnnHandle_t *handle)
{
    if (!handle)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnCreate: handle is NULL");
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        cudaGetLastError(); /* our failure is reported as cuDNN's, not left as the runtime's sticky error */
        return fgdnn_fail(CUDNN_STATUS_NOT_INITIALIZED, "cudnnCreate: no CUDA device");
    }
    if (major * 10 + minor < FGDNN_MIN_CC)
        return fgdnn_fail(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH,
                          "cudnnCreate: device %d has compute capability %d.%d, cuDNN %d.%d needs 7.5 or newer", dev,
                          major, minor, CUDNN_MAJOR, CUDNN_MINOR);
    struct cudnnContext *h = calloc(1, sizeof *h);
    if (!h)
        return fgdnn_fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "cudnnCreate: out of host memory");
    h->magic = FGDNN_HANDLE_MAGIC;
    h->device = dev;
    *handle = h;
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnDestroy(cudnnHandle_t handle)
{
    if (!fgdnn_handle_ok(handle))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy: not a cuDNN handle");
    handle->magic = 0;
    free(handle);
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream)
{
    if (!fgdnn_handle_ok(handle))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: not a cuDNN handle");
    atomic_store(&handle->stream, stream);
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t *stream)
{
    if (!fgdnn_handle_ok(handle) || !stream)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetStream: not a cuDNN handle, or stream is NULL");
    *stream = atomic_load(&handle->stream);
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT size_t cudnnGetVersion(void) { return CUDNN_VERSION; }
FGC_EXPORT size_t cudnnGetMaxDeviceVersion(void) { return CUDNN_MAX_DEVICE_VERSION; }
FGC_EXPORT size_t cudnnGetCudartVersion(void) { return CUDART_VERSION; }

FGC_EXPORT cudnnStatus_t cudnnGetProperty(libraryPropertyType type, int *value)
{
    if (!value)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetProperty: value is NULL");
    switch (type) {
    case MAJOR_VERSION:
        *value = CUDNN_MAJOR;
        return CUDNN_STATUS_SUCCESS;
    case MINOR_VERSION:
        *value = CUDNN_MINOR;
        return CUDNN_STATUS_SUCCESS;
    case PATCH_LEVEL:
        *value = CUDNN_PATCHLEVEL;
        return CUDNN_STATUS_SUCCESS;
    default:
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetProperty: unknown property %d", (int)type);
    }
}

/* Every sub-library is this one library, so their versions always agree. */
FGC_EXPORT cudnnStatus_t cudnnGraphVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }
FGC_EXPORT cudnnStatus_t cudnnOpsVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }
FGC_EXPORT cudnnStatus_t cudnnCnnVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }
FGC_EXPORT cudnnStatus_t cudnnAdvVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }

FGC_EXPORT const char *cudnnGetErrorString(cudnnStatus_t status)
{
    switch ((int)status) {
#define S(name)                                                                                                   \
    case name:                                                                                                    \
        return #name;
        S(CUDNN_STATUS_SUCCESS)
        S(CUDNN_STATUS_NOT_INITIALIZED)
        S(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH)
        S(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH)
        S(CUDNN_STATUS_DEPRECATED)
        S(CUDNN_STATUS_LICENSE_ERROR)
        S(CUDNN_STATUS_RUNTIME_IN_PROGRESS)
        S(CUDNN_STATUS_RUNTIME_FP_OVERFLOW)
        S(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED)
        S(CUDNN_STATUS_BAD_PARAM)
        S(CUDNN_STATUS_INVALID_VALUE)
        S(CUDNN_STATUS_BAD_PARAM_NULL_POINTER)
        S(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER)
        S(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED)
        S(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND)
        S(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT)
        S(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH)
        S(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH)
        S(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES)
        S(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE)
        S(CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH)
        S(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE)
        S(CUDNN_STATUS_NOT_SUPPORTED)
        S(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN)
        S(CUDNN_STATUS_NOT_SUPPORTED_SHAPE)
        S(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE)
        S(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT)
        S(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER)
        S(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART)
        S(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH)
        S(CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING)
        S(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE)
        S(CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT)
        S(CUDNN_STATUS_NOT_SUPPORTED_PADDING)
        S(CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM)
        S(CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API)
        S(CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE)
        S(CUDNN_STATUS_INTERNAL_ERROR)
        S(CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED)
        S(CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE)
        S(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)
        S(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
        S(CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM)
        S(CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED)
        S(CUDNN_STATUS_EXECUTION_FAILED)
        S(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER)
        S(CUDNN_STATUS_EXECUTION_FAILED_CUBLAS)
        S(CUDNN_STATUS_EXECUTION_FAILED_CUDART)
        S(CUDNN_STATUS_EXECUTION_FAILED_CURAND)
#undef S
    default:
        return "CUDNN_STATUS_UNKNOWN";
    }
}

/* The message of the calling thread's last failed call, then cleared (as cuDNN does). */
FGC_EXPORT void cudnnGetLastErrorString(char *message, size_t max)
{
    if (!message || !max)
        return;
    snprintf(message, max, "%s", last_error);
    last_error[0] = 0;
}
