/* Modules and kernel launches through the driver API. Device code is never run (there is no device), but a
 * module is read for its kernels' names and parameter layouts (driver/image.c), and a launch looks through its
 * parameters for pointers into device memory: those allocations may be written by the kernel, which is what
 * tells a later device-to-host read of kernel output from one of host-known data (driver/written.c).
 *
 * libcudart launches the kernels nvcc-generated code registers through here (it loads each registered fat binary
 * as a module, as NVIDIA's runtime does), and FakeGPU's cuBLAS and cuDNN launch their own stand-in kernels, one
 * per routine, whose parameters are the routine's outputs, so every path that writes device memory on a GPU is
 * seen by the one account. Launches are counted per kernel by libcudart (the report's kernels section); a launch
 * made through the driver API alone is accounted for written memory only. One kind of kernel is carried out
 * rather than accounted: a contiguous fill with a constant (driver/fill.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgd_module.h"
#include "fgd_timeline.h"

#define MODULE_MAGIC 0x6d6f646cu /* "modl" */

struct CUmod_st {
    unsigned magic;
    int opaque; /* the image could not be decoded: every name is found, without a parameter layout */
    size_t nbuckets;
    struct CUfunc_st **buckets;
    pthread_mutex_t lock; /* an opaque module creates functions as they are asked for */
};

static size_t hash_name(const char *s)
{
    size_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static struct CUfunc_st *func_new(const char *name, int layout, unsigned nparams, const struct fgd_param *params,
                                  uint32_t bytes)
{
    struct CUfunc_st *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->magic = FGD_FUNC_MAGIC;
    f->name = strdup(name);
    f->layout = layout;
    f->nparams = nparams;
    f->param_bytes = bytes;
    f->fills = fgd_fill_kernel(name, layout, nparams, params);
    if (nparams) {
        f->params = malloc(nparams * sizeof *f->params);
        if (f->params)
            memcpy(f->params, params, nparams * sizeof *f->params);
    }
    if (!f->name || (nparams && !f->params)) {
        free(f->name);
        free(f->params);
        free(f);
        return NULL;
    }
    return f;
}

static struct CUfunc_st *find(const struct CUmod_st *m, const char *name)
{
    for (struct CUfunc_st *f = m->buckets[hash_name(name) & (m->nbuckets - 1)]; f; f = f->next)
        if (strcmp(f->name, name) == 0)
            return f;
    return NULL;
}

static void insert(struct CUmod_st *m, struct CUfunc_st *f)
{
    size_t b = hash_name(f->name) & (m->nbuckets - 1);
    f->next = m->buckets[b];
    m->buckets[b] = f;
}

static CUresult load(CUmodule *out, const void *image)
{
    FGD_INIT();
    if (!out || !image)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c = fgd_current();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    const fg_device *d = &fgd.devs.dev[c->device];
    fgd_kernel_list list;
    int opaque = 0;
    CUresult rc = fgd_image_kernels(image, d->cc_major * 10 + d->cc_minor, &list, &opaque);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct CUmod_st *m = calloc(1, sizeof *m);
    size_t nb = 16;
    while (nb < list.n * 2)
        nb *= 2;
    if (m)
        m->buckets = calloc(nb, sizeof *m->buckets);
    if (!m || !m->buckets) {
        free(m);
        fgd_kernel_list_free(&list);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->magic = MODULE_MAGIC;
    m->opaque = opaque;
    m->nbuckets = nb;
    pthread_mutex_init(&m->lock, NULL);
    for (size_t i = 0; i < list.n; i++) {
        const fgd_kernel_info *k = &list.k[i];
        if (find(m, k->name))
            continue;
        struct CUfunc_st *f = func_new(k->name, k->layout, k->nparams, k->params, k->param_bytes);
        if (f)
            insert(m, f);
    }
    fgd_kernel_list_free(&list);
    *out = m;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image) { return load(module, image); }

FGC_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                       CUjit_option *options, void **optionValues)
{
    (void)numOptions, (void)options, (void)optionValues; /* JIT options: nothing is compiled */
    return load(module, image);
}

FGC_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin) { return load(module, fatCubin); }

