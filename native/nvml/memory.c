/* Framebuffer and BAR1 memory, ECC counters, retired pages and remapped rows. */
#include "fg_nvml.h"

#define MIB (1ull << 20)

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    FG_DEVICE_OR_MIG(device, d, m);
    FG_NEED(memory);
    if (m) {
        fg_mig_memory(d, m, &memory->total, &memory->used);
        memory->free = memory->total > memory->used ? memory->total - memory->used : 0;
        return NVML_SUCCESS;
    }
    fg_usage u;
    fg_usage_of(d->index, &u);
    /* v1 counts the driver's reservation as used (the header says so), which is why v2 exists. */
    unsigned long long used = d->mem_reserved + fg_mem_allocated(d, &u);
    memory->total = d->mem_total;
    memory->used = used;
    memory->free = d->mem_total - used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    FG_DEVICE_OR_MIG(device, d, m);
    FG_NEED(memory);
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (m) {
        fg_mig_memory(d, m, &memory->total, &memory->used);
        memory->reserved = 0;
        memory->free = memory->total > memory->used ? memory->total - memory->used : 0;
        return NVML_SUCCESS;
    }
    fg_usage u;
    fg_usage_of(d->index, &u);
    unsigned long long used = fg_mem_allocated(d, &u);
    memory->total = d->mem_total;
    memory->reserved = d->mem_reserved;
    memory->used = used;
    memory->free = d->mem_total - d->mem_reserved - used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory)
{
    FG_DEVICE_OR_MIG(device, d, m);
    FG_NEED(bar1Memory);
    /* Datacenter boards map the whole framebuffer (next power of two: 128 GiB on an 80 GB board); desktop
     * cards without resizable BAR expose 256 MiB. */
    unsigned long long total = 256 * MIB;
    if (fg_is_datacenter(d))
        while (total < d->mem_total)
            total <<= 1;
    if (m) {
        fg_mig_bar1(d, m, total, bar1Memory);
        return NVML_SUCCESS;
    }
    bar1Memory->bar1Total = total;
    bar1Memory->bar1Used = 2 * MIB;
    bar1Memory->bar1Free = total - 2 * MIB;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device, unsigned int *busWidth)
{
    FG_DEVICE(device, d);
    FG_NEED(busWidth);
    if (!d->mem_bus_width)
        return NVML_ERROR_NOT_SUPPORTED;
    *busWidth = d->mem_bus_width;
    return NVML_SUCCESS;
}

