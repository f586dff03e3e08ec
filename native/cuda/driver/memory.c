/* Device memory. Each allocation is its own anonymous mapping made with MAP_NORESERVE: the address space is
 * reserved, and host memory is spent only on pages the program writes (a memcpy to the device), so a simulated
 * 8x80 GB node fits on a small host. Capacity is enforced per device: an allocation that would take the
 * device past its CUDA total, less the context's footprint, fails with CUDA_ERROR_OUT_OF_MEMORY exactly as a
 * real board does. Device pointers are host addresses, so copies and memsets are plain memcpy/memset.
 *
 * In accounting mode (FAKEGPU_MEMORY=accounting, common/fgc_env.h) writes to device memory are dropped and
 * device memory reads as zeros: its pages are never touched, so a 16 GB model "on the GPU" costs no host RAM.
 *
 * The table of allocations here is the one every pointer lookup consults: it also holds the ranges mapped with
 * the virtual memory management API (driver/vmm.c) and allocations from stream-ordered pools (driver/pool.c),
 * whose capacity is charged by their handle or pool through fgd_charge.
 *
 * Copies and fills also keep the account of what device memory holds (driver/written.c): host-known bytes, or bytes
 * a kernel may have written, whose host read is what native mode cannot give as a GPU would. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fg_faults.h" /* allocation-triggered faults */
#include "fgc_env.h"
#include "fgd_module.h"
#include "fgd_timeline.h"

/* The driver hands out whole 2 MiB pages for device allocations on current boards; what a device "uses"
 * (cuMemGetInfo, nvidia-smi) counts pages, not requested bytes. */
#define FGD_PAGE (2ULL << 20)
/* Small requests share pages, 512 bytes apiece (sub-allocation, below). */
#define FGD_SMALL_UNIT 512ULL
#define FGD_SMALL_UNITS (FGD_PAGE / FGD_SMALL_UNIT)

/* Sorted by base, so an interior pointer (cuPointerGetAttribute, cuMemGetAddressRange) is a binary search. */
static fgd_alloc *allocs;
static size_t nallocs, cap_allocs;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Lowest and highest address device memory ever covered: a launch's parameter words outside are no pointers of
 * ours, which spares the table lookup for most scalars. Never shrinks. */
static _Atomic uintptr_t span_lo = UINTPTR_MAX, span_hi;

