/* nvidia-smi mig: which GPUs a report covers, and what its reports share (profile order, the instance walk, the
 * row builder). A driver reports only the selected GPUs that have MIG mode enabled (the profile lists: every MIG
 * board); with none, every report and change prints the one line "No MIG-enabled devices found." (scripts grep
 * for that line). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smi.h"

int smi_mig_on(nvmlDevice_t d)
{
    unsigned current = NVML_DEVICE_MIG_DISABLE, pending = NVML_DEVICE_MIG_DISABLE;
    return nvmlDeviceGetMigMode(d, &current, &pending) == NVML_SUCCESS && current == NVML_DEVICE_MIG_ENABLE;
}

unsigned smi_mig_devices(nvmlDevice_t d, nvmlDevice_t *out, unsigned max)
{
    unsigned slots = 0, n = 0;
    if (nvmlDeviceGetMaxMigDeviceCount(d, &slots) != NVML_SUCCESS)
        return 0;
    /* Slots the layout leaves empty answer NOT_FOUND; the walk skips them as NVML's header says to. */
    for (unsigned i = 0; i < slots && n < max; i++)
        if (nvmlDeviceGetMigDeviceHandleByIndex(d, i, &out[n]) == NVML_SUCCESS)
            n++;
    return n;
}

int smi_id_listed(const char *list, unsigned id)
{
    if (!list)
        return 1;
    for (const char *p = list; *p;) {
        char *end = NULL;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p)
            return 0;
        if (v == id)
            return 1;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return 0;
    }
    return 0;
}

/* -lgip lists a board's profiles by size: slices, then memory, then ID, which puts 1g.10gb+me (20) after
 * 1g.10gb (19) and before 1g.20gb (15) as real A100/H100 captures do; NVML's profile constants are in no such
 * order (the +me and 1g.20gb variants came later and got the higher numbers). */
