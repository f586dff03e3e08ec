/* Modules and kernel launches through the driver API. Device code is never loaded or run (there is no
 * device): loading modules is not supported, and a launch of a function we could not have handed out is an
 * invalid handle. Runtime (cudart) launches are recorded by libcudart, which knows the kernels' names. */
#include "fgd.h"

FGC_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                   unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void **params,
                                   void **extra)
{
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem, (void)s, (void)params, (void)extra;
    FGD_INIT();
    return f ? (CUresult)fgc_refuse("cuda", "cuLaunchKernel", CUDA_ERROR_NOT_SUPPORTED) : CUDA_ERROR_INVALID_HANDLE;
}
