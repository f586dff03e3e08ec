/* The report's kernels section. Each runtime (libcudart.so.12, libcudart.so.13) writes its own part,
 * kernels-<CUDA major> (runtime/launch.c); one process can use both (torch 2.10 on libcudart.so.12 with a library
 * linked against .13), so the parts' counts are summed and their top lists merged, most launched first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgd.h"

enum { REGISTERED, LAUNCHED_KERNELS, LAUNCHES, CAPTURED, UNREGISTERED, NCOUNTS };

typedef struct {
    char *name; /* the JSON string as the part wrote it, quotes and escapes included */
    unsigned long long launches;
} top_entry;

typedef struct {
    unsigned long long counts[NCOUNTS];
    top_entry *top;
    size_t n, cap;
    int parts;
} merged;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *grown = realloc(buf, cap *= 2);
            if (!grown)
                free(buf);
            buf = grown;
        }
    }
    fclose(f);
    if (buf)
        buf[n] = 0;
    return buf;
}

/* Add one part (the format runtime/launch.c writes) to m; a part in another shape is skipped. */
static void add_part(merged *m, const char *text)
{
    unsigned long long c[NCOUNTS];
    int at = -1;
    sscanf(text,
           "{\"registered\": %llu, \"launched_kernels\": %llu, \"launches\": %llu, \"captured_launches\": %llu, "
           "\"unregistered_launches\": %llu, \"top\": [%n",
           &c[REGISTERED], &c[LAUNCHED_KERNELS], &c[LAUNCHES], &c[CAPTURED], &c[UNREGISTERED], &at);
    if (at < 0)
        return;
    for (int i = 0; i < NCOUNTS; i++)
        m->counts[i] += c[i];
    m->parts++;
    const char *p = text + at;
    static const char key[] = "{\"name\": \"";
    while ((p = strstr(p, key)) != NULL) {
        const char *start = p + sizeof key - 2, *q = start + 1; /* at the opening quote */
        while (*q && *q != '"')
            q += *q == '\\' && q[1] ? 2 : 1;
        if (!*q)
            return;
        unsigned long long launches = 0;
        int used = -1;
        sscanf(q + 1, ", \"launches\": %llu}%n", &launches, &used);
        if (used < 0)
            return;
        if (m->n == m->cap) {
            size_t cap = m->cap ? m->cap * 2 : 64;
            top_entry *grown = realloc(m->top, cap * sizeof *grown);
            if (!grown)
                return;
            m->top = grown, m->cap = cap;
        }
        m->top[m->n].name = strndup(start, (size_t)(q + 1 - start));
        m->top[m->n++].launches = launches;
        p = q + 1 + used;
    }
}

static int by_launches(const void *a, const void *b)
{
    unsigned long long x = ((const top_entry *)a)->launches, y = ((const top_entry *)b)->launches;
    return x < y ? 1 : x > y ? -1 : 0;
}

FG_HIDDEN void fgd_kernels_report(FILE *f, const char *dir);
void fgd_kernels_report(FILE *f, const char *dir)
{
    merged m = {0};
    for (int major = 12; major <= 13; major++) {
        char path[1400];
        snprintf(path, sizeof path, "%s/kernels-%d.json", dir, major);
        char *text = slurp(path);
        if (text)
            add_part(&m, text);
        free(text);
    }
    qsort(m.top, m.n, sizeof *m.top, by_launches);
    const char *top_env = getenv("FAKEGPU_REPORT_TOP_KERNELS");
    size_t top = top_env && *top_env ? (size_t)atol(top_env) : 50;
    fprintf(f,
            "{\"registered\": %llu, \"launched_kernels\": %llu, \"launches\": %llu, \"captured_launches\": %llu, "
            "\"unregistered_launches\": %llu, \"top\": [",
            m.counts[REGISTERED], m.counts[LAUNCHED_KERNELS], m.counts[LAUNCHES], m.counts[CAPTURED],
            m.counts[UNREGISTERED]);
    for (size_t i = 0; i < m.n; i++) {
        if (i < top && m.top[i].name)
            fprintf(f, "%s{\"name\": %s, \"launches\": %llu}", i ? ", " : "", m.top[i].name, m.top[i].launches);
        free(m.top[i].name);
    }
    fputs("]}", f);
    free(m.top);
}