static size_t find_floor(uintptr_t p) /* index of the last alloc with base <= p, or nallocs */
{
    size_t lo = 0, hi = nallocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (allocs[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == 0 ? nallocs : lo - 1;
}

static int insert(const fgd_alloc *a)
{
    if (nallocs == cap_allocs) {
        size_t n = cap_allocs ? cap_allocs * 2 : 1024;
        fgd_alloc *grown = realloc(allocs, n * sizeof *grown);
        if (!grown)
            return -1;
        allocs = grown;
        cap_allocs = n;
    }
    size_t lo = 0, hi = nallocs; /* first index whose base is above the new one */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (allocs[mid].base <= a->base)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t at = lo;
    memmove(&allocs[at + 1], &allocs[at], (nallocs - at) * sizeof *allocs);
    allocs[at] = *a;
    nallocs++;
    return 0;
}

int fgd_lookup(const void *p, fgd_alloc *out)
{
    pthread_mutex_lock(&lock);
    size_t i = nallocs ? find_floor((uintptr_t)p) : nallocs;
    int hit = i < nallocs && (uintptr_t)p < allocs[i].base + (allocs[i].size ? allocs[i].size : 1);
    if (hit && out)
        *out = allocs[i];
    pthread_mutex_unlock(&lock);
    return hit;
}

int fgd_table_add(const fgd_alloc *a)
{
    pthread_mutex_lock(&lock);
    int rc = insert(a);
    if (rc == 0 && a->kind != FGD_HOST) {
        if (a->base < atomic_load_explicit(&span_lo, memory_order_relaxed))
            atomic_store_explicit(&span_lo, a->base, memory_order_relaxed);
        if (a->base + a->size > atomic_load_explicit(&span_hi, memory_order_relaxed))
            atomic_store_explicit(&span_hi, a->base + a->size, memory_order_relaxed);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int fgd_device_span(uintptr_t *lo, uintptr_t *hi)
{
    *lo = atomic_load_explicit(&span_lo, memory_order_relaxed);
    *hi = atomic_load_explicit(&span_hi, memory_order_relaxed);
    return *lo < *hi;
}

int fgd_table_take(uintptr_t base, int kind, fgd_alloc *out)
{
    pthread_mutex_lock(&lock);
    size_t i = nallocs ? find_floor(base) : nallocs;
    if (i == nallocs || allocs[i].base != base || allocs[i].kind != kind) {
        pthread_mutex_unlock(&lock);
        return -1;
    }
    fgd_alloc a = allocs[i];
    if (out)
        *out = a;
    memmove(&allocs[i], &allocs[i + 1], (nallocs - i - 1) * sizeof *allocs);
    nallocs--;
    pthread_mutex_unlock(&lock);
    if (a.kind != FGD_HOST) /* the next allocation at these addresses starts with nothing written */
        fgd_written_drop(a.base, a.size);
    return 0;
}

int fgd_table_overlaps(uintptr_t base, size_t size)
{
    pthread_mutex_lock(&lock);
    size_t i = nallocs ? find_floor(base + size - 1) : nallocs;
    int hit = i < nallocs && allocs[i].base + (allocs[i].size ? allocs[i].size : 1) > base;
    pthread_mutex_unlock(&lock);
    return hit;
}

static int joined(const fgd_alloc *a, const fgd_alloc *b) /* b continues a's mapping run */
{
    return a->kind == FGD_MAPPED && b->kind == FGD_MAPPED && a->owner == b->owner && a->base + a->size == b->base;
}

/* The whole range p lies in: an allocation, or for VMM the run of adjacent mappings of one reservation (torch's
 * expandable segments map 2/20 MiB pieces side by side, and one tensor may straddle them). Caller holds lock. */
static int lookup_range_locked(uintptr_t p, fgd_alloc *out)
{
    size_t i = nallocs ? find_floor(p) : nallocs;
    int hit = i < nallocs && p < allocs[i].base + (allocs[i].size ? allocs[i].size : 1);
    if (hit) {
        *out = allocs[i];
        size_t lo = i, hi = i;
        while (lo > 0 && joined(&allocs[lo - 1], &allocs[lo]))
            lo--;
        while (hi + 1 < nallocs && joined(&allocs[hi], &allocs[hi + 1]))
            hi++;
        out->base = allocs[lo].base;
        out->size = allocs[hi].base + allocs[hi].size - allocs[lo].base;
    }
    return hit;
}

static int lookup_range(const void *p, fgd_alloc *out)
{
    pthread_mutex_lock(&lock);
    int hit = lookup_range_locked((uintptr_t)p, out);
    pthread_mutex_unlock(&lock);
    return hit;
}

void fgd_alloc_ends(const uintptr_t *p, size_t n, uintptr_t *end)
{
    fgd_alloc a;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n; i++)
        end[i] = lookup_range_locked(p[i], &a) && a.kind != FGD_HOST ? a.base + a.size : 0;
    pthread_mutex_unlock(&lock);
}

size_t fgd_device_allocations(int device, uintptr_t **base, size_t **size)
{
    pthread_mutex_lock(&lock);
    *base = malloc((nallocs + 1) * sizeof **base);
    *size = malloc((nallocs + 1) * sizeof **size);
    size_t n = 0;
    for (size_t i = 0; *base && *size && i < nallocs; i++)
        if (allocs[i].kind != FGD_HOST && allocs[i].device == device) {
            (*base)[n] = allocs[i].base;
            (*size)[n++] = allocs[i].size;
        }
    pthread_mutex_unlock(&lock);
    return n;
}

void *fgd_reserve_pages(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Whole pages on a 2 MiB boundary, as the driver places every allocation of a page or more (measured:
 * "alloc_steps"). Recent kernels align such anonymous mappings by themselves; on older ones the surplus is
 * trimmed. */
static void *reserve_aligned(size_t bytes)
{
    size_t span = bytes + FGD_PAGE;
    char *p = span > bytes ? fgd_reserve_pages(span) : NULL;
    if (!p)
        return NULL;
    size_t head = (FGD_PAGE - (uintptr_t)p % FGD_PAGE) % FGD_PAGE;
    if (head)
        munmap(p, head);
    munmap(p + head + bytes, FGD_PAGE - head);
    return p + head;
}

CUresult fgd_charge(int device, size_t bytes)
{
    CUresult lost = fgd_lost(device);
    if (lost != CUDA_SUCCESS)
        return lost;
    fgd_mem *m = &fgd.mem[device];
    unsigned long long capacity = fgd_capacity(m), others = fgd_others_used(device);
    capacity = capacity > others ? capacity - others : 0;
    /* Claim the pages first (compare-and-swap), so concurrent allocations never overshoot. */
    unsigned long long used = atomic_load(&m->used);
    do {
        if (used + bytes > capacity || used + bytes < used)
            return CUDA_ERROR_OUT_OF_MEMORY;
    } while (!atomic_compare_exchange_weak(&m->used, &used, used + bytes));
    unsigned long long now = used + bytes, peak = atomic_load(&m->peak);
    while (now > peak && !atomic_compare_exchange_weak(&m->peak, &peak, now))
        ;
    atomic_fetch_add(&m->allocs, 1);
    fgd_activate(&fgd.ctx[device]);
    fgd_state_changed(device);
    fg_fault_allocated(fgd.board[device]); /* a plan's "after N allocations" counts here */
    return CUDA_SUCCESS;
}

void fgd_uncharge(int device, size_t bytes)
{
    /* Saturating: a forked child starts at 0 (driver/state.c) yet may free what its parent allocated. */
    unsigned long long used = atomic_load(&fgd.mem[device].used);
    while (!atomic_compare_exchange_weak(&fgd.mem[device].used, &used, used > bytes ? used - bytes : 0))
        ;
    atomic_fetch_add(&fgd.mem[device].frees, 1);
    fgd_state_changed(device);
}

/* ---- sub-allocation of small requests ----
 *
 * Measured on an H200 with driver 580 (tests/data/gpu/h200/driver.json): one cuMemAlloc of 1, 512, 4096 bytes,
 * 64 KiB, 1 MiB or 2 MiB - 1 alone takes one 2 MiB step of cuMemGetInfo and lands on a 2 MiB boundary, and
 * freeing it gives the step back ("alloc_steps"); ten 1-byte allocations in a row land 512 bytes apart and take
 * one 2 MiB step together ("small_allocs"). So a small request takes 512-byte units of a 2 MiB page the driver
 * maps for such requests, the first one of a page is at its start, and a page whose last request is freed is
 * returned.
 * Assumed, not measured: every request smaller than a page is sub-allocated this way (only 1-byte requests were
 * measured side by side), a request goes to the first page with a large enough run of free units, and a page
 * holds small requests only. Requests of a whole page or more take pages of their own. */
typedef struct {
    uintptr_t base;
    int device;
    unsigned used; /* units taken */
    unsigned char unit[FGD_SMALL_UNITS / 8]; /* a bit per unit: taken */
} small_page;

static small_page *pages;
static size_t npages, cap_pages;
static pthread_mutex_t small_lock = PTHREAD_MUTEX_INITIALIZER;

static void small_prepare(void) { pthread_mutex_lock(&small_lock); }
static void small_resume(void) { pthread_mutex_unlock(&small_lock); }
static void small_child(void) { pthread_mutex_init(&small_lock, NULL); }
/* A fork during another thread's small allocation must not leave the child with the lock held. */
__attribute__((constructor)) static void install_small_fork_handler(void)
{
    pthread_atfork(small_prepare, small_resume, small_child);
}

static int unit_taken(const small_page *pg, size_t u) { return pg->unit[u / 8] >> (u % 8) & 1; }

static void mark_units(small_page *pg, size_t first, size_t n, int taken)
{
    for (size_t u = first; u < first + n; u++)
        pg->unit[u / 8] = (unsigned char)(taken ? pg->unit[u / 8] | 1u << (u % 8) : pg->unit[u / 8] & ~(1u << (u % 8)));
    pg->used = taken ? pg->used + (unsigned)n : pg->used - (unsigned)n;
}

/* The first run of n free units in pg, or FGD_SMALL_UNITS. */
static size_t free_run(const small_page *pg, size_t n)
{
    size_t run = 0;
    for (size_t u = 0; u < FGD_SMALL_UNITS; u++) {
        run = unit_taken(pg, u) ? 0 : run + 1;
        if (run == n)
            return u + 1 - n;
    }
    return FGD_SMALL_UNITS;
}

static size_t small_units(size_t bytes) { return (bytes + FGD_SMALL_UNIT - 1) / FGD_SMALL_UNIT; }
static int is_small(size_t bytes) { return small_units(bytes) < FGD_SMALL_UNITS; }

/* Place `bytes` in a page of `device`, mapping and charging a new page when none has room. Caller holds
 * small_lock. The allocation counts through fgd_charge either way (the report's count, fault plans). */
static CUresult small_place(int device, size_t bytes, uintptr_t *at, uintptr_t *page)
{
    size_t n = small_units(bytes);
    for (size_t i = 0; i < npages; i++) {
        size_t first = pages[i].device == device ? free_run(&pages[i], n) : FGD_SMALL_UNITS;
        if (first < FGD_SMALL_UNITS) {
            CUresult rc = fgd_charge(device, 0);
            if (rc != CUDA_SUCCESS)
                return rc;
            mark_units(&pages[i], first, n, 1);
            *page = pages[i].base;
            *at = pages[i].base + first * FGD_SMALL_UNIT;
            return CUDA_SUCCESS;
        }
    }
    if (npages == cap_pages) {
        size_t cap = cap_pages ? cap_pages * 2 : 16;
        small_page *grown = realloc(pages, cap * sizeof *grown);
        if (!grown)
            return CUDA_ERROR_OUT_OF_MEMORY;
        pages = grown;
        cap_pages = cap;
    }
    CUresult rc = fgd_charge(device, FGD_PAGE);
    if (rc != CUDA_SUCCESS)
        return rc;
    void *p = reserve_aligned(FGD_PAGE);
    if (!p) {
        fgd_uncharge(device, FGD_PAGE);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    small_page *pg = &pages[npages++];
    memset(pg, 0, sizeof *pg);
    pg->base = (uintptr_t)p;
    pg->device = device;
    mark_units(pg, 0, n, 1);
    *page = *at = pg->base;
    return CUDA_SUCCESS;
}

/* Give back the units of a sub-allocation (a.owner: its page); the page goes when its last request does. */
static void small_release(const fgd_alloc *a)
{
    pthread_mutex_lock(&small_lock);
    size_t i = 0;
    while (i < npages && pages[i].base != a->owner)
        i++;
    size_t uncharge = 0;
    if (i < npages) {
        mark_units(&pages[i], (a->base - pages[i].base) / FGD_SMALL_UNIT, small_units(a->size), 0);
        if (!pages[i].used) {
            munmap((void *)pages[i].base, FGD_PAGE);
            pages[i] = pages[--npages];
            uncharge = FGD_PAGE;
        }
    }
    pthread_mutex_unlock(&small_lock);
    fgd_uncharge(a->device, uncharge);
}

static CUresult small_alloc(int device, size_t bytes, void **out)
{
    uintptr_t at = 0, page = 0;
    pthread_mutex_lock(&small_lock);
    CUresult rc = small_place(device, bytes, &at, &page);
    pthread_mutex_unlock(&small_lock);
    if (rc != CUDA_SUCCESS)
        return rc;
    fgd_alloc a = {at, bytes, 0, device, FGD_DEVICE, page};
    if (fgd_table_add(&a) != 0) {
        small_release(&a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = (void *)at;
    return CUDA_SUCCESS;
}

static CUresult alloc(struct CUctx_st *c, size_t bytes, int host, void **out)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (bytes == 0) {
        *out = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    size_t charged = (bytes + FGD_PAGE - 1) / FGD_PAGE * FGD_PAGE;
    if (charged < bytes)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fgd_activity(host ? "cuMemAllocHost" : "cuMemAlloc", NULL, bytes);
    if (!host && is_small(bytes))
        return small_alloc(c->device, bytes, out);
    if (!host) {
        CUresult rc = fgd_charge(c->device, charged);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    void *p = reserve_aligned(charged);
    fgd_alloc a = {(uintptr_t)p, bytes, charged, c ? c->device : 0, host ? FGD_HOST : FGD_DEVICE, 0};
    if (!p || fgd_table_add(&a) != 0) {
        if (p)
            munmap(p, charged);
        if (!host) {
            atomic_fetch_sub(&fgd.mem[c->device].used, charged);
            atomic_fetch_sub(&fgd.mem[c->device].allocs, 1);
        }
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = p;
    return CUDA_SUCCESS;
}

static CUresult release(void *p, int host)
{
    if (!p)
        return CUDA_SUCCESS;
    fgd_alloc a;
    if (!host && fgd_table_take((uintptr_t)p, FGD_POOLED, &a) == 0)
        return fgd_pool_free(&a); /* cuMemFree of stream-ordered memory: allowed, as on CUDA */
    if (fgd_table_take((uintptr_t)p, host ? FGD_HOST : FGD_DEVICE, &a) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!host && a.owner) {
        small_release(&a);
        return CUDA_SUCCESS;
    }
    munmap(p, a.charged);
    if (!host)
        fgd_uncharge(a.device, a.charged);
    return CUDA_SUCCESS;
}

#define FGD_CTX(var)                                                                                              \
    FGD_INIT();                                                                                                   \
    struct CUctx_st *var = fgd_current();                                                                         \
    if (!var)                                                                                                     \
        return CUDA_ERROR_INVALID_CONTEXT

FGC_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    FGD_CTX(c);
    void *p = NULL;
    CUresult rc = alloc(c, bytesize, 0, &p);
    if (dptr)
        *dptr = (CUdeviceptr)(uintptr_t)p;
    return rc;
}

FGC_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    (void)flags; /* managed memory counts against the device it was allocated on */
    return cuMemAlloc_v2(dptr, bytesize);
}

FGC_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                       unsigned int elementSize)
{
    if (!pitch || elementSize == 0 || elementSize > 16)
        return CUDA_ERROR_INVALID_VALUE;
    *pitch = (width + 511) / 512 * 512; /* the 512-byte texture pitch alignment */
    return cuMemAlloc_v2(dptr, *pitch * height);
}

FGC_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    FGD_INIT();
    return release((void *)(uintptr_t)dptr, 0);
}

FGC_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    FGD_INIT();
    return alloc(fgd_current(), bytesize, 1, pp);
}

FGC_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    (void)Flags; /* portable / mapped / write-combined make no difference without a device */
    return cuMemAllocHost_v2(pp, bytesize);
}

FGC_EXPORT CUresult cuMemFreeHost(void *p)
{
    FGD_INIT();
    return release(p, 1);
}

FGC_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    FGD_CTX(c);
    if (!free || !total)
        return CUDA_ERROR_INVALID_VALUE;
    const fg_device *d = &fgd.devs.dev[c->device];
    fgd_mem *m = &fgd.mem[c->device];
    fgd_activate(c);
    *total = d->cuda_total ? d->cuda_total : d->mem_total;
    unsigned long long used = atomic_load(&m->used) + fgd_others_used(c->device);
    unsigned long long capacity = fgd_capacity(m);
    *free = used < capacity ? capacity - used : 0;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    FGD_INIT();
    fgd_alloc a;
    if (!lookup_range((void *)(uintptr_t)dptr, &a) || a.kind == FGD_HOST)
        return CUDA_ERROR_NOT_FOUND;
    if (pbase)
        *pbase = a.base;
    if (psize)
        *psize = a.size;
    return CUDA_SUCCESS;
}

/* ---- copies and fills: plain host operations, since device pointers are host addresses ---- */

/* Is p inside a device allocation (not page-locked host memory)? Caller holds lock. */
static int on_device_locked(const void *p)
{
    size_t i = nallocs ? find_floor((uintptr_t)p) : nallocs;
    return i < nallocs && (uintptr_t)p < allocs[i].base + (allocs[i].size ? allocs[i].size : 1) &&
           allocs[i].kind != FGD_HOST;
}

static int on_device(const void *p)
{
    pthread_mutex_lock(&lock);
    int hit = on_device_locked(p);
    pthread_mutex_unlock(&lock);
    return hit;
}

/* check_read 0: the caller has accounted for the read already (the rows of one 2D copy are one read). */
static CUresult copy_bytes(void *dst, const void *src, size_t n, const char *api, int check_read)
{
    FGD_INIT();
    if (n && (!dst || !src))
        return CUDA_ERROR_INVALID_VALUE;
    if (!n)
        return CUDA_SUCCESS;
    fgd_activity(api, NULL, n);
    pthread_mutex_lock(&lock);
    int to_device = on_device_locked(dst), from_device = on_device_locked(src);
    pthread_mutex_unlock(&lock);
    struct CUctx_st *c = to_device || from_device ? fgd_current() : NULL;
    if (c && fgd_lost(c->device))
        return CUDA_ERROR_UNKNOWN;
    /* The copy's own time is the device's busy time: it takes real time here when the bytes are kept. */
    long long started = fgd_now_ns();
    if (from_device && !to_device) {
        if (check_read) /* before the copy: the error policy ends the program here */
            fgd_written_read((uintptr_t)src, n, api);
    }
    else if (from_device)
        fgd_written_copy((uintptr_t)dst, (uintptr_t)src, n);
    else if (to_device)
        fgd_written_host((uintptr_t)dst, n);
    if (fgc_memory_accounting() && to_device) {
        /* the bytes are not kept: the destination pages stay untouched */
    } else if (fgc_memory_accounting() && from_device) {
        memset(dst, 0, n); /* device memory was never written, so it reads as zeros */
    } else if (dst != src) { /* a collective's in-place buffer copied onto itself */
        memmove(dst, src, n);
    }
    if (c) {
        fgd_work(c->device, 0, started, fgd_now_ns(), to_device && from_device ? fgd_copy_ns(c->device, n) : 0);
        if (!to_device) /* the program reads the result: it waited for the device */
            fgd_synced(c->device);
    }
    return CUDA_SUCCESS;
}

CUresult fgd_copy(void *dst, const void *src, size_t n, const char *api) { return copy_bytes(dst, src, n, api, 1); }

#define P(x) ((void *)(uintptr_t)(x))

/* A copy the program asked for, on stream `s` (async) or the legacy default stream, in the timeline log. */
static CUresult copy_logged(CUstream s, int async, void *dst, const void *src, size_t n, const char *api)
{
    fgd_stamp t0 = fgd_timeline_stamp();
    CUresult rc = fgd_copy(dst, src, n, api);
    if (rc == CUDA_SUCCESS && n && fgd_timeline_on()) {
        int to = on_device(dst), from = on_device(src);
        int dir = to && from ? FGC_TL_DTOD : to ? FGC_TL_HTOD : from ? FGC_TL_DTOH : FGC_TL_HTOH;
        fgd_timeline_simple(FGC_TL_MEMCPY, dir, async ? s : NULL, n, (unsigned long long)async, t0);
    }
    return rc;
}

/* The stream-ordered copy: recorded when the stream is capturing a graph, done now otherwise. */
static CUresult copy_on(CUstream s, void *dst, const void *src, size_t n, const char *api)
{
    CUresult rc;
    return fgd_capture_copy(s, dst, src, n, &rc) ? rc : copy_logged(s, 1, dst, src, n, api);
}
FGC_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return copy_logged(NULL, 0, P(dst), P(src), n, "cuMemcpy");
}
FGC_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy_on(s, P(dst), P(src), n, "cuMemcpyAsync");
}
FGC_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
    return copy_logged(NULL, 0, P(dst), src, n, "cuMemcpyHtoD");
}
FGC_EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
    return copy_logged(NULL, 0, dst, P(src), n, "cuMemcpyDtoH");
}
FGC_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return copy_logged(NULL, 0, P(dst), P(src), n, "cuMemcpyDtoD");
}
FGC_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    return copy_on(s, P(dst), src, n, "cuMemcpyHtoDAsync");
}
FGC_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy_on(s, dst, P(src), n, "cuMemcpyDtoHAsync");
}
FGC_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy_on(s, P(dst), P(src), n, "cuMemcpyDtoDAsync");
}
FGC_EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n)
{
    (void)dc, (void)sc;
    return copy_logged(NULL, 0, P(dst), P(src), n, "cuMemcpyPeer");
}
FGC_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n,
                                      CUstream s)
{
    (void)dc, (void)sc;
    return copy_on(s, P(dst), P(src), n, "cuMemcpyPeerAsync");
}

