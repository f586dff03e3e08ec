#include "fg_visible.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
    unsigned dev; /* index in the original set */
    int mig;      /* MIG instance of it, or -1: the whole board */
} pick;

static unsigned expand(const fg_devset *s, unsigned dev, pick *out)
{
    const fg_device *d = &s->dev[dev];
    if (!d->mig_mode) {
        out[0] = (pick){dev, -1};
        return 1;
    }
    for (unsigned m = 0; m < d->mig_count; m++)
        out[m] = (pick){dev, (int)m};
    return d->mig_count;
}

/* _pick() of cuda_view.py: the devices one entry names, or 0 when it names none (or more than one). */
static unsigned pick_entry(const fg_devset *s, const char *entry, pick *out)
{
    size_t n = strlen(entry);
    if (n && strspn(entry, "0123456789") == n) {
        if (n > 3)
            return 0;
        unsigned i = (unsigned)atoi(entry);
        return i < s->count ? expand(s, i, out) : 0;
    }
    if (!strncasecmp(entry, "GPU-", 4)) {
        int found = -1;
        for (unsigned i = 0; i < s->count; i++)
            if (!strncasecmp(s->dev[i].uuid, entry, n)) {
                if (found >= 0)
                    return 0;
                found = (int)i;
            }
        return found >= 0 ? expand(s, (unsigned)found, out) : 0;
    }
    if (!strncasecmp(entry, "MIG-", 4)) {
        unsigned hits = 0;
        for (unsigned i = 0; i < s->count; i++)
            for (unsigned m = 0; m < s->dev[i].mig_count; m++)
                if (!strncasecmp(s->dev[i].mig[m].uuid, entry, n)) {
                    out[0] = (pick){i, (int)m};
                    hits++;
                }
        return hits == 1 ? 1 : 0;
    }
    return 0;
}

static int chosen_already(const pick *chosen, unsigned n, pick p)
{
    for (unsigned i = 0; i < n; i++)
        if (chosen[i].dev == p.dev && chosen[i].mig == p.mig)
            return 1;
    return 0;
}

/* mig_profile() of cuda_view.py: the board as CUDA sees one slice of it. */
static void slice_of(const fg_device *board, const fg_mig_instance *m, fg_device *out)
{
    *out = *board;
    const fg_mig_profile *p = &board->mig_board.profiles[m->profile];
    unsigned cores_per_sm = board->sm_count ? board->cuda_cores / board->sm_count : 0;
    fg_mig_device_name(board->name, p, out->name, sizeof out->name);
    fg_strlcpy(out->uuid, m->uuid, sizeof out->uuid);
    out->mem_total = out->cuda_total = (unsigned long long)p->memory_mib << 20;
    out->sm_count = p->sm_count;
    out->cuda_cores = cores_per_sm * p->sm_count;
    out->l2_bytes = board->mig_board.memory_slices ? board->l2_bytes * p->size / board->mig_board.memory_slices : 0;
    out->mig_supported = 0;
    out->mig_mode = 0;
    out->mig_count = 0;
    out->mig_slice = (int)m->gi_id + 1;
}

void fg_devices_cuda_view(fg_devset *set, const char *visible, unsigned board[FG_MAX_DEVICES])
{
    static pick chosen[FG_MAX_DEVICES * FG_MIG_MAX_INSTANCES];
    unsigned n = 0;
    pick got[FG_MIG_MAX_INSTANCES];
    if (!visible) {
        for (unsigned i = 0; i < set->count; i++)
            n += expand(set, i, chosen + n);
    } else {
        char buf[4096];
        fg_strlcpy(buf, visible, sizeof buf);
        char *cursor = buf;
        /* strtok would skip empty entries; CUDA stops at one. */
        for (;;) {
            char *comma = strchr(cursor, ',');
            if (comma)
                *comma = '\0';
            char *e = cursor;
            while (*e && isspace((unsigned char)*e))
                e++;
            size_t len = strlen(e);
            while (len && isspace((unsigned char)e[len - 1]))
                e[--len] = '\0';
            unsigned k = pick_entry(set, e, got);
            int dup = 0;
            for (unsigned j = 0; j < k; j++)
                dup |= chosen_already(chosen, n, got[j]);
            if (!k || dup)
                break;
            for (unsigned j = 0; j < k; j++)
                chosen[n++] = got[j];
            if (!comma)
                break;
            cursor = comma + 1;
        }
    }
    if (n > FG_MAX_DEVICES)
        n = FG_MAX_DEVICES;
    static fg_devset view;
    memcpy(&view, set, sizeof view);
    for (unsigned i = 0; i < n; i++) {
        const fg_device *src = &set->dev[chosen[i].dev];
        if (chosen[i].mig < 0)
            view.dev[i] = *src;
        else
            slice_of(src, &src->mig[chosen[i].mig], &view.dev[i]);
        view.dev[i].index = i;
        board[i] = chosen[i].dev;
    }
    view.count = n;
    memcpy(set, &view, sizeof view);
}