/* Boards without ECC memory answer NOT_SUPPORTED to every ECC query, as real GeForce cards do. */
#define FG_NEED_ECC(d)                                                                                            \
    do {                                                                                                          \
        if (!(d)->ecc)                                                                                            \
            return NVML_ERROR_NOT_SUPPORTED;                                                                      \
    } while (0)

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending)
{
    FG_DEVICE(device, d);
    FG_NEED(current);
    FG_NEED(pending);
    FG_NEED_ECC(d);
    *current = *pending = NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDefaultEccMode(nvmlDevice_t device, nvmlEnableState_t *defaultMode)
{
    FG_DEVICE(device, d);
    FG_NEED(defaultMode);
    FG_NEED_ECC(d);
    *defaultMode = NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}

static int valid_counter(nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter)
{
    return (type == NVML_MEMORY_ERROR_TYPE_CORRECTED || type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED) &&
           (counter == NVML_VOLATILE_ECC || counter == NVML_AGGREGATE_ECC);
}

/* The board's ECC history is the run's fault board: each injected memory Xid (48 double-bit, 94 contained, 95
 * uncontained) is one uncorrectable error in device memory, and a corrected_ecc fault adds its count of
 * correctable ones; both are counted in the volatile and the aggregate counters alike (both start at 0 with the
 * run). */
static unsigned long long uncorrectable(const fg_device *d)
{
    fg_fault_ecc e;
    fg_fault_ecc_of(d->index, &e);
    return (unsigned long long)e.dbe + e.contained + e.uncontained;
}

static unsigned long long ecc_errors(const fg_device *d, nvmlMemoryErrorType_t type)
{
    if (type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
        return uncorrectable(d);
    fg_fault_ecc e;
    fg_fault_ecc_of(d->index, &e);
    return e.corrected;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType, unsigned long long *eccCounts)
{
    FG_DEVICE(device, d);
    FG_NEED(eccCounts);
    if (!valid_counter(errorType, counterType))
        return NVML_ERROR_INVALID_ARGUMENT;
    FG_NEED_ECC(d);
    *eccCounts = ecc_errors(d, errorType);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDetailedEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                            nvmlEccCounterType_t counterType, nvmlEccErrorCounts_t *eccCounts)
{
    FG_DEVICE(device, d);
    FG_NEED(eccCounts);
    if (!valid_counter(errorType, counterType))
        return NVML_ERROR_INVALID_ARGUMENT;
    FG_NEED_ECC(d);
    memset(eccCounts, 0, sizeof *eccCounts);
    eccCounts->deviceMemory = ecc_errors(d, errorType);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                             nvmlEccCounterType_t counterType, nvmlMemoryLocation_t locationType,
                                             unsigned long long *count)
{
    FG_DEVICE(device, d);
    FG_NEED(count);
    if (!valid_counter(errorType, counterType) || (unsigned)locationType >= NVML_MEMORY_LOCATION_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    FG_NEED_ECC(d);
    /* Hopper counts errors in DRAM and SRAM only: a real H200 answers NOT_SUPPORTED for L1, L2, register file,
     * texture, shared memory and CBU. */
    if (d->cc_major >= 9 && locationType != NVML_MEMORY_LOCATION_DRAM && locationType != NVML_MEMORY_LOCATION_SRAM)
        return NVML_ERROR_NOT_SUPPORTED;
    *count = locationType == NVML_MEMORY_LOCATION_DRAM ? ecc_errors(d, errorType) : 0;
    return NVML_SUCCESS;
}

/* Row remapping replaced page retirement with Ampere: from then on the retired-page queries are NOT_SUPPORTED and
 * the remapped-row ones answer. A real H200 (580.159.04) answers so, and the -q -x captures of an A100 (570.148.08),
 * H100 and B200 (580.105.08) and L40S (595.91.07) in NVIDIA/k8s-test-infra show retired pages N/A beside a row
 * remapper, a T4 (Turing) the other way round. */
static int remaps_rows(const fg_device *d) { return d->cc_major >= 8; }

nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                       unsigned int *pageCount, unsigned long long *addresses)
{
    FG_DEVICE(device, d);
    FG_NEED(pageCount);
    (void)addresses;
    if ((unsigned)cause >= NVML_PAGE_RETIREMENT_CAUSE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    FG_NEED_ECC(d);
    if (remaps_rows(d))
        return NVML_ERROR_NOT_SUPPORTED;
    /* A double-bit error retires its page; Xid 63 says the retirement was recorded. */
    fg_fault_ecc e;
    fg_fault_ecc_of(d->index, &e);
    *pageCount = cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? e.recorded : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                          unsigned int *pageCount, unsigned long long *addresses,
                                          unsigned long long *timestamps)
{
    (void)timestamps;
    return nvmlDeviceGetRetiredPages(device, cause, pageCount, addresses);
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending)
{
    FG_DEVICE(device, d);
    FG_NEED(isPending);
    FG_NEED_ECC(d);
    if (remaps_rows(d))
        return NVML_ERROR_NOT_SUPPORTED;
    /* Pending: an uncorrectable error whose retirement is not recorded yet (it is at the next reset). */
    fg_fault_ecc e;
    fg_fault_ecc_of(d->index, &e);
    *isPending = uncorrectable(d) > e.recorded ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                       unsigned int *isPending, unsigned int *failureOccurred)
{
    FG_DEVICE(device, d);
    FG_NEED(corrRows);
    FG_NEED(uncRows);
    FG_NOT_IN_MIG_MODE(d);
    FG_NEED(isPending);
    FG_NEED(failureOccurred);
    if (!d->ecc || !remaps_rows(d))
        return NVML_ERROR_NOT_SUPPORTED;
    /* Ampere and later remap the row of an uncorrectable error at the next reset (pending until then); Xid 63
     * records a remapping, Xid 64 a failure to. */
    fg_fault_ecc e;
    fg_fault_ecc_of(d->index, &e);
    *corrRows = 0;
    *uncRows = e.recorded;
    *isPending = uncorrectable(d) > e.recorded;
    *failureOccurred = e.record_fails > 0;
    return NVML_SUCCESS;
}

/* Nothing remapped is ever deactivated here: every remapping stays active. */
nvmlReturn_t nvmlDeviceGetRemappedRows_v2(nvmlDevice_t device, nvmlRemappedRowsInfo_v2_t *info)
{
    FG_NEED(info);
    unsigned corr = 0, unc = 0, pending = 0, failed = 0;
    nvmlReturn_t rc = nvmlDeviceGetRemappedRows(device, &corr, &unc, &pending, &failed);
    if (rc != NVML_SUCCESS)
        return rc;
    info->corrActiveRemaps = corr;
    info->uncActiveRemaps = unc;
    info->corrInactiveRemaps = info->uncInactiveRemaps = 0;
    info->bPending = pending;
    info->bFailureOccurred = failed;
    return NVML_SUCCESS;
}

/* Banks by how many spare rows they have left: all of them at the maximum on a healthy board (a real H200: 3072 of
 * 3072). A board whose bank count was never measured does not answer. */
nvmlReturn_t nvmlDeviceGetRowRemapperHistogram(nvmlDevice_t device, nvmlRowRemapperHistogramValues_t *values)
{
    FG_DEVICE(device, d);
    FG_NEED(values);
    FG_NOT_IN_MIG_MODE(d);
    if (!d->ecc || !remaps_rows(d) || !d->row_remap_banks)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(values, 0, sizeof *values);
    values->max = d->row_remap_banks;
    return NVML_SUCCESS;
}

/* Confidential computing (Hopper on) is off: no protected memory, and what is unprotected is what CUDA gets (a real
 * H200: 146591680 KiB, its cuDeviceTotalMem). */
nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t device, nvmlConfComputeMemSizeInfo_t *memInfo)
{
    FG_DEVICE(device, d);
    FG_NEED(memInfo);
    if (d->cc_major < 9)
        return NVML_ERROR_NOT_SUPPORTED;
    memInfo->protectedMemSizeKib = 0;
    memInfo->unprotectedMemSizeKib = d->cuda_total / 1024;
    return NVML_SUCCESS;
}

/* SRAM errors by kind and by where they struck, from Ampere on (the A100 570.148.08 and H200 -q -x captures list
 * parity and SEC-DED counts and, on the H200, the uncorrectable sources): the fault board injects none. */
nvmlReturn_t nvmlDeviceGetSramEccErrorStatus(nvmlDevice_t device, nvmlEccSramErrorStatus_t *status)
{
    FG_DEVICE(device, d);
    FG_NEED(status);
    if (status->version != nvmlEccSramErrorStatus_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    FG_NEED_ECC(d);
    if (d->cc_major < 8)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(status, 0, sizeof *status);
    status->version = nvmlEccSramErrorStatus_v1;
    return NVML_SUCCESS;
}

/* No channel or TPC waits for a repair at the next reset: the -q -x captures show both from Ada and Hopper on
 * (L40S, H100, B200, H200), not on an A100 (570.148.08). */
nvmlReturn_t nvmlDeviceGetRepairStatus(nvmlDevice_t device, nvmlRepairStatus_t *repairStatus)
{
    FG_DEVICE(device, d);
    FG_NEED(repairStatus);
    if (repairStatus->version != nvmlRepairStatus_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (d->cc_major * 10 + d->cc_minor < 89)
        return NVML_ERROR_NOT_SUPPORTED;
    repairStatus->bChannelRepairPending = repairStatus->bTpcRepairPending = 0;
    return NVML_SUCCESS;
}

/* Memory beyond repair: none, on a Hopper board as the H200 reports it (an L40S answers N/A). */
nvmlReturn_t nvmlDeviceGetUnrepairableMemoryFlag_v1(nvmlDevice_t device,
                                                    nvmlUnrepairableMemoryStatus_v1_t *unrepairableMemoryStatus)
{
    FG_DEVICE(device, d);
    FG_NEED(unrepairableMemoryStatus);
    if (d->cc_major < 9)
        return NVML_ERROR_NOT_SUPPORTED;
    unrepairableMemoryStatus->bUnrepairableMemory = 0;
    return NVML_SUCCESS;
}
