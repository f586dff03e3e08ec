/* The sticky last error and the error strings. Names are the enumerators' names, which programs print and
 * match; texts are the driver's wherever the runtime shares its code. */
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

/* The runtime's own names, and texts only for the codes the driver does not share: a code the runtime numbers as
 * the driver does takes the driver's text (driver/errors.def, through cuGetErrorString), so the two agree and
 * every driver error a program meets prints as on a real system. */
#define E(code, text) {code, #code, text}
#define D(code) {code, #code, NULL}
static const struct {
    cudaError_t code;
    const char *name, *text;
} errors[] = {
    D(cudaSuccess),
    D(cudaErrorInvalidValue),
    D(cudaErrorMemoryAllocation),
    D(cudaErrorInitializationError),
    D(cudaErrorCudartUnloading),
    E(cudaErrorInvalidConfiguration, "invalid configuration argument"),
    E(cudaErrorInvalidPitchValue, "invalid pitch argument"),
    E(cudaErrorInvalidSymbol, "invalid device symbol"),
    E(cudaErrorInvalidDevicePointer, "invalid device pointer"),
    E(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"),
    E(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version"),
    D(cudaErrorNoDevice),
    D(cudaErrorInvalidDevice),
    E(cudaErrorInvalidDeviceFunction, "invalid device function"),
    D(cudaErrorDeviceUninitialized),
    D(cudaErrorUnsupportedLimit),
    D(cudaErrorInvalidResourceHandle),
    D(cudaErrorSymbolNotFound),
    D(cudaErrorNotReady),
    D(cudaErrorIllegalAddress),
    D(cudaErrorLaunchFailure),
    D(cudaErrorPeerAccessAlreadyEnabled),
    D(cudaErrorPeerAccessNotEnabled),
    D(cudaErrorNotPermitted),
    D(cudaErrorNotSupported),
    D(cudaErrorStreamCaptureUnsupported),
    D(cudaErrorUnknown),
};

FGC_EXPORT const char *cudaGetErrorString(cudaError_t error)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == error && errors[i].text)
            return errors[i].text;
    const char *text = NULL;
    if (cuGetErrorString((CUresult)error, &text) == CUDA_SUCCESS && text)
        return text;
    return "unrecognized error code";
}

FGC_EXPORT const char *cudaGetErrorName(cudaError_t error)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == error)
            return errors[i].name;
    return "cudaErrorUnknown";
}
