/* Internals of FakeGPU's libcuda.so.1, the core every FakeGPU CUDA library stands on: devices (from the
 * shared device table), contexts, device memory with per-device capacity, streams and events. libcudart,
 * cuBLAS and NCCL call into it through the public driver API, as NVIDIA's runtime does, so one process has one
 * memory account whichever API allocated. Kernels are never executed: launches are recorded. */
#ifndef FGD_H
#define FGD_H

#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fg_devices.h"
#include "fg_log.h"
#include "fgc_unsup.h"

/* A device's facts of its compute capability (profiles/compute_capabilities.yaml, merged into its profile):
 * per-SM and per-block limits (sm_limits), the attributes the catalog names (cuda_attributes: texture and surface
 * limits, capability flags), the persisting-L2 fractions and a new context's limits (context_limits). */
typedef struct {
    unsigned smem_per_sm, smem_per_block, smem_per_block_optin;
    unsigned regs_per_sm, regs_per_block;
    unsigned max_threads_per_sm, max_threads_per_block, max_blocks_per_sm, warp_size;
    int attr[CU_DEVICE_ATTRIBUTE_MAX];
    unsigned char attr_known[CU_DEVICE_ATTRIBUTE_MAX]; /* attr[a] holds the catalog's value */
    double l2_persisting_max, l2_persisting_default;   /* fractions of the L2 */
    size_t limit_default[CU_LIMIT_MAX];
    unsigned char limit_known[CU_LIMIT_MAX]; /* 0: the limit does not exist on this device */
} fgd_limits;

struct CUctx_st {
    int device;
    unsigned flags;
    atomic_int retained; /* primary context reference count (cuDevicePrimaryCtxRetain/Release) */
};

struct CUstream_st {
    int device;
    unsigned flags;
    int priority;
    /* stream capture (driver/graph.c): the graph work is recorded into instead of run, or NULL */
    struct CUgraph_st *capture;
    unsigned long long capture_id;
    int capture_mode;
};

struct CUevent_st {
    int device;
    unsigned flags;
    atomic_llong t_ns; /* host CLOCK_MONOTONIC time of the last record; 0: never recorded */
    atomic_int hung;   /* 1 + the device it was last recorded on, if that was hung (fgd_hang): it never completes */
};

/* What grows a context after its creation, as lazy module loading makes a real one grow (fgd_load_part). */
enum { FGD_PART_FIRST_LAUNCH, FGD_PART_CUBLAS, FGD_PART_CUDNN, FGD_PARTS };

typedef struct {
    unsigned long long total; /* CUDA's total memory of the device; allocations may use it less the context */
    atomic_ullong context;    /* the context's own footprint, charged once the context exists; grows by parts */
    atomic_uint parts;        /* bit per FGD_PART_* the context has grown by */
    atomic_ullong used, peak, allocs, frees;
    atomic_int active; /* a context exists: the process shows on this device in nvidia-smi */
} fgd_mem;

/* What allocations may use on the device now: its total less the context as it stands. */
static inline unsigned long long fgd_capacity(const fgd_mem *m)
{
    unsigned long long context = atomic_load(&m->context);
    return m->total > context ? m->total - context : 0;
}

typedef struct {
    int loaded;
    CUresult load_error; /* what cuInit answers */
    fg_devset devs;              /* the CUDA view: CUDA_VISIBLE_DEVICES applied, MIG slices expanded */
    unsigned board[FG_MAX_DEVICES]; /* per CUDA device, the board's index in the device table (the state's) */
    fgd_limits lim[FG_MAX_DEVICES];
    fgd_mem mem[FG_MAX_DEVICES];
    struct CUctx_st ctx[FG_MAX_DEVICES];
    int driver_version; /* cuDriverGetVersion: 13000 for CUDA 13.0 */
} fgd_world;

FG_HIDDEN extern fgd_world fgd;