/* A 2D copy of host or device (unified) memory, row by row, as ONE read or write of the account: the rows of a
 * device-to-host copy are one read of the program. Arrays (CU_MEMORYTYPE_ARRAY) do not exist here. */
static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream s, int async, const char *api)
{
    FGD_INIT();
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    if (c->srcMemoryType == CU_MEMORYTYPE_ARRAY || c->dstMemoryType == CU_MEMORYTYPE_ARRAY)
        return (CUresult)fgc_refuse("cuda", "cuMemcpy2D(CUDA arrays)", CUDA_ERROR_NOT_SUPPORTED);
    const char *src = c->srcMemoryType == CU_MEMORYTYPE_HOST ? c->srcHost : P(c->srcDevice);
    char *dst = c->dstMemoryType == CU_MEMORYTYPE_HOST ? c->dstHost : P(c->dstDevice);
    size_t spitch = c->srcPitch ? c->srcPitch : c->WidthInBytes, dpitch = c->dstPitch ? c->dstPitch : c->WidthInBytes;
    if (c->WidthInBytes > spitch || c->WidthInBytes > dpitch)
        return CUDA_ERROR_INVALID_VALUE;
    if (!c->WidthInBytes || !c->Height)
        return CUDA_SUCCESS;
    if (!src || !dst)
        return CUDA_ERROR_INVALID_VALUE;
    src += c->srcY * spitch + c->srcXInBytes;
    dst += c->dstY * dpitch + c->dstXInBytes;
    CUresult rc = CUDA_SUCCESS;
    if (async && fgd_capture_copy(s, dst, src, c->WidthInBytes, &rc)) { /* recorded: each row a copy node */
        for (size_t r = 1; r < c->Height && rc == CUDA_SUCCESS; r++)
            fgd_capture_copy(s, dst + r * dpitch, src + r * spitch, c->WidthInBytes, &rc);
        return rc;
    }
    pthread_mutex_lock(&lock);
    int to_device = on_device_locked(dst), from_device = on_device_locked(src);
    pthread_mutex_unlock(&lock);
    if (from_device && !to_device) /* the rows' span: the pitch gaps are never copied, but are no host data */
        fgd_written_read((uintptr_t)src, (c->Height - 1) * spitch + c->WidthInBytes, api);
    for (size_t r = 0; r < c->Height && rc == CUDA_SUCCESS; r++)
        rc = copy_bytes(dst + r * dpitch, src + r * spitch, c->WidthInBytes, api, 0);
    return rc;
}

