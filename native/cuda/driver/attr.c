/* cuDeviceGetAttribute: every attribute answered from the device's profile. The per-SM limits come from the
 * profile's sm_limits (profiles/compute_capabilities.yaml), read from the same table the devices came from;
 * the fixed CUDA limits (grid and block dimensions, texture sizes) are the same on every board since sm_50. */
#include <stdlib.h>
#include <string.h>

#include "fg_table.h"
#include "fgd.h"

static unsigned field_uint(const fg_record *r, const char *key, unsigned dflt)
{
    const char *v = r ? fg_record_get(r, key) : NULL;
    return v && *v ? (unsigned)strtoul(v, NULL, 10) : dflt;
}

static void fill(fgd_limits *l, const fg_record *r, int cc_major)
{
    l->smem_per_sm = field_uint(r, "sm_limits.shared_memory_per_sm_bytes", 65536);
    l->smem_per_block = field_uint(r, "sm_limits.shared_memory_per_block_bytes", 49152);
    l->smem_per_block_optin = field_uint(r, "sm_limits.shared_memory_per_block_optin_bytes", 49152);
    l->regs_per_sm = field_uint(r, "sm_limits.registers_per_sm", 65536);
    l->regs_per_block = field_uint(r, "sm_limits.registers_per_block", 65536);
    l->max_threads_per_sm = field_uint(r, "sm_limits.max_threads_per_sm", cc_major == 7 ? 1024 : 2048);
    l->max_threads_per_block = field_uint(r, "sm_limits.max_threads_per_block", 1024);
    l->max_blocks_per_sm = field_uint(r, "sm_limits.max_blocks_per_sm", 32);
    l->warp_size = field_uint(r, "sm_limits.warp_size", 32);
}

/* fg_device carries no sm_limits, so read them from the table again: the i-th device record of
 * $FAKEGPU_DEVICE_TABLE, else the catalog record of the device's profile. */
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
        fill(&fgd.lim[i], rec, fgd.devs.dev[i].cc_major);
    }
    if (ok)
        fg_table_free(&t);
}

/* kHz, as the attributes report clocks. */
static int khz(unsigned mhz) { return (int)(mhz * 1000u); }

static int attribute(const fg_device *d, const fgd_limits *l, CUdevice_attribute a, int *v)
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
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: *v = 512; break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = (int)d->sm_count; break;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: *v = strcmp(d->segment, "embedded") == 0; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: *v = CU_COMPUTEMODE_DEFAULT; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH: *v = 131072; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH: *v = 1 << 28; break; /* CUDA 12's maxTexture1DLinear */
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH: *v = 131072; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT: *v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH: *v = 16384; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT: *v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS: *v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: *v = 512; break;
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
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *v = 0; break; /* cuMem{Create,Map} not yet */
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *v = (int)l->max_blocks_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: *v = cc >= 80 ? (int)(d->l2_bytes * 3 / 4) : 0; break;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: *v = cc >= 80 ? 134213632 : 0; break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: *v = cc >= 80 ? 1024 : 0; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *v = 0; break; /* stream-ordered pools not yet */
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: *v = cc >= 90; break;
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT: *v = cc >= 90 ? 4 : 1; break;
    case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED: *v = cc >= 90; break;
    case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID:
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: *v = -1; break;
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID: *v = (int)((d->pci_device_id << 16) | 0x10DE); break;
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID: *v = (int)d->pci_subsystem_id; break;
    default:
        if ((int)a <= 0 || a >= CU_DEVICE_ATTRIBUTE_MAX)
            return 0;
        *v = 0; /* a capability flag we do not model: not supported */
    }
    return 1;
}

FGC_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult rc = fgd_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pi || !attribute(&fgd.devs.dev[dev], &fgd.lim[dev], attrib, pi))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