/* One entry of the table of device addresses (driver/memory.c), which every pointer lookup consults. */
enum { FGD_DEVICE, FGD_HOST, FGD_MAPPED, FGD_POOLED };
typedef struct {
    uintptr_t base;
    size_t size;    /* requested (a mapping: its length) */
    size_t charged; /* pages charged to the device by this entry: 0 when a handle or a pool owns them */
    int device;
    int kind;    /* FGD_DEVICE cuMemAlloc, FGD_HOST page-locked host memory, FGD_MAPPED a cuMemMap'ped range of a
                    VMM reservation, FGD_POOLED an allocation from a stream-ordered pool (driver/pool.c) */
    uintptr_t owner; /* FGD_MAPPED: the reservation's base (adjacent mappings of one reservation form one range);
                        FGD_POOLED: the pool */
} fgd_alloc;

/* The allocation holding p, copied out; 0 if p is not ours. */
FG_HIDDEN int fgd_lookup(const void *p, fgd_alloc *out);
/* Add an entry / remove the entry starting exactly at base whose kind is `kind` (0 on success). */
FG_HIDDEN int fgd_table_add(const fgd_alloc *a);
FG_HIDDEN int fgd_table_take(uintptr_t base, int kind, fgd_alloc *out);
/* Is any part of [base, base+size) in the table? */
FG_HIDDEN int fgd_table_overlaps(uintptr_t base, size_t size);
/* Capacity of a device: claim `bytes` (CUDA_ERROR_OUT_OF_MEMORY past the capacity; counts an allocation,
 * the peak and republishes the usage) and give them back (counts a free). */
FG_HIDDEN CUresult fgd_charge(int device, size_t bytes);
FG_HIDDEN void fgd_uncharge(int device, size_t bytes);
/* Anonymous MAP_NORESERVE memory (the host RAM of device memory is spent only on pages written). */
FG_HIDDEN void *fgd_reserve_pages(size_t bytes);
/* Stream-ordered pools (driver/pool.c): free a pooled allocation; a synchronization point (pools above their
 * release threshold give memory back). */
FG_HIDDEN CUresult fgd_pool_free(const fgd_alloc *a);
FG_HIDDEN void fgd_pools_synced(void);
FG_HIDDEN void fgd_sync_wait(void); /* driver/stream.c: a synchronisation's yield of the CPU */

/* Load devices once (thread-safe); returns what cuInit returns. */
FG_HIDDEN CUresult fgd_init(void);
FG_HIDDEN CUresult fgd_check_device(CUdevice dev);
/* CUDA_ERROR_UNKNOWN when the CUDA device's GPU fell off the bus (the run's fault board), else CUDA_SUCCESS. */
FG_HIDDEN CUresult fgd_lost(int device);
/* A hung device (an NCCL operation on it waits forever: a fault plan's `nccl: hang`, on this rank or a peer):
 * from now on nothing recorded on it completes, and synchronising with it waits until the process ends, as it
 * does on a GPU whose collective kernel never finishes. fgd_hung: whether it is; fgd_wait_if_hung blocks while
 * it is (forever). */
FG_HIDDEN void fgd_hang(int device);
FG_HIDDEN int fgd_hung(int device);
FG_HIDDEN void fgd_wait_if_hung(int device);
/* The context of the calling thread (or of device 0 when none is current: the runtime's lazy default). */
FG_HIDDEN struct CUctx_st *fgd_current(void);
/* The context is in use: charge its footprint to the device (once). */
FG_HIDDEN void fgd_activate(struct CUctx_st *c);
FG_HIDDEN void fgd_limits_load(void);
/* CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE of a device (the persisting-L2 limit's ceiling). */
FG_HIDDEN size_t fgd_persisting_l2_max(int device);
/* The device's primary context was reset: its limits are the defaults again (driver/limits.c). */
FG_HIDDEN void fgd_limits_reset(int device);
/* A context's bytes on device `d` once created, and what `part` (FGD_PART_*) adds (the workspace profiles). */
FG_HIDDEN unsigned long long fgd_context_bytes(const fg_device *d);
FG_HIDDEN unsigned long long fgd_part_bytes(const fg_device *d, int part);
/* The context of CUDA device `device` grows by `part`, once (the first kernel launch, a library's first run). */
FG_HIDDEN void fgd_load_part(int device, int part);
/* A device's memory usage changed: store it in the process's shared-state file (driver/state.c). */
FG_HIDDEN void fgd_state_changed(int device);
/* Device memory the run's other processes hold on the device (their contexts and allocations, from the shared
 * state) and what memory-pressure faults hold outside the run: one device's memory serves every process on it, as
 * on a real GPU. 0 for a MIG instance. */
