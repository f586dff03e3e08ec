/* Stream-ordered allocation (cuMemAllocAsync, cuMemFreeAsync) and memory pools, what PyTorch's
 * PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync stands on.
 *
 * The model: a pool holds `reserved` bytes of its device (charged to the device's capacity, so cuMemGetInfo,
 * nvidia-smi and the report see them) in 2 MiB units, of which `used` are in live allocations. An allocation
 * that does not fit in the free part of the reserve grows it by the missing 2 MiB units (CUDA_ERROR_OUT_OF_MEMORY
 * where the device's capacity ends); a free returns bytes to the reserve, not to the device. The reserve shrinks
 * on cuMemPoolTrimTo, and at each stream/event/context synchronization down to the pool's release threshold
 * (default 0), as documented for CU_MEMPOOL_ATTR_RELEASE_THRESHOLD. Inside the reserve the pool is treated as
 * one free total, i.e. without fragmentation; each allocation counts its size rounded up to 512 bytes (the
 * alignment of what cudaMallocAsync returns) and has pages of its own for its contents.
 * Nothing runs asynchronously here, so stream order is program order: a free is reusable at once. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fgd.h"

#define POOL_UNIT (2ULL << 20)
#define POOL_ALIGN 512ULL

struct CUmemPoolHandle_st {
    int device;
    int destroyed;
    CUmemPoolProps props;
    unsigned long long threshold;
    unsigned long long reserved, reserved_high, used, used_high;
    int reuse[3]; /* the three CU_MEMPOOL_ATTR_REUSE_* switches: stored, nothing to reuse differently here */
    unsigned long long access[FG_MAX_DEVICES];
    struct CUmemPoolHandle_st *next;
};

static struct CUmemPoolHandle_st defaults[FG_MAX_DEVICES];
static struct CUmemPoolHandle_st *current[FG_MAX_DEVICES]; /* cuDeviceSetMemPool; NULL: the default */
static struct CUmemPoolHandle_st *created;                  /* cuMemPoolCreate'd pools, never freed */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void lock_prepare(void) { pthread_mutex_lock(&lock); }
static void lock_release(void) { pthread_mutex_unlock(&lock); }
/* A forked child starts with no device usage of its own (driver/state.c): nor do its pools hold any. */
static void lock_child(void)
{
    pthread_mutex_init(&lock, NULL);
    for (unsigned d = 0; d < FG_MAX_DEVICES; d++)
        defaults[d].reserved = defaults[d].used = 0;
    for (struct CUmemPoolHandle_st *q = created; q; q = q->next)
        q->reserved = q->used = 0;
}
__attribute__((constructor)) static void install_fork_handler(void)
{
    pthread_atfork(lock_prepare, lock_release, lock_child);
}

static unsigned long long round_up(unsigned long long v, unsigned long long unit)
{
    return (v + unit - 1) / unit * unit;
}