FGC_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    FGD_INIT();
    if (!module || !fname)
        return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(fname, "rb");
    if (!f)
        return CUDA_ERROR_FILE_NOT_FOUND;
    size_t cap = 1 << 16, n = 0, got;
    unsigned char *buf = malloc(cap + 1);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            unsigned char *grown = realloc(buf, (cap *= 2) + 1);
            if (!grown)
                free(buf);
            buf = grown;
        }
    }
    fclose(f);
    if (!buf)
        return CUDA_ERROR_OUT_OF_MEMORY;
    buf[n] = 0; /* PTX is text */
    CUresult rc = n ? load(module, buf) : CUDA_ERROR_INVALID_IMAGE;
    free(buf);
    return rc;
}

static struct CUmod_st *module_of(CUmodule m) { return m && m->magic == MODULE_MAGIC ? m : NULL; }

FGC_EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
    FGD_INIT();
    struct CUmod_st *m = module_of(hmod);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    m->magic = 0; /* its functions stay valid objects (see struct CUfunc_st) */
    free(m->buckets);
    pthread_mutex_destroy(&m->lock);
    free(m);
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    FGD_INIT();
    struct CUmod_st *m = module_of(hmod);
    if (!hfunc || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!m->opaque) { /* immutable once loaded */
        *hfunc = find(m, name);
        return *hfunc ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
    }
    pthread_mutex_lock(&m->lock);
    struct CUfunc_st *f = find(m, name);
    if (!f && (f = func_new(name, 0, 0, NULL, 0)) != NULL)
        insert(m, f);
    pthread_mutex_unlock(&m->lock);
    *hfunc = f;
    return f ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

FGC_EXPORT CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule hmod)
{
    FGD_INIT();
    struct CUmod_st *m = module_of(hmod);
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    unsigned n = 0;
    pthread_mutex_lock(&m->lock);
    for (size_t b = 0; b < m->nbuckets; b++)
        for (struct CUfunc_st *f = m->buckets[b]; f; f = f->next)
            n++;
    pthread_mutex_unlock(&m->lock);
    *count = n;
    return CUDA_SUCCESS;
}

int fgd_is_function(const void *f) { return f && ((const struct CUfunc_st *)f)->magic == FGD_FUNC_MAGIC; }

FGC_EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    FGD_INIT();
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fgd_is_function(hfunc))
        return CUDA_ERROR_INVALID_HANDLE;
    *name = hfunc->name;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuFuncGetParamCount(CUfunction func, size_t *paramCount)
{
    FGD_INIT();
    if (!paramCount)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fgd_is_function(func))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!func->layout)
        return (CUresult)fgc_refuse("cuda", "cuFuncGetParamCount(function without parameter information)",
                                    CUDA_ERROR_NOT_SUPPORTED);
    *paramCount = func->nparams;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
    FGD_INIT();
    if (!paramOffset || !paramSize)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fgd_is_function(func))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!func->layout)
        return (CUresult)fgc_refuse("cuda", "cuFuncGetParamInfo(function without parameter information)",
                                    CUDA_ERROR_NOT_SUPPORTED);
    if (paramIndex >= func->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    *paramOffset = func->params[paramIndex].offset;
    *paramSize = func->params[paramIndex].size;
    return CUDA_SUCCESS;
}

/* ---- parameters ---- */

/* The packed buffer and its size a launch's `extra` names, or NULL. */
static const unsigned char *extra_buffer(void **extra, size_t *size)
{
    const unsigned char *buf = NULL;
    *size = 0;
    for (size_t i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END && i < 64; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
            *size = *(size_t *)extra[i + 1];
    }
    return buf && *size ? buf : NULL;
}

int fgd_params_copy(const struct CUfunc_st *f, void **params, void **extra, fgd_param_copy *out)
{
    memset(out, 0, sizeof *out);
    size_t esize;
    const unsigned char *ebuf = extra_buffer(extra, &esize);
    size_t bytes = ebuf ? esize : f->layout ? f->param_bytes : 0;
    if (!bytes)
        return 0; /* no parameters, or none we could know the size of */
    out->bytes = calloc(1, bytes);
    out->ptrs = f->layout && f->nparams ? calloc(f->nparams, sizeof *out->ptrs) : NULL;
    if (!out->bytes || (f->layout && f->nparams && !out->ptrs)) {
        fgd_params_free(out);
        return -1;
    }
    out->size = bytes;
    out->packed = ebuf != NULL;
    if (ebuf)
        memcpy(out->bytes, ebuf, bytes);
    for (unsigned i = 0; f->layout && i < f->nparams; i++) {
        const struct fgd_param *p = &f->params[i];
        if (p->offset + p->size > bytes)
            continue;
        if (!ebuf && params && params[i] && p->size)
            memcpy(out->bytes + p->offset, params[i], p->size);
        out->ptrs[i] = out->bytes + p->offset;
    }
    return 0;
}

