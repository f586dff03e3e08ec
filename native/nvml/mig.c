/* MIG device handles: the MIG mode of a board, its MIG devices (one per GPU instance of the layout, each with
 * the one compute instance `nvidia-smi mig -cgi ... -C` makes) and the queries that take a MIG handle.
 *
 * The layout comes from the device table (fg_devices.c places it, as fakegpu/devices/mig.py does); nothing
 * here changes it. A MIG device's memory in use is its processes': the CUDA shims publish each process's use per
 * board with the instance it is in (native/cuda/driver/state.c, fakegpu/shared_state.py). */
#include <stdint.h>

#include "fg_nvml.h"

#define MIB (1ull << 20)

struct nvmlDevice_st fg_mig_handles[FG_MAX_DEVICES][FG_MIG_MAX_INSTANCES];

void fg_mig_handles_init(void)
{
    for (unsigned i = 0; i < FG_MAX_DEVICES; i++)
        for (unsigned k = 0; k < FG_MIG_MAX_INSTANCES; k++) {
            fg_mig_handles[i][k].index = i;
            fg_mig_handles[i][k].mig = k + 1;
        }
}

nvmlReturn_t fg_lookup_any(nvmlDevice_t h, const fg_device **d, const fg_mig_instance **m)
{
    if (!fg_is_initialized())
        return NVML_ERROR_UNINITIALIZED;
    uintptr_t p = (uintptr_t)h, base = (uintptr_t)fg_handles, mbase = (uintptr_t)fg_mig_handles;
    const size_t size = sizeof(struct nvmlDevice_st);
    if (p >= base && p < base + fg_devs.count * size && (p - base) % size == 0) {
        *d = &fg_devs.dev[h->index];
        *m = NULL;
        return fg_fault_lost(h->index) ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
    }
    if (p < mbase || p >= mbase + sizeof fg_mig_handles || (p - mbase) % size)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* A handle for a slot the layout does not fill is as invalid as a stale one on a real host. */
    if (h->index >= fg_devs.count || h->mig == 0 || h->mig > fg_devs.dev[h->index].mig_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *d = &fg_devs.dev[h->index];
    *m = &fg_devs.dev[h->index].mig[h->mig - 1];
    return fg_fault_lost(h->index) ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS; /* its GPU fell off the bus */
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    FG_DEVICE(device, d);
    FG_NEED(currentMode);
    FG_NEED(pendingMode);
    if (!d->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    /* A layout is MIG mode switched on before the container started: nothing is pending. */
    *currentMode = *pendingMode = d->mig_mode ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    FG_DEVICE_OR_MIG(device, d, m);
    (void)d;
    FG_NEED(isMigDevice);
    *isMigDevice = m != NULL;
    return NVML_SUCCESS;
}

/* 0 while MIG mode is off, as the header says and NVIDIA's go-nvml maintainers confirm (NVIDIA/go-nvml#60:
 * "For a GPU with MIG disabled this is 0"). */
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    FG_DEVICE(device, d);
    FG_NEED(count);
    *count = d->mig_supported && d->mig_mode ? (d->mig_max_instances ? d->mig_max_instances : 7) : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice)
{
    FG_DEVICE(device, d);
    FG_NEED(migDevice);
    if (!d->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned max = 0;
    nvmlDeviceGetMaxMigDeviceCount(device, &max);
    /* Past the most the board can hold is a bad index; a slot the layout leaves empty is simply not there,
     * which is how clients find the MIG devices (iterate to the maximum, skip NOT_FOUND). */
    if (index >= max)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= d->mig_count || index >= FG_MIG_MAX_INSTANCES)
        return NVML_ERROR_NOT_FOUND;
    *migDevice = &fg_mig_handles[d->index][index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    FG_DEVICE_OR_MIG(migDevice, d, m);
    FG_NEED(device);
    if (!m)
        return NVML_ERROR_INVALID_ARGUMENT; /* the header: "if migDevice ... is invalid" */
    *device = &fg_handles[d->index];
    return NVML_SUCCESS;
}

/* On a whole GPU these are a valid handle asking a query it does not support. */
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    FG_DEVICE_OR_MIG(device, d, m);
    (void)d;
    FG_NEED(id);
    if (!m)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = m->gi_id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    FG_DEVICE_OR_MIG(device, d, m);
    (void)d;
    FG_NEED(id);
    if (!m)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = m->ci_id;
    return NVML_SUCCESS;
}

/* nvml.h: "This API currently only supports MIG device handles." */
nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    FG_DEVICE_OR_MIG(device, d, m);
    FG_NEED(attributes);
    if (!m)
        return NVML_ERROR_NOT_SUPPORTED;
    const fg_mig_profile *p = &d->mig_board.profiles[m->profile];
    memset(attributes, 0, sizeof *attributes);
    attributes->multiprocessorCount = p->sm_count;
    attributes->sharedCopyEngineCount = p->copy_engines;
    attributes->sharedDecoderCount = p->decoders;
    attributes->sharedEncoderCount = p->encoders;
    attributes->sharedJpegCount = p->jpeg;
    attributes->sharedOfaCount = p->ofa;
    attributes->gpuInstanceSliceCount = p->compute_slices;
    attributes->computeInstanceSliceCount = p->compute_slices; /* the one compute instance spans its GI */
    attributes->memorySizeMB = p->memory_mib;
    return NVML_SUCCESS;
}

/* The pre-v2 symbol old clients bind: same struct. */
nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    return nvmlDeviceGetAttributes_v2(device, attributes);
}

/* The MIG side of nvmlDeviceGetMemoryInfo(_v2) (memory.c): the profile's memory, used by the processes in this
 * instance, nothing reserved. */
void fg_mig_memory(const fg_device *d, const fg_mig_instance *m, unsigned long long *total, unsigned long long *used)
{
    *total = (unsigned long long)d->mig_board.profiles[m->profile].memory_mib * MIB;
    static __thread fg_proc procs[FG_STATE_MAX_PROCS];
    unsigned n = fg_procs_of(d->index, (int)m->gi_id + 1, 0, procs, FG_STATE_MAX_PROCS);
    *used = 0;
    for (unsigned i = 0; i < n; i++)
        *used += procs[i].used_bytes;
    if (*used > *total)
        *used = *total;
}

/* The board's BAR1 split by memory slices, less the MiB the driver keeps: an A100 80GB's 3g.40gb, 2g.20gb and
 * 1g.10gb show 65535, 32767 and 16383 MiB of its 128 GiB, none of it used while idle (the R570 nvidia-smi MIG
 * table in ztouchnetworks/k8s-dra-driver-gpu README.md). */
void fg_mig_bar1(const fg_device *d, const fg_mig_instance *m, unsigned long long parent_total, nvmlBAR1Memory_t *out)
{
    const fg_mig_profile *p = &d->mig_board.profiles[m->profile];
    unsigned slices = d->mig_board.memory_slices ? d->mig_board.memory_slices : 8;
    unsigned long long share = parent_total / slices * p->size;
    out->bar1Total = share > MIB ? share - MIB : share;
    out->bar1Used = 0;
    out->bar1Free = out->bar1Total;
}
