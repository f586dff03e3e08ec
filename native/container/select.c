/* fakegpu/devices/select.py in C, for the C `create`: what a container that names some of the host's GPUs and
 * MIG devices sees, as NVML under NVIDIA's runtime shows it (host order, numbered from 0, each board's identity
 * kept; a MIG-mode board with only the MIG devices named). Errors are Python's to word: -1 hands over. */
#include "select.h"

#include <string.h>

/* More digits than any index has: select.py's _INDEX_DIGITS. */
#define INDEX_DIGITS 6
#define WHOLE -1

/* A decimal index of len characters, or -1 when it is none; past INDEX_DIGITS it is larger than any count. */
static long index_of(const char *s, size_t len)
{
    if (!len || strspn(s, "0123456789") < len)
        return -1;
    if (len > INDEX_DIGITS)
        return 1000000;
    long v = 0;
    for (size_t i = 0; i < len; i++)
        v = v * 10 + (s[i] - '0');
    return v;
}

static int has_prefix(const char *entry, size_t len, const char *prefix)
{
    return len >= strlen(prefix) && !strncmp(entry, prefix, strlen(prefix));
}

/* The GPU an entry names (its position) and the MIG device under it (WHOLE: the GPU named whole); -1: none. */
static int target(const fg_devset *set, const char *entry, size_t len, int *mig)
{
    *mig = WHOLE;
    long index = index_of(entry, len);
    if (index >= 0)
        return index < set->count ? (int)index : -1;
    if (has_prefix(entry, len, FG_UUID_PREFIX)) {
        for (unsigned i = 0; i < set->count; i++)
            if (strlen(set->dev[i].uuid) == len && !strncmp(set->dev[i].uuid, entry, len))
                return (int)i;
        return -1;
    }
    if (has_prefix(entry, len, FG_MIG_UUID_PREFIX)) {
        for (unsigned i = 0; i < set->count; i++)
            for (unsigned k = 0; k < set->dev[i].mig_count; k++)
                if (strlen(set->dev[i].mig[k].uuid) == len && !strncmp(set->dev[i].mig[k].uuid, entry, len)) {
                    *mig = (int)k;
                    return (int)i;
                }
        return -1;
    }
    const char *colon = memchr(entry, ':', len);
    if (!colon)
        return -1;
    long gpu = index_of(entry, (size_t)(colon - entry));
    long k = index_of(colon + 1, len - (size_t)(colon - entry) - 1);
    if (gpu < 0 || k < 0 || gpu >= set->count || !set->dev[gpu].mig_mode || k >= set->dev[gpu].mig_count)
        return -1;
    *mig = (int)k;
    return (int)gpu;
}

/* Keep the MIG devices in `named` (a bit per MIG device index), numbered from 0 under the GPU. */
static void keep_migs(fg_device *d, unsigned named)
{
    unsigned n = 0;
    for (unsigned k = 0; k < d->mig_count; k++) {
        if (!(named & (1u << k)))
            continue;
        if (n != k)
            d->mig[n] = d->mig[k];
        d->mig[n].index = n; /* placement, GPU instance ID and UUID stay the host's */
        n++;
    }
    d->mig_count = n;
}

int fg_select_visible(fg_devset *set, const char *visible)
{
    unsigned char chosen[FG_MAX_DEVICES] = {0};
    unsigned migs[FG_MAX_DEVICES] = {0};
    for (const char *p = visible; *p;) {
        size_t len = strcspn(p, ",");
        int mig;
        int at = target(set, p, len, &mig);
        if (at < 0)
            return -1;
        chosen[at] = 1;
        if (mig != WHOLE)
            migs[at] |= 1u << mig;
        p += len + (p[len] == ',');
    }
    unsigned n = 0;
    for (unsigned i = 0; i < set->count; i++) {
        if (!chosen[i])
            continue;
        if (n != i)
            set->dev[n] = set->dev[i];
        set->dev[n].index = n; /* minor_number, uuid, serial and pci_* stay the host's */
        keep_migs(&set->dev[n], migs[i]);
        n++;
    }
    set->count = n;
    return 0;
}