void fgd_params_free(fgd_param_copy *c)
{
    free(c->bytes);
    free(c->ptrs);
    memset(c, 0, sizeof *c);
}

/* Candidate pointers of a launch: every 8-byte word of every parameter that can hold one, inside the span of
 * addresses device allocations have ever had. A scalar that happens to equal a device address is taken for a
 * pointer too: the account errs toward "a kernel may have written it". */
#define MAX_CANDIDATES 512

static size_t collect(const unsigned char *p, size_t size, uintptr_t lo, uintptr_t hi, uintptr_t *out, size_t n)
{
    for (size_t off = 0; off + sizeof(uintptr_t) <= size && n < MAX_CANDIDATES; off += sizeof(uintptr_t)) {
        uintptr_t v;
        memcpy(&v, p + off, sizeof v);
        if (v >= lo && v < hi)
            out[n++] = v;
    }
    return n;
}

void fgd_launched(const struct CUfunc_st *f, int device, void **params, void **extra)
{
    fgd_activity("cuLaunchKernel", f->name, 0);
    size_t esize;
    const unsigned char *ebuf = extra_buffer(extra, &esize);
    if (f->fills && fgd_fill_launched(f, params, ebuf, esize)) {
        fgd_written_carried_out();
        return;
    }
    if (!f->layout && !ebuf) { /* nothing tells which of its arguments are pointers */
        fgd_written_unknown(device, f->name);
        return;
    }
    uintptr_t lo, hi;
    if (!fgd_device_span(&lo, &hi))
        return; /* no device memory was ever allocated */
    uintptr_t cand[MAX_CANDIDATES], end[MAX_CANDIDATES];
    size_t n = 0;
    if (ebuf) {
        n = collect(ebuf, esize, lo, hi, cand, n);
    } else {
        for (unsigned i = 0; i < f->nparams && params; i++)
            if (f->params[i].size >= sizeof(uintptr_t) && params[i])
                n = collect(params[i], f->params[i].size, lo, hi, cand, n);
    }
    if (!n)
        return;
    fgd_alloc_ends(cand, n, end);
    fgd_written_kernel(cand, end, n, f->name);
}

void fgd_launched_copy(const struct CUfunc_st *f, int device, const fgd_param_copy *c)
{
    if (!c->packed) {
        fgd_launched(f, device, c->ptrs, NULL);
        return;
    }
    size_t size = c->size; /* captured from a packed buffer: replayed as one */
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, c->bytes, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    fgd_launched(f, device, NULL, extra);
}

/* ---- launches ---- */

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned smem, CUstream s, void **params, void **extra)
{
    FGD_INIT();
    fgd_stamp t0 = fgd_timeline_stamp();
    if (!fgd_is_function(f))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!gx || !gy || !gz || !bx || !by || !bz || (params && extra_buffer(extra, &(size_t){0})))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c = fgd_current();
    int device = fgd_default_stream(s) ? (c ? c->device : 0) : s->device;
    if (fgd_lost(device))
        return CUDA_ERROR_UNKNOWN;
    const fgd_limits *lim = &fgd.lim[device];
    unsigned long long threads = (unsigned long long)bx * by * bz;
    if (threads > lim->max_threads_per_block || gy > 65535 || gz > 65535 || bz > 64 ||
        smem > lim->smem_per_block_optin)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc;
    if (fgd_capture_kernel(s, f, gx, gy, gz, bx, by, bz, smem, params, extra, &rc))
        return rc;
    fgd_launched(f, device, params, extra);
    fgd_load_part(device, FGD_PART_FIRST_LAUNCH);
    fgd_launch_busy(device, ((const struct CUfunc_st *)f)->name, (unsigned long long)gx * gy * gz);
    fgd_timeline_kernel(s, ((const struct CUfunc_st *)f)->name, gx, gy, gz, bx, by, bz, smem, t0);
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                   unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void **params,
                                   void **extra)
{
    return launch(f, gx, gy, gz, bx, by, bz, smem, s, params, extra);
}

FGC_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                              unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                                              CUstream s, void **params)
{
    return launch(f, gx, gy, gz, bx, by, bz, smem, s, params, NULL);
}

FGC_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    /* Launch attributes (clusters, priorities, programmatic serialization) change nothing without a device. */
    return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                  config->blockDimZ, config->sharedMemBytes, config->hStream, params, extra);
}
