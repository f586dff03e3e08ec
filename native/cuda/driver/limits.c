/* cuCtxGetLimit / cuCtxSetLimit: a context's resource limits. A new context starts from its device's defaults
 * (the compute capability's context_limits in profiles/compute_capabilities.yaml, read by driver/attr.c), and a
 * set value holds until the primary context is reset.
 *
 * cuda.h documents what a set does: the driver may clamp or round the request to what the hardware allows, the
 * caller reads back what it got. Clamped here where the documentation gives the bound: the device runtime's sync
 * depth to 24 levels, the L2 fetch granularity to 128 bytes, the persisting-L2 size to the device's set-aside
 * maximum. The sync depth exists below cc 9.0 only: CUDA_ERROR_UNSUPPORTED_LIMIT from 9.0 on (documented, and
 * what an H200 answers). Not modelled: the device memory a larger stack, heap or launch count reserves, and the
 * CUDA_ERROR_INVALID_VALUE for a printf FIFO or heap resized after a kernel that uses them ran (kernels never run
 * here). The CIG limits belong to contexts FakeGPU cannot create: no context here is CIG-enabled. */
#include <pthread.h>

#include "fgd.h"

#define FGD_MAX_SYNC_DEPTH 24
#define FGD_MAX_L2_FETCH_GRANULARITY 128

static size_t value[FG_MAX_DEVICES][CU_LIMIT_MAX];
static unsigned char set[FG_MAX_DEVICES][CU_LIMIT_MAX];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

void fgd_limits_reset(int device)
{
    pthread_mutex_lock(&lock);
    for (int l = 0; l < CU_LIMIT_MAX; l++)
        set[device][l] = 0;
    pthread_mutex_unlock(&lock);
}

/* CUDA_SUCCESS if `limit` exists on the context's device; what to answer otherwise. */
static CUresult check(int device, CUlimit limit, int setting)
{
    if ((int)limit < 0 || limit >= CU_LIMIT_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (limit == CU_LIMIT_CIG_ENABLED && !setting)
        return CUDA_SUCCESS;
    if (limit == CU_LIMIT_SHMEM_SIZE || limit == CU_LIMIT_CIG_ENABLED || limit == CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED)
        return (CUresult)fgc_refuse("cuda", "cuCtxGetLimit/cuCtxSetLimit(CIG limit)", CUDA_ERROR_NOT_SUPPORTED);
    return fgd.lim[device].limit_known[limit] ? CUDA_SUCCESS : CUDA_ERROR_UNSUPPORTED_LIMIT;
}

static size_t clamped(int device, CUlimit limit, size_t v)
{
    size_t max = limit == CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH      ? FGD_MAX_SYNC_DEPTH
                 : limit == CU_LIMIT_MAX_L2_FETCH_GRANULARITY  ? FGD_MAX_L2_FETCH_GRANULARITY
                 : limit == CU_LIMIT_PERSISTING_L2_CACHE_SIZE ? fgd_persisting_l2_max(device)
                                                               : (size_t)-1;
    return v < max ? v : max;
}

FGC_EXPORT CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    FGD_INIT();
    struct CUctx_st *c = fgd_current();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!pvalue)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = check(c->device, limit, 0);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (limit == CU_LIMIT_CIG_ENABLED) {
        *pvalue = 0;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&lock);
    *pvalue = set[c->device][limit] ? value[c->device][limit] : fgd.lim[c->device].limit_default[limit];
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

FGC_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t v)
{
    FGD_INIT();
    struct CUctx_st *c = fgd_current();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult rc = check(c->device, limit, 1);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&lock);
    value[c->device][limit] = clamped(c->device, limit, v);
    set[c->device][limit] = 1;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}
