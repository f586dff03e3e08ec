#include "fgc_unsup.h"

#include "fgc_report.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { POLICY_UNSET = -1, POLICY_ALLOW = 0, POLICY_WARN = 1, POLICY_ERROR = 2 };

static atomic_int policy = POLICY_UNSET;

int fgc_policy(void)
{
    int p = atomic_load_explicit(&policy, memory_order_relaxed);
    if (p != POLICY_UNSET)
        return p;
    const char *v = getenv("FAKEGPU_UNSUPPORTED_API");
    if (!v || !*v)
        v = getenv("FAKEGPU_UNSUPPORTED");
    const char *strict = getenv("FAKEGPU_STRICT");
    p = POLICY_ALLOW;
    if ((strict && *strict && strcmp(strict, "0") != 0) || (v && strcmp(v, "error") == 0))
        p = POLICY_ERROR;
    else if ((v && strcmp(v, "warn") == 0) || fg_debug_enabled())
        p = POLICY_WARN;
    atomic_store(&policy, p);
    return p;
}

/* Sets that were hit, for the exit report; each library has its own copy of this file, so its own list. */
static fgc_stubset *hit_sets[8];
static atomic_uint nhit_sets;
static pthread_mutex_t sets_lock = PTHREAD_MUTEX_INITIALIZER;

/* Refusals of hand-written functions: a small fixed table keyed by the literal's address. */
#define FGC_MAX_REFUSALS 128
static struct {
    const char *lib, *what;
    atomic_uint hits;
} refusals[FGC_MAX_REFUSALS];
static unsigned nrefusals;

static void note_set(fgc_stubset *set)
{
    pthread_mutex_lock(&sets_lock);
    unsigned n = atomic_load(&nhit_sets);
    int known = 0;
    for (unsigned i = 0; i < n; i++)
        known |= hit_sets[i] == set;
    if (!known && n < sizeof hit_sets / sizeof hit_sets[0]) {
        hit_sets[n] = set;
        atomic_store(&nhit_sets, n + 1);
    }
    pthread_mutex_unlock(&sets_lock);
}

static void apply(const char *lib, const char *name, unsigned before, long status)
{
    int p = fgc_policy();
    if (p == POLICY_ERROR) {
        fg_warn("%s is not supported by FakeGPU's %s (FAKEGPU_UNSUPPORTED_API=error): aborting", name, lib);
        abort();
    }
    if (p == POLICY_WARN && before == 0)
        fg_warn("%s is not supported by FakeGPU's %s: returning %ld", name, lib, status);
}

long fgc_unsupported(fgc_stubset *set, unsigned index, long status)
{
    if (index >= set->count || index >= FGC_MAX_STUBS)
        return status;
    unsigned before = atomic_fetch_add_explicit(&set->hits[index], 1, memory_order_relaxed);
    if (before == 0)
        note_set(set);
    apply(set->lib, set->names[index], before, status);
    return status;
}

long fgc_refuse(const char *lib, const char *what, long status)
{
    unsigned before = 1;
    pthread_mutex_lock(&sets_lock);
    unsigned i;
    for (i = 0; i < nrefusals; i++)
        if (refusals[i].what == what || strcmp(refusals[i].what, what) == 0)
            break;
    if (i == nrefusals && nrefusals < FGC_MAX_REFUSALS) {
        refusals[i].lib = lib;
        refusals[i].what = what;
        nrefusals++;
    }
    if (i < FGC_MAX_REFUSALS)
        before = atomic_fetch_add(&refusals[i].hits, 1);
    pthread_mutex_unlock(&sets_lock);
    apply(lib, what, before, status);
    return status;
}

/* The library's part of the process report (fgc_report.h): which unsupported calls were made, how often. */
void fgc_unsup_write_part(void)
{
    unsigned nsets = atomic_load(&nhit_sets);
    if (nsets == 0 && nrefusals == 0)
        return;
    const char *lib = nsets ? hit_sets[0]->lib : refusals[0].lib;
    char name[128];
    snprintf(name, sizeof name, "unsupported-%s", lib);
    FILE *f = fgc_part_open(name);
    if (!f)
        return;
    fputc('{', f);
    const char *sep = "";
    for (unsigned s = 0; s < nsets; s++)
        for (unsigned i = 0; i < hit_sets[s]->count; i++) {
            unsigned n = atomic_load(&hit_sets[s]->hits[i]);
            if (n) {
                fputs(sep, f);
                fgc_json_string(f, hit_sets[s]->names[i]);
                fprintf(f, ": %u", n);
                sep = ", ";
            }
        }
    for (unsigned i = 0; i < nrefusals; i++) {
        fputs(sep, f);
        fgc_json_string(f, refusals[i].what);
        fprintf(f, ": %u", atomic_load(&refusals[i].hits));
        sep = ", ";
    }
    fputc('}', f);
    fgc_part_close(f, name);
}