FGC_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy) { return copy2d(pCopy, NULL, 0, "cuMemcpy2D"); }
FGC_EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy)
{
    return copy2d(pCopy, NULL, 0, "cuMemcpy2DUnaligned");
}
FGC_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream s)
{
    return copy2d(pCopy, s, 1, "cuMemcpy2DAsync");
}

/* Whole host pages of a zero fill are dropped rather than written: they read as zeros afterwards and cost no
 * host RAM (optimizer states and gradients are zero-filled, and must not spend what a simulated board holds).
 * Below this many bytes a plain memset is cheaper than the system call. */
#define ZERO_BY_DROPPING (64u << 10)

static void zero_bytes(unsigned char *p, size_t n, int shared)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1), hi = ((uintptr_t)p + n) & ~(page - 1);
    /* a private anonymous mapping refaults dropped pages as zeros; a shared one (a VMM handle's) must give back
     * its backing too (MADV_REMOVE), or the old bytes come back */
    if (hi <= lo || hi - lo < ZERO_BY_DROPPING ||
        madvise((void *)lo, hi - lo, shared ? MADV_REMOVE : MADV_DONTNEED) != 0) {
        memset(p, 0, n);
        return;
    }
    memset(p, 0, lo - (uintptr_t)p);
    memset((void *)hi, 0, (uintptr_t)p + n - hi);
}

