/* CUDA's virtual memory management API (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess, ...), what
 * PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) stand on.
 *
 * A reservation is host address space mapped PROT_NONE (MAP_NORESERVE: it costs nothing, torch reserves 9/8 of
 * the board). A physical allocation (cuMemCreate) is charged to its device's capacity at creation, exactly like
 * cuMemAlloc, and owns a shared anonymous mapping of its size that holds its bytes; cuMemMap places those same
 * pages inside a reservation (mremap with old size 0 duplicates a shared mapping), so contents follow the handle
 * as on a GPU: unmapping and remapping elsewhere keeps them, mapping one handle twice aliases. The mapped range
 * stays inaccessible until cuMemSetAccess grants read or read-write (host protection follows the flags).
 * Mapped ranges enter the driver's allocation table (FGD_MAPPED), so pointer attributes, cuMemGetAddressRange,
 * copies in accounting mode and cuDNN's pointer checks treat them as device memory. The capacity comes back
 * when the handle is released and no longer mapped (cuMemRelease's documented semantics).
 *
 * The backing and mapped pages are excluded from fork (MADV_DONTFORK): being shared mappings they would
 * otherwise let a forked child write the parent's device memory; a child cannot use its parent's CUDA state
 * on a real system either. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fgd.h"

/* What current boards answer for both MINIMUM and RECOMMENDED on device memory. */
#define FGD_VMM_GRANULARITY (2ULL << 20)

typedef struct {
    uintptr_t base;
    size_t size;
} reservation;

typedef struct {
    CUmemGenericAllocationHandle id;
    size_t size;
    CUmemAllocationProp prop;
    void *backing; /* the shared mapping that holds the bytes */
    unsigned refs; /* cuMemCreate + cuMemRetainAllocationHandle, less cuMemRelease */
    unsigned maps; /* live cuMemMap ranges */
} phys;

typedef struct {
    uintptr_t base;
    size_t size;
    CUmemGenericAllocationHandle handle;
    unsigned long long access[FG_MAX_DEVICES]; /* CUmemAccess_flags per device */
} mapping;

static reservation *res;
static size_t nres, cap_res;
static phys *handles; /* sorted by id (ids only grow) */
static size_t nhandles, cap_handles;
static mapping *maps; /* unsorted: a mapping is found by address through a linear scan of ranges in use */
static size_t nmaps, cap_maps;
static CUmemGenericAllocationHandle next_id = 0x1000;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void lock_prepare(void) { pthread_mutex_lock(&lock); }
static void lock_release(void) { pthread_mutex_unlock(&lock); }
static void lock_child(void) { pthread_mutex_init(&lock, NULL); }
/* A fork in the middle of another thread's VMM call must not leave the child with the lock held. */
__attribute__((constructor)) static void install_fork_handler(void)
{
    pthread_atfork(lock_prepare, lock_release, lock_child);
}

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 64;
    void *p = realloc(*arr, c * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = c;
    return 0;
}

static int aligned(unsigned long long v) { return v % FGD_VMM_GRANULARITY == 0; }

static reservation *reservation_of(uintptr_t p, size_t size)
{
    for (size_t i = 0; i < nres; i++)
        if (p >= res[i].base && p - res[i].base < res[i].size && size <= res[i].size - (p - res[i].base))
            return &res[i];
    return NULL;
}

