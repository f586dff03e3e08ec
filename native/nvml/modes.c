/* Operating modes: compute, persistence, display, MIG, virtualization, accounting. */
#include "fg_nvml.h"

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    FG_DEVICE(device, d);
    (void)d;
    FG_NEED(mode);
    *mode = NVML_COMPUTEMODE_DEFAULT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    FG_DEVICE(device, d);
    FG_NEED(mode);
    /* Datacenter nodes run nvidia-persistenced; desktops do not. */
    *mode = fg_is_datacenter(d) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *display)
{
    FG_DEVICE(device, d);
    (void)d;
    FG_NEED(display);
    *display = NVML_FEATURE_DISABLED; /* no monitor on a fake GPU */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t *isActive)
{
    return nvmlDeviceGetDisplayMode(device, isActive);
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    FG_DEVICE(device, d);
    FG_NEED(currentMode);
    FG_NEED(pendingMode);
    if (!d->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = *pendingMode = NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    FG_DEVICE(device, d);
    (void)d;
    FG_NEED(isMigDevice);
    *isMigDevice = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    FG_DEVICE(device, d);
    FG_NEED(count);
    *count = d->mig_supported ? (d->mig_max_instances ? d->mig_max_instances : 7) : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, nvmlGpuVirtualizationMode_t *pVirtualMode)
{
    FG_DEVICE(device, d);
    (void)d;
    FG_NEED(pVirtualMode);
    *pVirtualMode = NVML_GPU_VIRTUALIZATION_MODE_NONE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    FG_DEVICE(device, d);
    (void)d;
    FG_NEED(mode);
    *mode = NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}
