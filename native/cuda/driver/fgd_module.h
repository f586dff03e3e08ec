/* Modules, functions and launches of FakeGPU's libcuda (driver/module.c, driver/image.c), and the account of which
 * device memory kernels may have written (driver/written.c). */
#ifndef FGD_MODULE_H
#define FGD_MODULE_H

#include <stdint.h>
#include <stdio.h>

#include "fgd.h"

struct fgd_param {
    uint32_t offset, size; /* in the packed parameter buffer, bytes */
};

/* One kernel of an image, as driver/image.c reads it. */
typedef struct {
    char *name;
    int layout; /* 1: each parameter's offset and size are known */
    unsigned nparams;
    struct fgd_param *params;
    uint32_t param_bytes;
} fgd_kernel_info;

typedef struct {
    fgd_kernel_info *k;
    size_t n, cap;
} fgd_kernel_list;

/* The kernels of an image (a fat binary wrapper, a fat binary, a cubin or PTX) for a device of compute capability
 * `cc` (major*10+minor). *opaque is set when the image could not be decoded (a compression we cannot read): the
 * list is then empty and the image still counts as loaded. */
FG_HIDDEN CUresult fgd_image_kernels(const void *image, int cc, fgd_kernel_list *out, int *opaque);
FG_HIDDEN void fgd_kernel_list_free(fgd_kernel_list *l);

#define FGD_FUNC_MAGIC 0x66756e63u /* "func" */

/* A CUfunction. Never freed: the account of written memory and the report keep pointing at its name, as the
 * runtime keeps the kernels of an unloaded binary. */
struct CUfunc_st {
    unsigned magic;
    char *name;
    int layout;
    unsigned nparams;
    struct fgd_param *params;
    uint32_t param_bytes;
    int fills; /* a contiguous fill with a constant (driver/fill.c): carried out at launch */
    struct CUfunc_st *next; /* its module's hash chain */
};

/* Parameter values of one launch, copied (a graph's kernel node keeps them for its replays). */
typedef struct {
    unsigned char *bytes; /* the packed parameters, each at its offset */
    size_t size;
    int packed;  /* copied from a CU_LAUNCH_PARAM_BUFFER_POINTER buffer */
    void **ptrs; /* nparams pointers into bytes (what cuGraphKernelNodeGetParams answers); NULL without a layout */
} fgd_param_copy;

/* Copy the values `params` (kernelParams) or `extra` (CU_LAUNCH_PARAM_BUFFER_*) point at; 0 on success. */
FG_HIDDEN int fgd_params_copy(const struct CUfunc_st *f, void **params, void **extra, fgd_param_copy *out);
FG_HIDDEN void fgd_params_free(fgd_param_copy *c);
/* Launch `f` again with copied parameters (a graph replay). */
FG_HIDDEN void fgd_launched_copy(const struct CUfunc_st *f, int device, const fgd_param_copy *c);
/* The launch of `f` with these parameters happened: the memory it may write is marked (driver/written.c). */
FG_HIDDEN void fgd_launched(const struct CUfunc_st *f, int device, void **params, void **extra);
FG_HIDDEN int fgd_is_function(const void *f);

/* ---- kernels whose effect is known without running them (driver/fill.c) ---- */

/* Is the kernel of this name and parameter layout a contiguous fill with a constant (PyTorch's)? */
FG_HIDDEN int fgd_fill_kernel(const char *name, int layout, unsigned nparams, const struct fgd_param *params);
/* A launch of such a kernel (parameters as cuLaunchKernel's kernelParams, or a packed buffer of `size` bytes):
 * 1 when its fill was carried out and its bytes are host-known, 0 when it must count as an ordinary kernel. */
FG_HIDDEN int fgd_fill_launched(const struct CUfunc_st *f, void **params, const unsigned char *buf, size_t size);
/* A launch into a capturing stream becomes a kernel node of its graph (driver/graph.c): 1 when recorded. */
FG_HIDDEN int fgd_capture_kernel(CUstream s, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned smem, void **params, void **extra, CUresult *rc);

/* The span of addresses device allocations have ever covered (0 when none was made), and for each of n
 * addresses the end of the device allocation holding it (a VMM mapping: of the run of adjacent mappings of its
 * reservation), 0 when it is not in device memory (driver/memory.c). */
FG_HIDDEN int fgd_device_span(uintptr_t *lo, uintptr_t *hi);
FG_HIDDEN void fgd_alloc_ends(const uintptr_t *p, size_t n, uintptr_t *end);
/* The device allocations of `device` (bases and sizes, malloc'ed; the caller frees both); their count. */
FG_HIDDEN size_t fgd_device_allocations(int device, uintptr_t **base, size_t **size);

/* ---- which device memory kernels may have written (driver/written.c) ----
 * Byte ranges inside allocations, each either host-known (its contents came from the host: copied in, set, or
 * copied from host-known memory) or written by a kernel (named). Memory never written counts as host-known. */

/* A kernel was given pointers p[i] into allocations that end at end[i] (0: not device memory): it may write from
 * each on, up to the next range this account knows of (another tensor of a sub-allocated segment), at most to the
 * end of the allocation. */
FG_HIDDEN void fgd_written_kernel(const uintptr_t *p, const uintptr_t *end, size_t n, const char *kernel);
/* [p, p+n) now holds host-known contents (a copy from the host, a memset). */
FG_HIDDEN void fgd_written_host(uintptr_t p, size_t n);
/* Device-to-device copy: dst gets what src's bytes are. */
FG_HIDDEN void fgd_written_copy(uintptr_t dst, uintptr_t src, size_t n);
/* The allocation [base, base+n) is gone. */
FG_HIDDEN void fgd_written_drop(uintptr_t base, size_t n);
/* A kernel whose parameters are unknown ran on `device`: every allocation of it may have been written. */
FG_HIDDEN void fgd_written_unknown(int device, const char *kernel);
/* The program reads [src, src+n) of device memory on the host (through `api`): applies the policy when a kernel
 * may have written any of it. */
FG_HIDDEN void fgd_written_read(uintptr_t src, size_t n, const char *api);
/* A kernel launch's effect was carried out on the host (driver/fill.c): counted in the report. */
FG_HIDDEN void fgd_written_carried_out(void);
/* Section "device_reads" of the process report. */
FG_HIDDEN void fgd_written_report(FILE *f);

#endif
