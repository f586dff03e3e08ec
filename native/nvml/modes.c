/* Operating modes: compute, persistence, display, virtualization, accounting (MIG mode: mig.c). */
#include "fg_nvml.h"

/* nvml.h: on a MIG-enabled GPU the compute mode is a MIG device's, so MIG handles are taken. */
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    FG_DEVICE_OR_MIG(device, d, m);
    (void)d;
    (void)m;
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

/* Processes accounting keeps, the same on every -q -x capture of a current driver (4000: a real H200, and the A100,
 * H100, B200, L40S and T4 captures in NVIDIA/k8s-test-infra). */
nvmlReturn_t nvmlDeviceGetAccountingBufferSize(nvmlDevice_t device, unsigned int *bufferSize)
{
    FG_DEVICE(device, d);
    (void)d;
    FG_NEED(bufferSize);
    *bufferSize = 4000;
    return NVML_SUCCESS;
}
