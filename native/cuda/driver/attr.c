/* cuDeviceGetAttribute: every attribute answered from the device's profile. What its compute capability fixes
 * comes from the catalog (profiles/compute_capabilities.yaml, compiled into each profile and read here from the
 * same table the devices came from): the per-SM limits (sm_limits), the texture and surface limits and the
 * capability flags (cuda_attributes, keyed by attribute name), the persisting-L2 fractions and a new context's
 * limits. The rest is computed here from the board (clocks, memory, PCI ids) or is the same on every board. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_table.h"
#include "fgd.h"

/* The attributes the catalog names, by their CU_DEVICE_ATTRIBUTE_ suffix (the catalog's key in lower case). A
 * name here that cuda.h lacks does not compile; tests check that every catalog key is listed. */
#define FGD_TEXTURE_ATTRIBUTES(X) \
    X(TEXTURE_ALIGNMENT) X(SURFACE_ALIGNMENT) X(TEXTURE_PITCH_ALIGNMENT) X(CAN_TEX2D_GATHER) \
    X(MAXIMUM_TEXTURE1D_WIDTH) X(MAXIMUM_TEXTURE1D_LINEAR_WIDTH) X(MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH) \
    X(MAXIMUM_TEXTURE1D_LAYERED_WIDTH) X(MAXIMUM_TEXTURE1D_LAYERED_LAYERS) X(MAXIMUM_TEXTURE2D_WIDTH) \
    X(MAXIMUM_TEXTURE2D_HEIGHT) X(MAXIMUM_TEXTURE2D_LINEAR_WIDTH) X(MAXIMUM_TEXTURE2D_LINEAR_HEIGHT) \
    X(MAXIMUM_TEXTURE2D_LINEAR_PITCH) X(MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH) X(MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT) \
    X(MAXIMUM_TEXTURE2D_GATHER_WIDTH) X(MAXIMUM_TEXTURE2D_GATHER_HEIGHT) X(MAXIMUM_TEXTURE2D_LAYERED_WIDTH) \
    X(MAXIMUM_TEXTURE2D_LAYERED_HEIGHT) X(MAXIMUM_TEXTURE2D_LAYERED_LAYERS) X(MAXIMUM_TEXTURE3D_WIDTH) \
    X(MAXIMUM_TEXTURE3D_HEIGHT) X(MAXIMUM_TEXTURE3D_DEPTH) X(MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE) \
    X(MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE) X(MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE) X(MAXIMUM_TEXTURECUBEMAP_WIDTH) \
    X(MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH) X(MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS) X(MAXIMUM_SURFACE1D_WIDTH) \
    X(MAXIMUM_SURFACE1D_LAYERED_WIDTH) X(MAXIMUM_SURFACE1D_LAYERED_LAYERS) X(MAXIMUM_SURFACE2D_WIDTH) \
    X(MAXIMUM_SURFACE2D_HEIGHT) X(MAXIMUM_SURFACE2D_LAYERED_WIDTH) X(MAXIMUM_SURFACE2D_LAYERED_HEIGHT) \
    X(MAXIMUM_SURFACE2D_LAYERED_LAYERS) X(MAXIMUM_SURFACE3D_WIDTH) X(MAXIMUM_SURFACE3D_HEIGHT) \
    X(MAXIMUM_SURFACE3D_DEPTH) X(MAXIMUM_SURFACECUBEMAP_WIDTH) X(MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH) \
    X(MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS)
#define FGD_FLAG_ATTRIBUTES(X) \
    X(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) X(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) \
    X(GENERIC_COMPRESSION_SUPPORTED) X(MAX_ACCESS_POLICY_WINDOW_SIZE) X(GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED) \
    X(SPARSE_CUDA_ARRAY_SUPPORTED) X(READ_ONLY_HOST_REGISTER_SUPPORTED) X(TIMELINE_SEMAPHORE_INTEROP_SUPPORTED) \
    X(MEMORY_POOLS_SUPPORTED) X(GPU_DIRECT_RDMA_SUPPORTED) X(GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS) \
    X(GPU_DIRECT_RDMA_WRITES_ORDERING) X(MEMPOOL_SUPPORTED_HANDLE_TYPES) X(CLUSTER_LAUNCH) \
    X(DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED) X(CAN_USE_64_BIT_STREAM_MEM_OPS) X(CAN_USE_STREAM_WAIT_VALUE_NOR) \
    X(DMA_BUF_SUPPORTED) X(IPC_EVENT_SUPPORTED) X(MEM_SYNC_DOMAIN_COUNT) X(TENSOR_MAP_ACCESS_SUPPORTED) \
    X(HANDLE_TYPE_FABRIC_SUPPORTED) X(UNIFIED_FUNCTION_POINTERS) X(HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) \
    X(HOST_NUMA_MEMORY_POOLS_SUPPORTED) X(HOST_MEMORY_POOLS_SUPPORTED) X(HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)