static int profile_cmp(const void *a, const void *b)
{
    const nvmlGpuInstanceProfileInfo_v2_t *x = a, *y = b;
    if (x->sliceCount != y->sliceCount)
        return x->sliceCount < y->sliceCount ? -1 : 1;
    if (x->memorySizeMB != y->memorySizeMB)
        return x->memorySizeMB < y->memorySizeMB ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

unsigned smi_gi_profiles(nvmlDevice_t d, nvmlGpuInstanceProfileInfo_v2_t *out, unsigned max)
{
    unsigned n = 0;
    /* The header's forward-compatible walk: every constant up to the first INVALID_ARGUMENT. */
    for (unsigned k = 0; k < 64 && n < max; k++) {
        out[n] = (nvmlGpuInstanceProfileInfo_v2_t){.version = nvmlGpuInstanceProfileInfo_v2};
        nvmlReturn_t rc = nvmlDeviceGetGpuInstanceProfileInfoV(d, k, &out[n]);
        if (rc == NVML_ERROR_INVALID_ARGUMENT)
            break;
        if (rc == NVML_SUCCESS)
            n++;
    }
    qsort(out, n, sizeof *out, profile_cmp);
    return n;
}

static int gi_cmp(const void *a, const void *b)
{
    const nvmlGpuInstanceInfo_t *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

unsigned smi_gpu_instances(nvmlDevice_t d, nvmlGpuInstance_t *out, nvmlGpuInstanceInfo_t *info, unsigned max)
{
    nvmlGpuInstanceProfileInfo_v2_t profiles[32];
    unsigned np = smi_gi_profiles(d, profiles, 32), n = 0;
    for (unsigned p = 0; p < np && n < max; p++) {
        unsigned count = max - n, first = n;
        if (nvmlDeviceGetGpuInstances(d, profiles[p].id, out + n, &count) != NVML_SUCCESS)
            continue;
        for (unsigned k = 0; k < count; k++)
            if (nvmlGpuInstanceGetInfo(out[first + k], &info[n]) == NVML_SUCCESS)
                out[n++] = out[first + k];
        /* Within a profile by instance ID; the handle goes with its info. */
        for (unsigned i = first + 1; i < n; i++)
            for (unsigned j = i; j > first && gi_cmp(&info[j - 1], &info[j]) > 0; j--) {
                nvmlGpuInstanceInfo_t ti = info[j];
                info[j] = info[j - 1];
                info[j - 1] = ti;
                nvmlGpuInstance_t th = out[j];
                out[j] = out[j - 1];
                out[j - 1] = th;
            }
    }
    return n;
}

int smi_mig_name_width(nvmlDevice_t d)
{
    nvmlGpuInstanceProfileInfo_v2_t profiles[32];
    unsigned np = smi_gi_profiles(d, profiles, 32);
    /* 18 on 580.159.04 (a real H200's -lgip is 81 columns, mig_lgip.txt; a public A100-40GB capture of the same
     * width), 16 on the earlier captures this layout was drawn from. */
    int w = smi_driver_at_least(580, 159, 4) ? 18 : 16;
    for (unsigned p = 0; p < np; p++)
        if ((int)strlen(profiles[p].name) > w)
            w = (int)strlen(profiles[p].name);
    return w;
}

void smi_row_init(smi_row *r, int width)
{
    if (width > (int)sizeof r->s - 1)
        width = (int)sizeof r->s - 1;
    r->width = width;
    memset(r->s, ' ', (size_t)width);
    r->s[0] = r->s[width - 1] = '|';
    r->s[width] = '\0';
}

static void place(smi_row *r, int col, const char *text)
{
    for (int i = 0; text[i] && col + i < r->width - 1; i++)
        if (col + i > 0)
            r->s[col + i] = text[i];
}

void smi_row_left(smi_row *r, int col, const char *fmt, ...)
{
    char t[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t, sizeof t, fmt, ap);
    va_end(ap);
    place(r, col, t);
}

void smi_row_right(smi_row *r, int end, const char *fmt, ...)
{
    char t[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t, sizeof t, fmt, ap);
    va_end(ap);
    place(r, end - (int)strlen(t), t);
}

void smi_row_print(const smi_row *r) { printf("%s\n", r->s); }

void smi_rule(int width, char fill)
{
    char s[224];
    if (width > (int)sizeof s - 1)
        width = (int)sizeof s - 1;
    memset(s, fill, (size_t)width);
    s[0] = s[width - 1] = fill == '=' ? '|' : '+';
    s[width] = '\0';
    printf("%s\n", s);
}

void smi_row_text(int width, const char *text)
{
    smi_row r;
    smi_row_init(&r, width);
    smi_row_left(&r, 2, "%s", text);
    smi_row_print(&r);
}

void smi_heading(int width, int shift, const char *title, const smi_cell *cells)
{
    smi_rule(width, '-');
    smi_row_text(width, title);
    for (const smi_cell *c = cells; c->col >= 0; c++) {
        smi_row r;
        smi_row_init(&r, width);
        for (; c->text; c++)
            smi_row_left(&r, c->col + (c->shifts ? shift : 0), "%s", c->text);
        smi_row_print(&r);
    }
    smi_rule(width, '=');
}

/* Does the board do MIG at all (MIG mode answers, on or off)? */
static int mig_capable(nvmlDevice_t d)
{
    unsigned current, pending;
    return nvmlDeviceGetMigMode(d, &current, &pending) == NVML_SUCCESS;
}

int smi_view_mig(const smi_gpus *g, const smi_mig_args *a)
{
    /* The GPU instance profiles and their placements are the board's, MIG mode on or off: a real H200 with MIG
     * disabled lists them with every instance free (mig_lgip.txt, mig_lgipp.txt). */
    int board_facts = a->op == SMI_MIG_LGIP || a->op == SMI_MIG_LGIPP;
    smi_gpus on = {0};
    for (unsigned k = 0; k < g->count; k++)
        if (board_facts ? mig_capable(g->dev[k]) : smi_mig_on(g->dev[k])) {
            on.dev[on.count] = g->dev[k];
            on.index[on.count++] = g->index[k];
        }
    if (!on.count) {
        printf("No MIG-enabled devices found.\n");
        /* 580 says so with status 0 (a real H200: mig -lgi, -lcip, -cgi 19); earlier drivers with 6. */
        return smi_driver_at_least(580, 0, 0) ? SMI_OK : SMI_EXIT_NOT_FOUND;
    }
    switch (a->op) {
    case SMI_MIG_LGI: return smi_mig_lgi(&on);
    case SMI_MIG_LCI: return smi_mig_lci(&on, a);
    case SMI_MIG_LGIP: return smi_mig_lgip(&on);
    case SMI_MIG_LGIPP: return smi_mig_lgipp(&on);
    case SMI_MIG_LCIP: return smi_mig_lcip(&on, a);
    case SMI_MIG_LCIPP:
        /* NVML has no compute instance placement query here to list. */
        printf("No compute instances found.\n");
        return SMI_EXIT_NOT_FOUND;
    default: return smi_mig_change(&on, a);
    }
}
