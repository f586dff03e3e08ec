#include "fg_driver.h"

#include <stdlib.h>

#include "fg_versions.h" /* generated from fakegpu/data/native_versions.json */

const char *fg_driver_version(char *buf, size_t len)
{
    const char *v = getenv("FAKEGPU_DRIVER_VERSION");
    fg_strlcpy(buf, v && *v ? v : FG_NATIVE_DRIVER_VERSION, len);
    return buf;
}

/* The CUDA version each driver branch shipped with. */
static int cuda_for_branch(int major)
{
    static const int table[][2] = {{525, 12000}, {530, 12010}, {535, 12020}, {545, 12030}, {550, 12040},
                                   {555, 12050}, {560, 12060}, {565, 12070}, {570, 12080}, {575, 12090},
                                   {580, 13000}};
    int cuda = 11080;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (major >= table[i][0])
            cuda = table[i][1];
    return cuda;
}

int fg_cuda_driver_version(void)
{
    const char *v = getenv("FAKEGPU_CUDA_VERSION");
    int cuda = v && *v ? atoi(v) : 0;
    if (cuda >= 1000)
        return cuda;
    const char *drv = getenv("FAKEGPU_DRIVER_VERSION");
    return drv && *drv ? cuda_for_branch(atoi(drv)) : FG_NATIVE_CUDA_VERSION;
}