static const struct {
    CUdevice_attribute id;
    const char *name;
} catalog_attributes[] = {
#define X(n) {CU_DEVICE_ATTRIBUTE_##n, #n},
    FGD_TEXTURE_ATTRIBUTES(X) FGD_FLAG_ATTRIBUTES(X)
#undef X
};

/* The context limits a compute capability's row gives, by CUlimit. The printf FIFO is given per SM. */
static const struct {
    CUlimit id;
    const char *key;
} catalog_limits[] = {
    {CU_LIMIT_STACK_SIZE, "context_limits.stack_size"},
    {CU_LIMIT_PRINTF_FIFO_SIZE, "context_limits.printf_fifo_size_per_sm"},
    {CU_LIMIT_MALLOC_HEAP_SIZE, "context_limits.malloc_heap_size"},
    {CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, "context_limits.dev_runtime_sync_depth"},
    {CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, "context_limits.dev_runtime_pending_launch_count"},
    {CU_LIMIT_MAX_L2_FETCH_GRANULARITY, "context_limits.max_l2_fetch_granularity"},
};

/* The last attribute the driver of CUDA 13.0 knows: driver 580.159.04 answers CUDA_ERROR_INVALID_VALUE for
 * 148 (CU_DEVICE_ATTRIBUTE_ATOMIC_REDUCTION_SUPPORTED, new in a later 13.x) and above
 * (tests/data/gpu/h200/driver.json). A driver of an earlier CUDA knows none of them either. */
#define FGD_CUDA_13_0 13000
#define FGD_LAST_ATTRIBUTE_13_0 147

static const char *field(const fg_record *r, const char *key)
{
    const char *v = r ? fg_record_get(r, key) : NULL;
    return v && *v ? v : NULL;
}

static unsigned field_uint(const fg_record *r, const char *key, unsigned dflt)
{
    const char *v = field(r, key);
    return v ? (unsigned)strtoul(v, NULL, 10) : dflt;
}

static void fill_catalog(fgd_limits *l, const fg_record *r)
{
    char key[128];
    for (size_t i = 0; i < sizeof catalog_attributes / sizeof catalog_attributes[0]; i++) {
        int n = snprintf(key, sizeof key, "cuda_attributes.%s", catalog_attributes[i].name);
        for (char *p = key + n - strlen(catalog_attributes[i].name); *p; p++)
            *p = (char)tolower((unsigned char)*p);
        const char *v = field(r, key);
        if (v) {
            l->attr[catalog_attributes[i].id] = (int)strtol(v, NULL, 10);
            l->attr_known[catalog_attributes[i].id] = 1;
        }
    }
    const char *max = field(r, "l2_persisting.max_fraction"), *dflt = field(r, "l2_persisting.default_fraction");
    l->l2_persisting_max = max ? strtod(max, NULL) : 0;
    l->l2_persisting_default = dflt ? strtod(dflt, NULL) : 0;
    for (size_t i = 0; i < sizeof catalog_limits / sizeof catalog_limits[0]; i++) {
        const char *v = field(r, catalog_limits[i].key);
        if (v) {
            l->limit_default[catalog_limits[i].id] = (size_t)strtoull(v, NULL, 10);
            l->limit_known[catalog_limits[i].id] = 1;
        }
    }
}