FG_HIDDEN unsigned long long fgd_others_used(int device);
/* What NVML's utilization, power, clocks and temperature follow (driver/state.c; fakegpu/shared_state.py): work
 * handed to the device at t0 (fgd_now_ns) that kept the caller until t1 (a copy done here) and needs `dur` ns of
 * the device; compute work (tensor-core math) or, `compute` 0, memory work. */
FG_HIDDEN void fgd_work(int device, int compute, long long t0, long long t1, long long dur);
/* The program waited for the device (a synchronisation, a blocking copy): what was queued after now is taken back. */
FG_HIDDEN void fgd_synced(int device);
/* A kernel of `blocks` blocks was launched now: compute work when it is a stand-in of FakeGPU's cuBLAS or cuDNN math
 * (a cuBLAS one lasting its FLOPs at the board's rate), else memory work of a short kernel. */
FG_HIDDEN void fgd_launch_busy(int device, const char *kernel, unsigned long long blocks);
/* How long the board takes to copy `bytes` from device memory to device memory. */
FG_HIDDEN long long fgd_copy_ns(int device, unsigned long long bytes);
FG_HIDDEN long long fgd_now_ns(void);
/* The last CUDA activity, for `fakegpu run --timeout` (driver/activity.c): `api` and `detail` (a kernel's name,
 * or NULL) must live as long as the process. */
FG_HIDDEN void fgd_activity(const char *api, const char *detail, unsigned long long bytes);

/* The legacy (0, CU_STREAM_LEGACY) and per-thread (CU_STREAM_PER_THREAD) default streams are not objects. */
static inline int fgd_default_stream(CUstream s)
{
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}
/* Copies and fills as the synchronous API does them (driver/memory.c), for work replayed from a graph. */
FG_HIDDEN CUresult fgd_copy(void *dst, const void *src, size_t n, const char *api);
FG_HIDDEN CUresult fgd_fill(CUdeviceptr dst, unsigned value, size_t width, size_t n);
/* [dst, dst + n*width) becomes n copies of the `width` bytes at `pattern`, as a GPU's memset or fill kernel leaves
 * it: host-known in the account of written memory (driver/written.c). An all-zero pattern drops the whole host
 * pages it covers instead of writing them. -1 (nothing done) when accounting mode cannot keep a nonzero pattern
 * in device memory. */
FG_HIDDEN int fgd_set_pattern(uintptr_t dst, const void *pattern, size_t width, size_t n);
/* Stream-ordered work on a capturing stream is recorded into its graph instead of done (driver/graph.c):
 * these return 1 when `s` is capturing and the work was recorded (*rc the result), 0 to do it now. */
FG_HIDDEN int fgd_capture_copy(CUstream s, void *dst, const void *src, size_t n, CUresult *rc);
FG_HIDDEN int fgd_capture_fill(CUstream s, CUdeviceptr dst, unsigned value, size_t width, size_t n, CUresult *rc);
FG_HIDDEN int fgd_capture_host(CUstream s, CUhostFn fn, void *user, CUresult *rc);

#define FGD_INIT()                                                                                                \
    do {                                                                                                          \
        CUresult fgd_rc_ = fgd_init();                                                                            \
        if (fgd_rc_ != CUDA_SUCCESS)                                                                              \
            return fgd_rc_;                                                                                       \
    } while (0)

#endif
