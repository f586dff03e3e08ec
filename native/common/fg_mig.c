#include "fg_mig.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fg_sha256.h"

int fg_mig_parse_profile(const char *value, fg_mig_profile *out)
{
    memset(out, 0, sizeof *out);
    char buf[256];
    if (fg_strlcpy(buf, value, sizeof buf))
        return -1;
    char *save = NULL;
    char *cell = strtok_r(buf, ",", &save);
    if (!cell || fg_strlcpy(out->name, cell, sizeof out->name))
        return -1;
    unsigned *nums[] = {&out->id,       &out->nvml_profile, &out->compute_slices, &out->instances,
                        &out->memory_mib, &out->sm_count,   &out->copy_engines,   &out->decoders,
                        &out->encoders, &out->jpeg,         &out->ofa,            &out->p2p,
                        &out->size};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        cell = strtok_r(NULL, ",", &save);
        char *end = NULL;
        if (!cell || !isdigit((unsigned char)cell[0]))
            return -1;
        unsigned long v = strtoul(cell, &end, 10);
        if (*end || v > 1000000ul)
            return -1;
        *nums[i] = (unsigned)v;
    }
    cell = strtok_r(NULL, ",", &save);
    if (!cell || strtok_r(NULL, ",", &save))
        return -1;
    char *s2 = NULL;
    for (char *s = strtok_r(cell, "/", &s2); s; s = strtok_r(NULL, "/", &s2)) {
        char *end = NULL;
        unsigned long v = strtoul(s, &end, 10);
        if (*end || !isdigit((unsigned char)s[0]) || v >= FG_MIG_MAX_SLICES || out->nstarts >= FG_MIG_MAX_SLICES)
            return -1;
        out->starts[out->nstarts++] = (unsigned)v;
    }
    if (!out->nstarts || !out->size || out->size > FG_MIG_MAX_SLICES || !out->compute_slices)
        return -1;
    return 0;
}

unsigned fg_mig_gi_id(const fg_mig_board *b, unsigned start, unsigned size)
{
    return b->memory_slices / size - 1 + start / size;
}

void fg_mig_device_name(const char *board_name, const fg_mig_profile *p, char *buf, size_t len)
{
    snprintf(buf, len, "%s MIG %s", board_name, p->name);
}

void fg_mig_uuid(const char *parent_uuid, unsigned gi_id, unsigned ci_id, char *buf, size_t len)
{
    char msg[128];
    int n = snprintf(msg, sizeof msg, "fakegpu-mig:%s:%u:%u", parent_uuid, gi_id, ci_id);
    if (n < 0 || (size_t)n >= sizeof msg)
        n = (int)strlen(msg);
    uint8_t h[32];
    fg_sha256(msg, (size_t)n, h);
    fg_uuid_text(FG_MIG_UUID_PREFIX, h, buf, len);
}