int fgd_set_pattern(uintptr_t dst, const void *pattern, size_t width, size_t n)
{
    const unsigned char *v = pattern;
    size_t zero = 0, total = n * width;
    while (zero < width && v[zero] == 0)
        zero++;
    fgd_alloc a;
    int device = fgd_lookup((void *)dst, &a) && a.kind != FGD_HOST;
    if (device && fgc_memory_accounting()) { /* no bytes are kept: device memory reads as zeros */
        if (zero < width)
            return -1;
        fgd_written_host(dst, total);
        return 0;
    }
    if (device)
        fgd_written_host(dst, total);
    unsigned char *p = (unsigned char *)dst;
    if (zero == width) {
        if (device) /* our own mapping: its pages may be dropped */
            zero_bytes(p, total, a.kind == FGD_MAPPED);
        else
            memset(p, 0, total);
        return 0;
    }
    /* one element, then the filled prefix copied onto what follows it, doubling each time */
    size_t done = width < total ? width : total;
    memcpy(p, v, done);
    while (done < total) {
        size_t step = done < total - done ? done : total - done;
        memcpy(p + done, p, step);
        done += step;
    }
    return 0;
}

CUresult fgd_fill(CUdeviceptr dst, unsigned value, size_t width, size_t n)
{
    FGD_INIT();
    if (n && !dst)
        return CUDA_ERROR_INVALID_VALUE;
    if (!n)
        return CUDA_SUCCESS;
    fgd_activity("cuMemset", NULL, n * width);
    if (on_device(P(dst))) {
        struct CUctx_st *c = fgd_current(); /* a fill is a kernel on a GPU: memory work, writing its bytes */
        long long now = fgd_now_ns();
        if (c)
            fgd_work(c->device, 0, now, now, fgd_copy_ns(c->device, n * width) / 2);
    }
    unsigned char pattern[4];
    for (size_t i = 0; i < width; i++)
        pattern[i] = (unsigned char)(value >> (8 * i)); /* little-endian, as the device stores it */
    if (fgd_set_pattern(dst, pattern, width, n) != 0)
        fgd_written_host((uintptr_t)dst, n * width); /* accounting mode: a memset's value is the host's, though
                                                        not kept (device memory reads as zeros) */
    return CUDA_SUCCESS;
}

