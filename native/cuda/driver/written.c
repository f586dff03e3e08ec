/* Which device memory a kernel may have written, and what happens when the program reads it back.
 *
 * Native mode does not run kernels, so bytes a kernel would have written hold whatever was there before, and a
 * program that reads them on the host (loss.item(), a stopping criterion, printing a tensor) decides on values no
 * GPU would give: its control flow silently diverges (a transformers generate() loop never sees its stop
 * condition). Host-known bytes are different: what the program copied in, set with a memset, or copied on the
 * device from host-known bytes is exactly what a GPU would hold. This file keeps that distinction per byte range
 * and applies FAKEGPU_ON_DEVICE_READ=warn|error|ignore at a device-to-host copy of kernel-written bytes.
 *
 * The account is a sorted list of disjoint ranges, each host-known (who NULL) or written by a named kernel;
 * memory in no range was never written and counts as host-known (a GPU gives garbage there too, not a computed
 * value). Caching allocators (PyTorch's) sub-allocate tensors from large segments, so ranges are kept inside
 * allocations, never per allocation. A kernel's parameters give pointers, not extents: a pointer p taints from p
 * up to the next range the account holds (the next tensor the program copied in or a kernel was given), at most
 * to the end of the allocation; kept ranges are never merged, so those boundaries survive. Every pointer a
 * kernel gets counts as written: parameters do not say which buffers a kernel only reads.
 *
 * Exit status of the error policy: FGD_EXIT_DEVICE_READ (86), the value fakegpu/launcher.py documents. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fgc_report.h"
#include "fgd_module.h"

#define FGD_EXIT_DEVICE_READ 86
#define MAX_WRITERS 256 /* distinct kernels counted per process; later ones count under the total only */
#define REPORT_WRITERS 20

/* A skip list of disjoint ranges sorted by address: a program's stale tensor boundaries accumulate in the
 * account (a caching allocator never tells which blocks it freed), so updates must not cost a shift of all of it. */
#define LEVELS 16

typedef struct range {
    uintptr_t lo, hi;
    const char *who; /* the kernel's name (lives as long as the process), NULL: host-known */
    int levels;
    struct range *next[]; /* levels of them */
} range;

static _Alignas(range) unsigned char head_bytes[sizeof(range) + LEVELS * sizeof(range *)]; /* the list's head */
#define HEAD ((range *)head_bytes)
static size_t nranges;
static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* The account of reads, under lock. */
static unsigned long long reads, read_bytes, unknown_launches, carried_out;
static struct {
    const char *name;
    unsigned long long reads;
} writers[MAX_WRITERS];
static size_t nwriters;
static struct {
    const char *api, *kernel;
    unsigned long long bytes;
} first;

enum { POLICY_WARN, POLICY_ERROR, POLICY_IGNORE };
static const char *const policy_names[] = {"warn", "error", "ignore"};
static int policy = -1;

static int read_policy(void)
{
    if (policy >= 0)
        return policy;
    const char *v = getenv("FAKEGPU_ON_DEVICE_READ");
    int p = POLICY_WARN;
    if (v && *v) {
        for (p = 0; p < 3 && strcmp(v, policy_names[p]) != 0; p++)
            ;
        if (p == 3) {
            fg_warn("FAKEGPU_ON_DEVICE_READ=%.40s is none of warn, error, ignore: warning", v);
            p = POLICY_WARN;
        }
    }
    return policy = p;
}

/* ---- the skip list (caller holds lock) ---- */

static int random_levels(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; /* xorshift64 */
    int n = 1;
    for (uint64_t r = rng; n < LEVELS && (r & 3) == 0; r >>= 2)
        n++; /* a quarter of the nodes one level higher */
    return n;
}

/* Fill before[l] with the last node at level l that ends at or before p (HEAD if none); returns the first range
 * that ends after p, or NULL. */
static range *seek_end(uintptr_t p, range **before)
{
    range *x = HEAD;
    for (int l = LEVELS - 1; l >= 0; l--) {
        while (x->next[l] && x->next[l]->hi <= p)
            x = x->next[l];
        before[l] = x;
    }
    return x->next[0];
}

static range *link_after(range **before, uintptr_t lo, uintptr_t hi, const char *who)
{
    int n = random_levels();
    range *r = malloc(sizeof *r + (size_t)n * sizeof r->next[0]);
    if (!r)
        return NULL; /* out of memory: this range stays unknown, i.e. host-known */
    r->lo = lo, r->hi = hi, r->who = who, r->levels = n;
    for (int l = 0; l < n; l++) {
        r->next[l] = before[l]->next[l];
        before[l]->next[l] = r;
        before[l] = r;
    }
    nranges++;
    return r;
}

/* Make [lo, hi) one range of `who` (put 1), or no range (put 0), trimming what it overlaps; before and x are
 * what seek_end(lo) found. */
