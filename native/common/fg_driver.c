#include "fg_driver.h"

#include <stdlib.h>
#include <string.h>

#include "fg_devices.h"
#include "fg_versions.h" /* generated from fakegpu/data/native_versions.json */

int fg_is_driver_version(const char *text)
{
    /* A three-digit branch not starting with 0, then one or two parts of 1-3 digits. */
    if (strlen(text) > 11 || text[0] < '1' || text[0] > '9')
        return 0;
    int parts = 0;
    for (const char *p = text;; parts++) {
        size_t digits = strspn(p, "0123456789");
        if (!digits || digits > 3 || (parts == 0 && digits != 3))
            return 0;
        p += digits;
        if (!*p)
            break;
        if (*p++ != '.')
            return 0;
    }
    return parts >= 1 && parts <= 2;
}

/* The driver chosen for this process, or NULL for the default. */
static const char *chosen(char *buf, size_t len)
{
    const char *v = getenv("FAKEGPU_DRIVER_VERSION");
    if (v && *v)
        return v;
    return fg_devices_table_driver(buf, len) ? buf : NULL;
}

const char *fg_driver_version(char *buf, size_t len)
{
    char table[16];
    const char *v = chosen(table, sizeof table);
    fg_strlcpy(buf, v ? v : FG_NATIVE_DRIVER_VERSION, len);
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
    char table[16];
    const char *drv = chosen(table, sizeof table);
    return drv ? cuda_for_branch(atoi(drv)) : FG_NATIVE_CUDA_VERSION;
}

const char *fg_driver_branch(const char *version)
{
    static const char *const known[][2] = FG_DRIVER_BRANCHES;
    for (size_t i = 0; known[i][0]; i++)
        if (!strcmp(known[i][0], version))
            return known[i][1];
    return NULL;
}