static char *trim(char *s)
{
    while (*s && isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* MigBoard.find: a profile name (case ignored, an optional leading "MIG ") or its -lgip ID. */
static int find(const fg_mig_board *b, const char *text)
{
    char key[64];
    fg_strlcpy(key, text, sizeof key);
    char *k = trim(key);
    for (char *c = k; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    if (!strncmp(k, "mig ", 4))
        k = trim(k + 4);
    for (unsigned i = 0; i < b->nprofiles; i++) {
        char id[16];
        snprintf(id, sizeof id, "%u", b->profiles[i].id);
        if (!strcmp(b->profiles[i].name, k) || !strcmp(id, k))
            return (int)i;
    }
    return -1;
}

typedef struct {
    unsigned n, profile[FG_MIG_MAX_INSTANCES], start[FG_MIG_MAX_INSTANCES];
    int pin[FG_MIG_MAX_INSTANCES];
} plan;

/* place() of mig.py: depth first, in layout order, each profile's starts in catalog order. */
static int search(const fg_mig_board *b, plan *p, unsigned i, unsigned compute, int *used)
{
    if (i == p->n)
        return 1;
    const fg_mig_profile *m = &b->profiles[p->profile[i]];
    if (compute + m->compute_slices > b->compute_slices)
        return 0;
    for (unsigned k = 0; k < m->nstarts; k++) {
        unsigned s = m->starts[k];
        if (p->pin[i] >= 0 && (unsigned)p->pin[i] != s)
            continue;
        if (s + m->size > b->memory_slices)
            continue;
        int busy = 0;
        for (unsigned j = s; j < s + m->size; j++)
            busy |= used[j];
        if (busy)
            continue;
        for (unsigned j = s; j < s + m->size; j++)
            used[j] = 1;
        p->start[i] = s;
        if (search(b, p, i + 1, compute + m->compute_slices, used))
            return 1;
        for (unsigned j = s; j < s + m->size; j++)
            used[j] = 0;
    }
    return 0;
}

unsigned fg_mig_remaining(const fg_mig_board *b, const fg_mig_instance *placed, unsigned n, unsigned profile)
{
    if (profile >= b->nprofiles || n > FG_MIG_MAX_INSTANCES || b->memory_slices > FG_MIG_MAX_SLICES)
        return 0;
    unsigned have = 0;
    for (unsigned i = 0; i < n; i++)
        have += placed[i].profile == profile;
    unsigned more = 0;
    while (have + more < b->profiles[profile].instances && n + more < FG_MIG_MAX_INSTANCES) {
        plan p = {.n = n + more + 1};
        for (unsigned i = 0; i < p.n; i++) {
            p.profile[i] = i < n ? placed[i].profile : profile;
            p.pin[i] = i < n ? (int)placed[i].start : -1;
        }
        int used[FG_MIG_MAX_SLICES] = {0};
        if (!search(b, &p, 0, 0, used))
            break;
        more++;
    }
    return more;
}

static int is_suffix(const char *s) { return !strcmp(s, "me") || !strcmp(s, "gfx") || !strcmp(s, "me.all"); }

int fg_mig_layout(const fg_mig_board *b, const char *board_name, const char *layout, const char *parent_uuid,
                  fg_mig_instance *out, unsigned *count, char *err, size_t errlen)
{
    *count = 0;
    char buf[1024];
    if (fg_strlcpy(buf, layout, sizeof buf)) {
        fg_seterr(err, errlen, "the MIG layout is too long");
        return -1;
    }
    if (!*trim(buf)) {
        fg_seterr(err, errlen, "the MIG layout is empty (%s)", board_name);
        return -1;
    }
    /* Split on '+', joining a suffix ("1g.10gb" "+" "me") back to the item before it. */
    char items[FG_MIG_MAX_INSTANCES * 2][96];
    unsigned nitems = 0;
    char *save = NULL;
    for (char *raw = strtok_r(buf, "+", &save); raw; raw = strtok_r(NULL, "+", &save)) {
        char *item = trim(raw);
        char suffix[32];
        fg_strlcpy(suffix, item, sizeof suffix);
        suffix[strcspn(suffix, "@*")] = '\0';
        char *sfx = trim(suffix);
        if (nitems && is_suffix(sfx)) {
            char joined[128];
            snprintf(joined, sizeof joined, "%s+%s", items[nitems - 1], sfx);
            if (find(b, joined) >= 0) {
                snprintf(joined, sizeof joined, "%s+%s", items[nitems - 1], item);
                fg_strlcpy(items[nitems - 1], joined, sizeof items[0]);
                continue;
            }
        }
        if (nitems == sizeof items / sizeof items[0]) {
            fg_seterr(err, errlen, "the MIG layout names more than %d instances", FG_MIG_MAX_INSTANCES);
            return -1;
        }
        fg_strlcpy(items[nitems++], item, sizeof items[0]);
    }
    plan p = {0};
    for (unsigned i = 0; i < nitems; i++) {
        char item[96];
        fg_strlcpy(item, items[i], sizeof item);
        unsigned n = 1;
        char *star = strchr(item, '*');
        if (star) {
            *star = '\0';
            char *c = trim(star + 1);
            if (!*c || strspn(c, "0123456789") != strlen(c) || strlen(c) > 1 || c[0] < '1' || c[0] > '8') {
                fg_seterr(err, errlen, "'%s': the count after '*' must be 1..8", items[i]);
                return -1;
            }
            n = (unsigned)(c[0] - '0');
        }
        int pin = -1;
        char *at = strchr(item, '@');
        if (at) {
            *at = '\0';
            char *c = trim(at + 1);
            if (!*c || strspn(c, "0123456789") != strlen(c) || strlen(c) > 1) {
                fg_seterr(err, errlen, "'%s': the start after '@' is not a memory slice", items[i]);
                return -1;
            }
            pin = c[0] - '0';
        }
        int prof = find(b, item);
        if (prof < 0) {
            fg_seterr(err, errlen, "'%s' is no MIG profile of %s", trim(item), board_name);
            return -1;
        }
        if (pin >= 0) {
            const fg_mig_profile *m = &b->profiles[prof];
            int ok = 0;
            for (unsigned k = 0; k < m->nstarts; k++)
                ok |= m->starts[k] == (unsigned)pin;
            if (!ok || n > 1) {
                fg_seterr(err, errlen, "'%s': %s cannot start at memory slice %d", items[i], m->name, pin);
                return -1;
            }
        }
        for (unsigned k = 0; k < n; k++) {
            if (p.n == FG_MIG_MAX_INSTANCES) {
                fg_seterr(err, errlen, "the MIG layout names more than %d instances", FG_MIG_MAX_INSTANCES);
                return -1;
            }
            p.profile[p.n] = (unsigned)prof;
            p.pin[p.n++] = pin;
        }
    }
    for (unsigned k = 0; k < b->nprofiles; k++) {
        unsigned n = 0;
        for (unsigned i = 0; i < p.n; i++)
            n += p.profile[i] == k;
        if (n > b->profiles[k].instances) {
            fg_seterr(err, errlen, "%u x %s asked; %s holds at most %u", n, b->profiles[k].name, board_name,
                      b->profiles[k].instances);
            return -1;
        }
    }
    int used[FG_MIG_MAX_SLICES] = {0};
    if (b->memory_slices > FG_MIG_MAX_SLICES || !search(b, &p, 0, 0, used)) {
        fg_seterr(err, errlen, "the MIG layout '%s' does not fit %s", layout, board_name);
        return -1;
    }
    for (unsigned i = 0; i < p.n; i++) {
        fg_mig_instance *m = &out[i];
        memset(m, 0, sizeof *m);
        m->profile = p.profile[i];
        m->start = p.start[i];
        m->gi_id = fg_mig_gi_id(b, m->start, b->profiles[m->profile].size);
    }
    /* NVML numbers MIG devices by GPU instance ID (instances() in mig.py); IDs are unique in a placement. */
    for (unsigned i = 1; i < p.n; i++)
        for (unsigned j = i; j > 0 && out[j - 1].gi_id > out[j].gi_id; j--) {
            fg_mig_instance t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    for (unsigned i = 0; i < p.n; i++) {
        out[i].index = i;
        fg_mig_uuid(parent_uuid, out[i].gi_id, 0, out[i].uuid, sizeof out[i].uuid);
    }
    *count = p.n;
    return 0;
}