static void replace_at(range **before, range *x, uintptr_t lo, uintptr_t hi, const char *who, int put)
{
    if (lo >= hi)
        return;
    if (x && x->lo == lo && x->hi == hi) { /* the steady state of a loop: the same range again */
        if (put) {
            x->who = who;
            return;
        }
    } else if (x && x->lo < lo) { /* x starts before lo: keep its head */
        if (x->hi > hi) {          /* and its tail: [lo, hi) lies inside x */
            uintptr_t tail = x->hi;
            x->hi = lo;
            for (int l = 0; l < x->levels; l++)
                before[l] = x;
            if (put)
                link_after(before, lo, hi, who);
            link_after(before, hi, tail, x->who);
            return;
        }
        x->hi = lo;
        for (int l = 0; l < x->levels; l++)
            before[l] = x;
    }
    range *y;
    while ((y = before[0]->next[0]) != NULL && y->hi <= hi) { /* wholly covered: unlinked */
        for (int l = 0; l < y->levels; l++)
            before[l]->next[l] = y->next[l];
        free(y);
        nranges--;
    }
    if (y && y->lo < hi)
        y->lo = hi; /* keep its tail */
    if (put)
        link_after(before, lo, hi, who);
}

static void replace(uintptr_t lo, uintptr_t hi, const char *who, int put)
{
    range *before[LEVELS];
    range *x = seek_end(lo, before);
    replace_at(before, x, lo, hi, who, put);
}

/* ---- what changes the account ---- */

void fgd_written_kernel(const uintptr_t *p, const uintptr_t *end, size_t n, const char *kernel)
{
    pthread_mutex_lock(&lock);
    for (size_t k = 0; k < n; k++) {
        if (!end[k] || p[k] >= end[k])
            continue;
        range *before[LEVELS];
        range *x = seek_end(p[k], before);
        const range *next = x && x->lo <= p[k] ? x->next[0] : x; /* the first range that starts after p */
        replace_at(before, x, p[k], next && next->lo < end[k] ? next->lo : end[k], kernel, 1);
    }
    pthread_mutex_unlock(&lock);
}

void fgd_written_host(uintptr_t p, size_t n)
{
    pthread_mutex_lock(&lock);
    replace(p, p + n, NULL, 1);
    pthread_mutex_unlock(&lock);
}

void fgd_written_drop(uintptr_t base, size_t n)
{
    pthread_mutex_lock(&lock);
    if (nranges)
        replace(base, base + (n ? n : 1), NULL, 0);
    pthread_mutex_unlock(&lock);
}

typedef struct {
    uintptr_t lo, hi;
    const char *who;
} piece;

void fgd_written_copy(uintptr_t dst, uintptr_t src, size_t n)
{
    piece local[32], *written = local;
    size_t nw = 0, capw = sizeof local / sizeof local[0];
    range *before[LEVELS];
    pthread_mutex_lock(&lock);
    for (const range *r = seek_end(src, before); r && r->lo < src + n; r = r->next[0]) {
        if (!r->who)
            continue;
        if (nw == capw) {
            piece *grown = malloc(capw * 2 * sizeof *grown);
            if (!grown)
                break;
            memcpy(grown, written, nw * sizeof *grown);
            if (written != local)
                free(written);
            written = grown;
            capw *= 2;
        }
        uintptr_t lo = r->lo > src ? r->lo : src, hi = r->hi < src + n ? r->hi : src + n;
        written[nw++] = (piece){lo - src + dst, hi - src + dst, r->who};
    }
    replace(dst, dst + n, NULL, 1); /* host-known where the source was */
    for (size_t i = 0; i < nw; i++)
        replace(written[i].lo, written[i].hi, written[i].who, 1);
    pthread_mutex_unlock(&lock);
    if (written != local)
        free(written);
}

void fgd_written_unknown(int device, const char *kernel)
{
    uintptr_t *base;
    size_t *size;
    size_t n = fgd_device_allocations(device, &base, &size);
    pthread_mutex_lock(&lock);
    unknown_launches++;
    for (size_t i = 0; i < n; i++)
        replace(base[i], base[i] + size[i], kernel, 1);
    pthread_mutex_unlock(&lock);
    free(base);
    free(size);
}

void fgd_written_carried_out(void)
{
    pthread_mutex_lock(&lock);
    carried_out++;
    pthread_mutex_unlock(&lock);
}

/* ---- reads ---- */

/* A kernel name as a person reads it: demangled when libstdc++ is in the process, without its parameter list,
 * cut to `len`. */
static void pretty(const char *name, char *out, size_t len)
{
    typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);
    void *cxx = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD); /* loaded by the program, never by us */
    demangle_fn demangle = cxx ? (demangle_fn)dlsym(cxx, "__cxa_demangle") : NULL;
    int status = -1;
    char *d = demangle && name[0] == '_' && name[1] == 'Z' ? demangle(name, NULL, NULL, &status) : NULL;
    const char *s = d && status == 0 ? d : name;
    if (strncmp(s, "void ", 5) == 0)
        s += 5;
    size_t n = strlen(s);
    if (d && n && s[n - 1] == ')') { /* drop "(int, at::native::...)" */
        int depth = 0;
        for (size_t i = n; i-- > 0;) {
            depth += s[i] == ')' ? 1 : s[i] == '(' ? -1 : 0;
            if (!depth) {
                n = i;
                break;
            }
        }
    }
    if (n >= len)
        snprintf(out, len, "%.*s...", (int)(len - 4), s);
    else
        snprintf(out, len, "%.*s", (int)n, s);
    free(d);
    if (cxx)
        dlclose(cxx);
}