static void default_init(int dev) /* under lock */
{
    struct CUmemPoolHandle_st *p = &defaults[dev];
    if (p->props.allocType)
        return;
    p->device = dev;
    p->props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->props.location.id = dev;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    p->access[dev] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

/* A live pool of ours (under lock). */
static int valid(struct CUmemPoolHandle_st *p)
{
    if (!p)
        return 0;
    if (p >= defaults && p < defaults + FG_MAX_DEVICES)
        return p->props.allocType != 0;
    for (struct CUmemPoolHandle_st *q = created; q; q = q->next)
        if (q == p)
            return !p->destroyed;
    return 0;
}

/* Give the reserve back to the device down to `keep` (never below what live allocations use). Under lock. */
static void shrink(struct CUmemPoolHandle_st *p, unsigned long long keep)
{
    unsigned long long floor = round_up(p->used > keep ? p->used : keep, POOL_UNIT);
    if (p->reserved > floor) {
        fgd_uncharge(p->device, p->reserved - floor);
        p->reserved = floor;
    }
}

void fgd_pools_synced(void)
{
    pthread_mutex_lock(&lock);
    for (unsigned d = 0; d < FG_MAX_DEVICES; d++)
        if (defaults[d].props.allocType && defaults[d].reserved > defaults[d].threshold)
            shrink(&defaults[d], defaults[d].threshold);
    for (struct CUmemPoolHandle_st *q = created; q; q = q->next)
        if (q->reserved > q->threshold)
            shrink(q, q->threshold);
    pthread_mutex_unlock(&lock);
}

FGC_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    (void)hStream; /* stream order is program order here */
    FGD_INIT();
    if (!dptr || !bytesize)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long need = round_up(bytesize, POOL_ALIGN);
    if (need < bytesize)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (!valid(pool))
        goto out;
    if (pool->used + need > pool->reserved) {
        unsigned long long grow = round_up(pool->used + need - pool->reserved, POOL_UNIT);
        if (pool->props.maxSize && pool->reserved + grow > pool->props.maxSize) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        if ((rc = fgd_charge(pool->device, grow)) != CUDA_SUCCESS)
            goto out;
        pool->reserved += grow;
        if (pool->reserved > pool->reserved_high)
            pool->reserved_high = pool->reserved;
    }
    void *p = fgd_reserve_pages(need);
    fgd_alloc a = {(uintptr_t)p, bytesize, 0, pool->device, FGD_POOLED, (uintptr_t)pool};
    if (!p || fgd_table_add(&a) != 0) {
        if (p)
            munmap(p, need);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    pool->used += need;
    if (pool->used > pool->used_high)
        pool->used_high = pool->used;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    rc = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult fgd_pool_free(const fgd_alloc *a)
{
    unsigned long long n = round_up(a->size, POOL_ALIGN);
    munmap((void *)a->base, n);
    pthread_mutex_lock(&lock);
    struct CUmemPoolHandle_st *p = (struct CUmemPoolHandle_st *)a->owner;
    p->used = p->used > n ? p->used - n : 0; /* 0 in a forked child freeing its parent's memory */
    if (p->destroyed) /* a destroyed pool lives on until its last allocation is freed */
        shrink(p, 0);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

static struct CUmemPoolHandle_st *pool_of_device(int dev)
{
    pthread_mutex_lock(&lock);
    default_init(dev);
    struct CUmemPoolHandle_st *p = current[dev] ? current[dev] : &defaults[dev];
    pthread_mutex_unlock(&lock);
    return p;
}

FGC_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    FGD_INIT();
    int dev;
    if (!fgd_default_stream(hStream))
        dev = hStream->device;
    else {
        struct CUctx_st *c = fgd_current();
        if (!c)
            return CUDA_ERROR_INVALID_CONTEXT;
        dev = c->device;
    }
    return cuMemAllocFromPoolAsync(dptr, bytesize, pool_of_device(dev), hStream);
}

FGC_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    (void)hStream;
    FGD_INIT();
    fgd_alloc a;
    if (dptr && fgd_table_take(dptr, FGD_POOLED, &a) == 0)
        return fgd_pool_free(&a);
    return cuMemFree_v2(dptr); /* memory from cuMemAlloc may be freed in stream order too */
}

FGC_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    FGD_INIT();
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = fgd_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&lock);
    default_init(dev);
    pthread_mutex_unlock(&lock);
    *pool_out = &defaults[dev];
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    FGD_INIT();
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = fgd_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    *pool = pool_of_device(dev);
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    FGD_INIT();
    CUresult rc = fgd_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&lock);
    rc = valid(pool) && pool->device == dev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        current[dev] = pool;
    pthread_mutex_unlock(&lock);
    return rc;
}