/* A fill the program asked for, on stream `s` (async) or the legacy default stream, in the timeline log. */
static CUresult fill_logged(CUstream s, int async, CUdeviceptr d, unsigned v, size_t width, size_t n)
{
    fgd_stamp t0 = fgd_timeline_stamp();
    CUresult rc = fgd_fill(d, v, width, n);
    if (rc == CUDA_SUCCESS && n)
        fgd_timeline_simple(FGC_TL_MEMSET, 0, async ? s : NULL, n * width, (unsigned long long)async, t0);
    return rc;
}

static CUresult fill_on(CUstream s, CUdeviceptr d, unsigned v, size_t width, size_t n)
{
    CUresult rc;
    return fgd_capture_fill(s, d, v, width, n, &rc) ? rc : fill_logged(s, 1, d, v, width, n);
}

FGC_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return fill_logged(NULL, 0, d, v, 1, n); }
FGC_EXPORT CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n)
{
    return fill_logged(NULL, 0, d, v, 2, n);
}
FGC_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) { return fill_logged(NULL, 0, d, v, 4, n); }
FGC_EXPORT CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
    return fill_on(s, d, v, 1, n);
}
FGC_EXPORT CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
    return fill_on(s, d, v, 2, n);
}
FGC_EXPORT CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
    return fill_on(s, d, v, 4, n);
}