static phys *handle_any(CUmemGenericAllocationHandle id)
{
    size_t lo = 0, hi = nhandles;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (handles[mid].id == id)
            return &handles[mid];
        if (handles[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* A live handle: one released but still mapped is no longer one. */
static phys *handle_of(CUmemGenericAllocationHandle id)
{
    phys *h = handle_any(id);
    return h && h->refs ? h : NULL;
}

/* Free the pages of a handle no one references or maps any more, and give the capacity back. */
static void maybe_free(phys *h)
{
    if (h->refs || h->maps)
        return;
    munmap(h->backing, h->size);
    fgd_uncharge(h->prop.location.id, h->size);
    size_t i = (size_t)(h - handles);
    memmove(&handles[i], &handles[i + 1], (nhandles - i - 1) * sizeof *handles);
    nhandles--;
}

static mapping *mapping_at(uintptr_t p) /* the mapping containing p */
{
    for (size_t i = 0; i < nmaps; i++)
        if (p >= maps[i].base && p - maps[i].base < maps[i].size)
            return &maps[i];
    return NULL;
}

static int valid_device_location(const CUmemLocation *l)
{
    return l->type == CU_MEM_LOCATION_TYPE_DEVICE && l->id >= 0 && (unsigned)l->id < fgd.devs.count;
}

FGC_EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                                  CUmemAllocationGranularity_flags option)
{
    FGD_INIT();
    if (!granularity || !prop || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                                  option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || !valid_device_location(&prop->location))
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = FGD_VMM_GRANULARITY;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                        unsigned long long flags)
{
    FGD_INIT();
    if (!ptr || !size || flags || !aligned(size) || (alignment & (alignment - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    size_t align = alignment > FGD_VMM_GRANULARITY ? alignment : FGD_VMM_GRANULARITY;
    /* Over-reserve, then trim to an aligned start. The hint `addr` is only a hint, as for the driver. */
    size_t span = size + align;
    if (span < size)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *hint = addr && addr % align == 0 ? (void *)(uintptr_t)addr : NULL;
    void *p = mmap(hint, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t start = ((uintptr_t)p + align - 1) / align * align;
    if (start > (uintptr_t)p)
        munmap(p, start - (uintptr_t)p);
    if ((uintptr_t)p + span > start + size)
        munmap((void *)(start + size), (uintptr_t)p + span - (start + size));
    pthread_mutex_lock(&lock);
    int bad = grow((void **)&res, &cap_res, nres, sizeof *res);
    if (!bad)
        res[nres++] = (reservation){start, size};
    pthread_mutex_unlock(&lock);
    if (bad) {
        munmap((void *)start, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ptr = start;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    FGD_INIT();
    pthread_mutex_lock(&lock);
    size_t i = 0;
    while (i < nres && !(res[i].base == ptr && res[i].size == size))
        i++;
    CUresult rc = CUDA_ERROR_INVALID_VALUE; /* not what cuMemAddressReserve returned, or another size */
    if (i < nres) {
        int mapped = 0;
        for (size_t j = 0; j < nmaps && !mapped; j++)
            mapped = maps[j].base >= ptr && maps[j].base - ptr < size;
        if (!mapped) { /* the driver refuses to free address space that still has memory mapped into it */
            munmap((void *)(uintptr_t)ptr, size);
            res[i] = res[--nres];
            rc = CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

FGC_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                                unsigned long long flags)
{
    FGD_INIT();
    if (!handle || !prop || !size || flags || !aligned(size) || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return (CUresult)fgc_refuse("cuda", "cuMemCreate(host location)", CUDA_ERROR_NOT_SUPPORTED);
    if (prop->location.id < 0 || (unsigned)prop->location.id >= fgd.devs.count)
        return CUDA_ERROR_INVALID_DEVICE;
    /* Fabric handles need an IMEX channel, which this host does not have: what the driver answers then. */
    if (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC)
        return CUDA_ERROR_NOT_PERMITTED;
    if (prop->requestedHandleTypes & ~(CUmemAllocationHandleType)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE; /* Win32 handles on Linux */
    int dev = prop->location.id;
    CUresult rc = fgd_charge(dev, size);
    if (rc != CUDA_SUCCESS)
        return rc;
    void *backing = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (backing == MAP_FAILED) {
        fgd_uncharge(dev, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    madvise(backing, size, MADV_DONTFORK);
    pthread_mutex_lock(&lock);
    int bad = grow((void **)&handles, &cap_handles, nhandles, sizeof *handles);
    if (!bad) {
        handles[nhandles] = (phys){next_id++, size, *prop, backing, 1, 0};
        *handle = handles[nhandles++].id;
    }
    pthread_mutex_unlock(&lock);
    if (bad) {
        munmap(backing, size);
        fgd_uncharge(dev, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    FGD_INIT();
    pthread_mutex_lock(&lock);
    phys *h = handle_of(handle);
    if (h) {
        h->refs--;
        maybe_free(h);
    }
    pthread_mutex_unlock(&lock);
    return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FGC_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                             unsigned long long flags)
{
    FGD_INIT();
    if (!ptr || !size || flags || offset || !aligned(ptr) || !aligned(size))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    phys *h = handle_of(handle);
    reservation *r = reservation_of(ptr, size);
    /* Only inside a reservation, over addresses nothing is mapped to yet, no larger than the allocation. */
    if (!h || !r || size > h->size || fgd_table_overlaps(ptr, size))
        goto out;
    if (grow((void **)&maps, &cap_maps, nmaps, sizeof *maps) != 0) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    void *at = mremap(h->backing, 0, size, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)(uintptr_t)ptr);
    if (at == MAP_FAILED) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    mprotect(at, size, PROT_NONE); /* mapped is not accessible: cuMemSetAccess grants access */
    madvise(at, size, MADV_DONTFORK);
    fgd_alloc a = {ptr, size, 0, h->prop.location.id, FGD_MAPPED, r->base};
    if (fgd_table_add(&a) != 0) {
        mmap(at, size, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    maps[nmaps] = (mapping){ptr, size, handle, {0}};
    nmaps++;
    h->maps++;
    rc = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&lock);
    return rc;
}

FGC_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    FGD_INIT();
    if (!ptr || !size || ptr + size < ptr)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    /* The range must be a sequence of whole mappings, without gaps. */
    uintptr_t p = ptr, end = ptr + size;
    while (p < end) {
        mapping *m = mapping_at(p);
        if (!m || m->base != p || m->size > end - p)
            goto out;
        p += m->size;
    }
    for (p = ptr; p < end;) {
        mapping *m = mapping_at(p);
        size_t len = m->size;
        fgd_table_take(p, FGD_MAPPED, NULL);
        /* Back to reserved, inaccessible address space: the pages stay with the handle's backing. */
        mmap((void *)p, len, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        phys *h = handle_any(m->handle);
        *m = maps[--nmaps];
        if (h) {
            h->maps--;
            maybe_free(h);
        }
        p += len;
    }
    rc = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&lock);
    return rc;
}

static int prot_of(unsigned long long flags)
{
    return flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
           : flags == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                       : PROT_NONE;
}

FGC_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    FGD_INIT();
    if (!ptr || !size || ptr + size < ptr || !desc || !count)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            return (CUresult)fgc_refuse("cuda", "cuMemSetAccess(host location)", CUDA_ERROR_NOT_SUPPORTED);
        if (desc[i].location.id < 0 || (unsigned)desc[i].location.id >= fgd.devs.count)
            return CUDA_ERROR_INVALID_DEVICE;
        unsigned f = desc[i].flags;
        if (f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    uintptr_t p = ptr, end = ptr + size;
    while (p < end) { /* fully mapped */
        mapping *m = mapping_at(p);
        if (!m)
            goto out;
        p = m->base + m->size;
    }
    for (p = ptr; p < end;) {
        mapping *m = mapping_at(p);
        for (size_t i = 0; i < count; i++)
            m->access[desc[i].location.id] = desc[i].flags;
        /* The host stands in for every device: the widest access any device has. */
        int prot = PROT_NONE;
        for (unsigned d = 0; d < fgd.devs.count; d++)
            prot |= prot_of(m->access[d]);
        uintptr_t lo = p, hi = m->base + m->size < end ? m->base + m->size : end;
        mprotect((void *)lo, hi - lo, prot);
        p = hi;
    }
    rc = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&lock);
    return rc;
}

FGC_EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
    FGD_INIT();
    if (!flags || !location)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device_location(location))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    mapping *m = mapping_at(ptr);
    if (m)
        *flags = m->access[location->id];
    pthread_mutex_unlock(&lock);
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FGC_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    FGD_INIT();
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    mapping *m = mapping_at((uintptr_t)addr);
    phys *h = m ? handle_any(m->handle) : NULL;
    if (h) {
        h->refs++;
        *handle = h->id;
    }
    pthread_mutex_unlock(&lock);
    return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FGC_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                           CUmemGenericAllocationHandle handle)
{
    FGD_INIT();
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    phys *h = handle_of(handle);
    if (h)
        *prop = h->prop;
    pthread_mutex_unlock(&lock);
    return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
