/* fakegpu/devices/select.py in C, for the C `create`: what a container that names some of the host's GPUs
 * sees, as NVML under NVIDIA's runtime shows it (host order, numbered from 0, each board's identity kept). */
#include "select.h"

#include <string.h>

/* More digits than any index has: select.py's _INDEX_DIGITS. */
#define INDEX_DIGITS 6

/* The position of the device an entry names, -1 for none. */
static int position(const fg_devset *set, const char *entry, size_t len)
{
    if (len && strspn(entry, "0123456789") >= len) {
        if (len > INDEX_DIGITS)
            return -1;
        unsigned index = 0;
        for (size_t i = 0; i < len; i++)
            index = index * 10 + (unsigned)(entry[i] - '0');
        return index < set->count ? (int)index : -1;
    }
    if (len <= strlen(FG_UUID_PREFIX) || strncmp(entry, FG_UUID_PREFIX, strlen(FG_UUID_PREFIX)))
        return -1;
    for (unsigned i = 0; i < set->count; i++)
        if (strlen(set->dev[i].uuid) == len && !strncmp(set->dev[i].uuid, entry, len))
            return (int)i;
    return -1;
}

int fg_select_visible(fg_devset *set, const char *visible)
{
    unsigned char chosen[FG_MAX_DEVICES] = {0};
    for (const char *p = visible; *p;) {
        size_t len = strcspn(p, ",");
        int at = position(set, p, len);
        if (at < 0)
            return -1;
        chosen[at] = 1;
        p += len + (p[len] == ',');
    }
    unsigned n = 0;
    for (unsigned i = 0; i < set->count; i++) {
        if (!chosen[i])
            continue;
        if (n != i)
            set->dev[n] = set->dev[i];
        set->dev[n].index = n; /* minor_number, uuid, serial and pci_* stay the host's */
        n++;
    }
    set->count = n;
    return 0;
}