static void tell(const char *api, unsigned long long bytes, const char *kernel, int p)
{
    char who[200], msg[2048];
    pretty(kernel, who, sizeof who);
    int n = snprintf(
        msg, sizeof msg,
        "fakegpu: the program read device memory that a kernel may have written: %llu byte%s through %s, last "
        "written by %s\n"
        "fakegpu:   native mode does not run kernels, so these values are not what a GPU computes, and control flow "
        "that depends on them (a loop's stop condition, early stopping, .item(), printing a tensor) will differ "
        "from a real run\n",
        bytes, bytes == 1 ? "" : "s", api, who);
    if (p == POLICY_ERROR)
        snprintf(msg + n, sizeof msg - n,
                 "fakegpu:   stopping here (--on-device-read error, FAKEGPU_ON_DEVICE_READ=error): exit status %d; "
                 "`fakegpu run --mode fakecuda` runs the math on the CPU for real values\n",
                 FGD_EXIT_DEVICE_READ);
    else
        snprintf(msg + n, sizeof msg - n,
                 "fakegpu:   `fakegpu run --mode fakecuda` runs the math on the CPU for real values; "
                 "`--on-device-read error` stops at the first such read, `--on-device-read ignore` silences this "
                 "warning; every such read is counted in the process report (--report-dir)\n");
    fputs(msg, stderr);
    fflush(stderr);
}

void fgd_written_read(uintptr_t src, size_t n, const char *api)
{
    if (!n)
        return;
    range *before[LEVELS];
    pthread_mutex_lock(&lock);
    unsigned long long tainted = 0;
    const char *last = NULL;
    for (const range *r = seek_end(src, before); r && r->lo < src + n; r = r->next[0]) {
        if (!r->who)
            continue;
        uintptr_t lo = r->lo > src ? r->lo : src, hi = r->hi < src + n ? r->hi : src + n;
        tainted += hi - lo;
        if (r->who != last) {
            last = r->who;
            size_t w = 0;
            while (w < nwriters && writers[w].name != last)
                w++;
            if (w == nwriters && nwriters < MAX_WRITERS)
                writers[nwriters++].name = last;
            if (w < MAX_WRITERS)
                writers[w].reads++;
        }
    }
    int tell_now = 0;
    if (tainted) {
        tell_now = reads++ == 0;
        read_bytes += tainted;
        if (tell_now)
            first.api = api, first.kernel = last, first.bytes = n;
    }
    pthread_mutex_unlock(&lock);
    if (!tell_now)
        return;
    int p = read_policy();
    if (p != POLICY_IGNORE)
        tell(api, n, last, p);
    if (p == POLICY_ERROR)
        exit(FGD_EXIT_DEVICE_READ); /* exit, not _exit: the process report is written with the read in it */
}

/* ---- the report ---- */

static int by_reads(const void *a, const void *b)
{
    unsigned long long x = ((const __typeof__(writers[0]) *)a)->reads, y = ((const __typeof__(writers[0]) *)b)->reads;
    return x < y ? 1 : x > y ? -1 : 0;
}

void fgd_written_report(FILE *f)
{
    pthread_mutex_lock(&lock);
    qsort(writers, nwriters, sizeof writers[0], by_reads);
    fprintf(f, "{\"policy\": \"%s\", \"reads\": %llu, \"bytes\": %llu, \"unknown_parameter_launches\": %llu, "
               "\"carried_out_launches\": %llu, \"first\": ",
            policy_names[read_policy()], reads, read_bytes, unknown_launches, carried_out);
    if (first.api) {
        fputs("{\"api\": ", f);
        fgc_json_string(f, first.api);
        fprintf(f, ", \"bytes\": %llu, \"kernel\": ", first.bytes);
        fgc_json_string(f, first.kernel);
        fputs("}", f);
    } else {
        fputs("null", f);
    }
    fputs(", \"kernels\": [", f);
    for (size_t i = 0; i < nwriters && i < REPORT_WRITERS; i++) {
        fputs(i ? ", {\"name\": " : "{\"name\": ", f);
        fgc_json_string(f, writers[i].name);
        fprintf(f, ", \"reads\": %llu}", writers[i].reads);
    }
    fputs("]}", f);
    fg_debug("libcuda: the account of written memory holds %zu ranges", nranges);
    pthread_mutex_unlock(&lock);
}

/* A forked child is another process: its own reads, its own first warning. The ranges stay: its memory is a copy
 * of its parent's. */
static void after_fork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    reads = read_bytes = unknown_launches = carried_out = 0;
    nwriters = 0;
    memset(&first, 0, sizeof first);
}

__attribute__((constructor)) static void install_fork_handler(void) { pthread_atfork(NULL, NULL, after_fork_child); }
