/* cuGetErrorString / cuGetErrorName: the driver's one table of error names and texts (driver/errors.def). */
#include <stddef.h>

#include "fgd.h"

static const struct {
    CUresult code;
    const char *name, *text;
} errors[] = {
#define FGD_ERROR(code, text) {code, #code, text},
#include "errors.def"
#undef FGD_ERROR
};

static int find(CUresult error)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == error)
            return (int)i;
    return -1;
}

FGC_EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    int i = find(error);
    *pStr = i < 0 ? NULL : errors[i].text;
    return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    int i = find(error);
    *pStr = i < 0 ? NULL : errors[i].name;
    return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
