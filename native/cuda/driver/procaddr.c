/* cuGetProcAddress: driver entry points by name, resolved generically against this library's own exports
 * (never NVIDIA's), so a runtime or a program that asks for "cuMemAlloc" gets our cuMemAlloc_v2. The base name
 * -> current versioned name table is generated from cuda.h's `#define cuX cuX_vN` lines (cuda_aliases.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "fgd.h"

typedef struct {
    const char *base, *versioned;
} alias;

static const alias aliases[] = {
#include "cuda_aliases.h"
};

/* CUDA 12's renames: a caller built with 12.x asking for "cuMemAdvise" wants 12's ABI (cuMemAdvise, an int
 * device), not CUDA 13's cuMemAdvise_v2; likewise cuStreamGetCaptureInfo (_v2, not _v3), cuCtxCreate. */
static const alias aliases12[] = {
#include "cuda12_aliases.h"
};

static void *self_handle(void)
{
    static void *handle;
    if (!handle) {
        Dl_info info;
        if (dladdr((void *)cuInit, &info) && info.dli_fname)
            handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    }
    return handle;
}

/* Our export for `symbol` as the headers of CUDA `cuda_version` name it, or NULL. */
static void *entry_point(const char *symbol, int cuda_version)
{
    void *h = self_handle();
    if (!h || !symbol)
        return NULL;
    const alias *table = cuda_version >= 13000 ? aliases : aliases12;
    size_t n = cuda_version >= 13000 ? sizeof aliases / sizeof aliases[0] : sizeof aliases12 / sizeof aliases12[0];
    for (size_t i = 0; i < n; i++)
        if (strcmp(table[i].base, symbol) == 0)
            return dlsym(h, table[i].versioned);
    return dlsym(h, symbol);
}

FGC_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                        CUdriverProcAddressQueryResult *symbolStatus)
{
    (void)flags;
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = entry_point(symbol, cudaVersion);
    if (symbolStatus)
        *symbolStatus = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
