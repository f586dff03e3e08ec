/* cuGetProcAddress: driver entry points by name, resolved generically against this library's own exports
 * (never NVIDIA's), so a runtime or a program that asks for "cuMemAlloc" gets our cuMemAlloc_v2. The base name
 * -> current versioned name table is generated from cuda.h's `#define cuX cuX_vN` lines (cuda_aliases.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "fgd.h"

static const struct {
    const char *base, *versioned;
} aliases[] = {
#include "cuda_aliases.h"
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

/* Our export for `symbol` as the current headers name it, or NULL. */
FG_HIDDEN void *fgd_entry_point(const char *symbol);
void *fgd_entry_point(const char *symbol)
{
    void *h = self_handle();
    if (!h || !symbol)
        return NULL;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(aliases[i].base, symbol) == 0) {
            void *f = dlsym(h, aliases[i].versioned);
            if (f)
                return f;
        }
    return dlsym(h, symbol);
}

FGC_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                        CUdriverProcAddressQueryResult *symbolStatus)
{
    (void)cudaVersion, (void)flags;
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = fgd_entry_point(symbol);
    if (symbolStatus)
        *symbolStatus = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