static void fill(fgd_limits *l, const fg_record *r, const fg_device *d)
{
    l->smem_per_sm = field_uint(r, "sm_limits.shared_memory_per_sm_bytes", 65536);
    l->smem_per_block = field_uint(r, "sm_limits.shared_memory_per_block_bytes", 49152);
    l->smem_per_block_optin = field_uint(r, "sm_limits.shared_memory_per_block_optin_bytes", 49152);
    l->regs_per_sm = field_uint(r, "sm_limits.registers_per_sm", 65536);
    l->regs_per_block = field_uint(r, "sm_limits.registers_per_block", 65536);
    l->max_threads_per_sm = field_uint(r, "sm_limits.max_threads_per_sm", d->cc_major == 7 ? 1024 : 2048);
    l->max_threads_per_block = field_uint(r, "sm_limits.max_threads_per_block", 1024);
    l->max_blocks_per_sm = field_uint(r, "sm_limits.max_blocks_per_sm", 32);
    l->warp_size = field_uint(r, "sm_limits.warp_size", 32);
    fill_catalog(l, r);
    l->limit_default[CU_LIMIT_PRINTF_FIFO_SIZE] *= d->sm_count;
    /* The persisting-L2 limit exists where a set-aside does (cc 8.0 on): a TU104 (cc 7.5) answers a set with
     * "limit is not supported on this architecture", CUDA_ERROR_UNSUPPORTED_LIMIT (public notes of a user). */
    l->limit_default[CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = (size_t)(l->l2_persisting_default * (double)d->l2_bytes);
    l->limit_known[CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = l->l2_persisting_max > 0;
}

/* fg_device carries none of the compute capability's facts, so read them from the table again: the i-th device
 * record of $FAKEGPU_DEVICE_TABLE, else the catalog record of the device's profile. */
void fgd_limits_load(void)
{
    char err[256], path[1024];
    fg_table t;
    const char *table = getenv("FAKEGPU_DEVICE_TABLE");
    int from_table = table && *table;
    int ok = fg_table_read(from_table ? table : fg_catalog_path(path, sizeof path), &t, err, sizeof err) ==
             FG_TABLE_OK;
    for (unsigned i = 0; i < fgd.devs.count; i++) {
        const fg_record *rec = NULL;
        if (ok && from_table && i < t.nrecords)
            rec = &t.records[i];
        else if (ok)
            for (size_t k = 0; k < t.nrecords && !rec; k++) {
                const char *id = fg_record_get(&t.records[k], "id");
                if (id && strcmp(id, fgd.devs.dev[i].profile) == 0)
                    rec = &t.records[k];
            }
        fill(&fgd.lim[i], rec, &fgd.devs.dev[i]);
    }
    if (ok)
        fg_table_free(&t);
}

size_t fgd_persisting_l2_max(int device)
{
    return (size_t)(fgd.lim[device].l2_persisting_max * (double)fgd.devs.dev[device].l2_bytes);
}

/* kHz, as the attributes report clocks. */
static int khz(unsigned mhz) { return (int)(mhz * 1000u); }

/* Is `a` an attribute the driver we stand in for knows? */
static int known_to_driver(int a)
{
    if (a <= 0 || a >= CU_DEVICE_ATTRIBUTE_MAX)
        return 0;
    return fgd.driver_version > FGD_CUDA_13_0 || a <= FGD_LAST_ATTRIBUTE_13_0;
}

/* What the catalog does not give: the board's own numbers and the facts the same on every board. */
static int computed(const fg_device *d, const fgd_limits *l, int device, CUdevice_attribute a, int *v)
{
    int cc = d->cc_major * 10 + d->cc_minor;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = (int)l->max_threads_per_block; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = (int)l->smem_per_block; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = (int)l->warp_size; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: *v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *v = (int)l->regs_per_block; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = khz(d->clock_boost_mhz); break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = (int)d->sm_count; break;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: *v = strcmp(d->segment, "embedded") == 0; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: *v = CU_COMPUTEMODE_DEFAULT; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: *v = d->ecc; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *v = (int)d->pci_bus; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *v = (int)d->pci_dev; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *v = (int)d->pci_domain; break;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *v = khz(d->clock_mem_mhz); break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *v = (int)d->mem_bus_width; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = (int)d->l2_bytes; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = (int)l->max_threads_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *v = strcmp(d->segment, "datacenter") == 0 ? 3 : 2; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = d->cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = d->cc_minor; break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = (int)l->smem_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *v = (int)l->regs_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: *v = (int)d->index; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: *v = cc == 60 || cc == 70 || cc == 80 || cc == 90 || cc == 100 ? 2 : 32; break;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = (int)l->smem_per_block_optin; break;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *v = (int)l->max_blocks_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: *v = (int)fgd_persisting_l2_max(device); break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: *v = cc >= 80 ? 1024 : 0; break;
    case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID: *v = -1; break; /* the GPU's memory is no NUMA node of the host */
    /* The host's node nearest the GPU: -1 only on a kernel without NUMA, and Linux has node 0 otherwise (the
     * H200's host answered 0). */
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID: *v = (int)((d->pci_device_id << 16) | 0x10DE); break;
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID: *v = (int)d->pci_subsystem_id; break;
    default: *v = 0; /* a capability flag we do not model: not supported */
    }
    return 1;
}

static int attribute(int device, CUdevice_attribute a, int *v)
{
    if (!known_to_driver((int)a))
        return 0;
    const fgd_limits *l = &fgd.lim[device];
    if (l->attr_known[a]) {
        *v = l->attr[a];
        return 1;
    }
    return computed(&fgd.devs.dev[device], l, device, a, v);
}

FGC_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult rc = fgd_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pi || !attribute(dev, attrib, pi))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
