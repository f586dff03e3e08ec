/* The sticky last error and the error strings. Texts are short descriptions in the style CUDA uses; names are
 * the enumerators' names, which programs print and match. */
#include <stddef.h>

#include "rt.h"

static __thread cudaError_t last_error;

cudaError_t rt_ret(cudaError_t err)
{
    if (err != cudaSuccess)
        last_error = err;
    return err;
}

FGC_EXPORT cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

FGC_EXPORT cudaError_t cudaPeekAtLastError(void) { return last_error; }

#define E(code, text) {code, #code, text}
static const struct {
    cudaError_t code;
    const char *name, *text;
} errors[] = {
    E(cudaSuccess, "no error"),
    E(cudaErrorInvalidValue, "invalid argument"),
    E(cudaErrorMemoryAllocation, "out of memory"),
    E(cudaErrorInitializationError, "initialization error"),
    E(cudaErrorCudartUnloading, "driver shutting down"),
    E(cudaErrorInvalidConfiguration, "invalid configuration argument"),
    E(cudaErrorInvalidPitchValue, "invalid pitch argument"),
    E(cudaErrorInvalidSymbol, "invalid device symbol"),
    E(cudaErrorInvalidDevicePointer, "invalid device pointer"),
    E(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"),
    E(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version"),
    E(cudaErrorNoDevice, "no CUDA-capable device is detected"),
    E(cudaErrorInvalidDevice, "invalid device ordinal"),
    E(cudaErrorInvalidDeviceFunction, "invalid device function"),
    E(cudaErrorDeviceUninitialized, "invalid device context"),
    E(cudaErrorInvalidResourceHandle, "invalid resource handle"),
    E(cudaErrorSymbolNotFound, "named symbol not found"),
    E(cudaErrorNotReady, "device not ready"),
    E(cudaErrorIllegalAddress, "an illegal memory access was encountered"),
    E(cudaErrorLaunchFailure, "unspecified launch failure"),
    E(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled"),
    E(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled"),
    E(cudaErrorNotPermitted, "operation not permitted"),
    E(cudaErrorNotSupported, "operation not supported"),
    E(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing"),
    E(cudaErrorUnknown, "unknown error"),
};

FGC_EXPORT const char *cudaGetErrorString(cudaError_t error)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == error)
            return errors[i].text;
    return "unrecognized error code";
}

FGC_EXPORT const char *cudaGetErrorName(cudaError_t error)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == error)
            return errors[i].name;
    return "cudaErrorUnknown";
}
