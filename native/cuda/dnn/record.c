/* What an execution leaves behind: the device pointers it was given are checked against the program's
 * allocations (the driver's table, as cuPointerGetAttribute and cuMemGetAddressRange answer it), and the work is
 * one kernel launch in libcudart's account, under a name that says what cuDNN ran ("cudnn:ConvolutionFwd").
 * Kernels are registered with the runtime the way nvcc-generated code registers its own, one host-side anchor
 * per distinct name, so the process report lists them with everything else the program launched. Each name's
 * fat binary holds a stand-in kernel of that name taking FGDNN_MAX_OUTPUTS pointers (common/fgc_image.h): the
 * launch passes the execution's outputs, so the driver marks them as written by it, as for any kernel. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop

#include "fgc_image.h"
#include "fgc_private.h"
#include "fgdnn.h"

/* The runtime's registration entry points (what nvcc emits calls to; not in a public header). */
extern void **__cudaRegisterFatBinary(void *fatCubin);
extern void __cudaRegisterFatBinaryEnd(void **handle);
extern void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun, const char *deviceName,
                                   int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);

#define MAX_KERNELS 256

static struct {
    char *name;
    char *anchor; /* the host-side address the kernel is launched by */
} kernels[MAX_KERNELS];
static size_t nkernels;
static pthread_mutex_t kernels_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *anchor_of(const char *name)
{
    pthread_mutex_lock(&kernels_lock);
    const char *found = NULL;
    for (size_t i = 0; i < nkernels && !found; i++)
        if (strcmp(kernels[i].name, name) == 0)
            found = kernels[i].anchor;
    if (!found && nkernels < MAX_KERNELS) {
        char *n = strdup(name), *a = malloc(1);
        void *image = n ? fgc_image_new(n, FGDNN_MAX_OUTPUTS) : NULL;
        void **module = image ? __cudaRegisterFatBinary(image) : NULL;
        if (module)
            __cudaRegisterFatBinaryEnd(module);
        if (n && a && module) {
            __cudaRegisterFunction(module, a, n, n, -1, NULL, NULL, NULL, NULL, NULL);
            kernels[nkernels].name = n;
            kernels[nkernels].anchor = a;
            nkernels++;
            found = a;
        } else {
            free(n);
            free(a);
        }
    }
    pthread_mutex_unlock(&kernels_lock);
    return found;
}

cudnnStatus_t fgdnn_launch(const char *name, cudaStream_t stream, unsigned long long elements,
                           const void *const *outs, size_t nouts)
{
    fgc_library_loaded("cudnn"); /* a real cuDNN's kernels would load into the context with its first run */
    const char *anchor = anchor_of(name);
    if (!anchor)
        return fgdnn_fail(CUDNN_STATUS_INTERNAL_ERROR, "%s: kernel registry full", name);
    unsigned long long blocks = (elements + 255) / 256;
    dim3 grid = {(unsigned)(blocks ? (blocks < 0x7fffffffULL ? blocks : 0x7fffffffULL) : 1), 1, 1};
    dim3 block = {256, 1, 1};
    const void *param[FGDNN_MAX_OUTPUTS] = {0}; /* unused slots are NULL: no device memory */
    void *args[FGDNN_MAX_OUTPUTS];
    for (size_t i = 0; i < FGDNN_MAX_OUTPUTS; i++) {
        param[i] = i < nouts ? outs[i] : NULL;
        args[i] = &param[i];
    }
    cudaError_t e = cudaLaunchKernel(anchor, grid, block, args, 0, stream);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* reported as cuDNN's failure, as cuDNN does, not left sticky */
        return fgdnn_fail(CUDNN_STATUS_EXECUTION_FAILED_CUDART, "%s: launch failed (%s)", name,
                          cudaGetErrorName(e));
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t fgdnn_check_device_ptr(const void *p, int device, size_t bytes, const char *what)
{
    if (!p)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s: NULL device pointer", what);
    CUdeviceptr base = 0, dp = (CUdeviceptr)(uintptr_t)p;
    size_t size = 0;
    unsigned type = 0;
    int ordinal = -1;
    if (cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp) != CUDA_SUCCESS ||
        type != CU_MEMORYTYPE_DEVICE || cuMemGetAddressRange(&base, &size, dp) != CUDA_SUCCESS)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: %p is not device memory", what, p);
    cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dp);
    if (ordinal != device)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "%s: %p is memory of device %d, the handle's device is %d", what, p,
                          ordinal, device);
    if (dp - base + bytes > size)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM,
                          "%s: %zu bytes from %p run past the end of its allocation (%zu bytes from %p)", what, bytes,
                          p, size, (void *)(uintptr_t)base);
    return CUDNN_STATUS_SUCCESS;
}