/* ---- pointer attributes ---- */

FGC_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    FGD_INIT();
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    fgd_alloc a;
    int ours = lookup_range(P(ptr), &a);
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        if (!ours)
            return CUDA_ERROR_INVALID_VALUE; /* what the driver says of pageable host memory */
        *(unsigned *)data = a.kind == FGD_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!ours)
            return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = P(ptr);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        if (!ours)
            return CUDA_ERROR_INVALID_VALUE;
        *(CUcontext *)data = &fgd.ctx[a.device];
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        if (!ours)
            return CUDA_ERROR_INVALID_VALUE;
        *(int *)data = a.device;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        if (!ours)
            return CUDA_ERROR_INVALID_VALUE;
        *(CUdeviceptr *)data = a.base;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        if (!ours)
            return CUDA_ERROR_INVALID_VALUE;
        *(size_t *)data = a.size;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(int *)data = 0;
        return ours ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        if (!ours)
            return CUDA_ERROR_INVALID_VALUE;
        *(unsigned long long *)data = a.base;
        return CUDA_SUCCESS;
    default:
        return (CUresult)fgc_refuse("cuda", "cuPointerGetAttribute(attribute)", CUDA_ERROR_NOT_SUPPORTED);
    }
}

FGC_EXPORT CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data, CUdeviceptr ptr)
{
    if (n && (!attrs || !data))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++) {
        CUresult rc = cuPointerGetAttribute(data[i], attrs[i], ptr);
        /* The plural form reports "unregistered host memory" as a memory type of 0 instead of failing. */
        if (rc == CUDA_ERROR_INVALID_VALUE && attrs[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
            *(unsigned *)data[i] = 0;
        else if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_INVALID_VALUE)
            return rc;
    }
    return CUDA_SUCCESS;
}

/* Totals for the process report and the shared state. */
FG_HIDDEN size_t fgd_live_allocations(void);
size_t fgd_live_allocations(void)
{
    pthread_mutex_lock(&lock);
    size_t n = nallocs;
    pthread_mutex_unlock(&lock);
    return n;
}