FGC_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    FGD_INIT();
    if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return (CUresult)fgc_refuse("cuda", "cuMemPoolCreate(host location)", CUDA_ERROR_NOT_SUPPORTED);
    if (props->location.id < 0 || (unsigned)props->location.id >= fgd.devs.count)
        return CUDA_ERROR_INVALID_DEVICE;
    if (props->handleTypes & ~(CUmemAllocationHandleType)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->device = props->location.id;
    p->props = *props;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    p->access[p->device] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    pthread_mutex_lock(&lock);
    p->next = created;
    created = p;
    pthread_mutex_unlock(&lock);
    *pool = p;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    FGD_INIT();
    pthread_mutex_lock(&lock);
    /* A device's default pool cannot be destroyed. */
    CUresult rc = valid(pool) && !(pool >= defaults && pool < defaults + FG_MAX_DEVICES) ? CUDA_SUCCESS
                                                                                         : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        pool->destroyed = 1;
        if (current[pool->device] == pool)
            current[pool->device] = NULL;
        shrink(pool, 0);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

FGC_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    FGD_INIT();
    pthread_mutex_lock(&lock);
    int ok = valid(pool);
    if (ok)
        shrink(pool, minBytesToKeep);
    pthread_mutex_unlock(&lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FGC_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    FGD_INIT();
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (!valid(pool))
        goto out;
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *(int *)value != 0;
        rc = CUDA_SUCCESS;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        pool->threshold = *(cuuint64_t *)value;
        rc = CUDA_SUCCESS;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: /* high watermarks can only be reset, to zero */
        if (*(cuuint64_t *)value == 0) {
            pool->reserved_high = pool->reserved;
            rc = CUDA_SUCCESS;
        }
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*(cuuint64_t *)value == 0) {
            pool->used_high = pool->used;
            rc = CUDA_SUCCESS;
        }
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        break; /* read-only */
    default:
        rc = (CUresult)fgc_refuse("cuda", "cuMemPoolSetAttribute(attribute)", CUDA_ERROR_NOT_SUPPORTED);
    }
out:
    pthread_mutex_unlock(&lock);
    return rc;
}

FGC_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    FGD_INIT();
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult rc = valid(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        switch (attr) {
        case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
            *(int *)value = pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
            break;
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = pool->threshold; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = pool->reserved; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = pool->reserved_high; break;
        case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = pool->used; break;
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = pool->used_high; break;
        default: rc = (CUresult)fgc_refuse("cuda", "cuMemPoolGetAttribute(attribute)", CUDA_ERROR_NOT_SUPPORTED);
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

FGC_EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    FGD_INIT();
    if (count && !map)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || map[i].location.id < 0 ||
            (unsigned)map[i].location.id >= fgd.devs.count)
            return CUDA_ERROR_INVALID_DEVICE;
        if (map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&lock);
    CUresult rc = valid(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; rc == CUDA_SUCCESS && i < count; i++)
        pool->access[map[i].location.id] = map[i].flags;
    pthread_mutex_unlock(&lock);
    return rc;
}

FGC_EXPORT CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool, CUmemLocation *location)
{
    FGD_INIT();
    if (!flags || !location)
        return CUDA_ERROR_INVALID_VALUE;
    if (location->type != CU_MEM_LOCATION_TYPE_DEVICE || location->id < 0 ||
        (unsigned)location->id >= fgd.devs.count)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    CUresult rc = valid(memPool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *flags = (CUmemAccess_flags)memPool->access[location->id];
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Graph memory (what allocation nodes of instantiated graphs hold): stream-ordered allocations made while a stream
 * is capturing come from the pool at once here (driver/graph.c records no allocation nodes), so it is always 0. */
static CUresult graph_mem_attr(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    FGD_INIT();
    CUresult rc = fgd_check_device(device);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!value || (attr != CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT && attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH &&
                   attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    CUresult rc = graph_mem_attr(device, attr, value);
    if (rc == CUDA_SUCCESS)
        *(cuuint64_t *)value = 0;
    return rc;
}

FGC_EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    CUresult rc = graph_mem_attr(device, attr, value);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* Only the high watermarks can be set, and only reset to zero. */
    int high = attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH || attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH;
    return high && *(cuuint64_t *)value == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FGC_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device)
{
    FGD_INIT();
    return fgd_check_device(device);
}
