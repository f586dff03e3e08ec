/* The few functions of the stub-only libraries (cuSPARSE, NVRTC, ...) that return something other than
 * a status, which a generated `long f(void)` stub cannot answer safely: versions and error strings. Compiled
 * into each stub library; the library's version script exports only its own. */
#include <stddef.h>

#include "fgc_unsup.h"

FGC_EXPORT const char *cusparseGetErrorString(int status)
{
    return status == 0 ? "CUSPARSE_STATUS_SUCCESS" : "CUSPARSE_STATUS_NOT_SUPPORTED (FakeGPU provides no cuSPARSE)";
}
FGC_EXPORT const char *nvrtcGetErrorString(int result)
{
    return result == 0 ? "NVRTC_SUCCESS" : "NVRTC_ERROR_INTERNAL_ERROR (FakeGPU provides no NVRTC)";
}
