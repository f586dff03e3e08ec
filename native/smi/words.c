/* The words nvidia-smi prints for NVML's enums: one copy, so the text and XML reports cannot disagree. */
#include "smi.h"

const char *smi_enabled(int on) { return on ? "Enabled" : "Disabled"; }

const char *smi_yes_no(int yes) { return yes ? "Yes" : "No"; }

/* Only the brands the text report has always named; the rest read "NVIDIA", as data-center boards do. */
const char *smi_brand_name(nvmlBrandType_t brand)
{
    switch (brand) {
    case NVML_BRAND_GEFORCE: return "GeForce";
    case NVML_BRAND_TESLA: return "Tesla";
    case NVML_BRAND_NVIDIA_RTX: return "NVIDIA RTX";
    default: return "NVIDIA";
    }
}

const char *smi_architecture_name(nvmlDeviceArchitecture_t arch)
{
    switch (arch) {
    case NVML_DEVICE_ARCH_KEPLER: return "Kepler";
    case NVML_DEVICE_ARCH_MAXWELL: return "Maxwell";
    case NVML_DEVICE_ARCH_PASCAL: return "Pascal";
    case NVML_DEVICE_ARCH_VOLTA: return "Volta";
    case NVML_DEVICE_ARCH_TURING: return "Turing";
    case NVML_DEVICE_ARCH_AMPERE: return "Ampere";
    case NVML_DEVICE_ARCH_ADA: return "Ada Lovelace";
    case NVML_DEVICE_ARCH_HOPPER: return "Hopper";
    case NVML_DEVICE_ARCH_BLACKWELL: return "Blackwell";
    default: return "N/A";
    }
}

const char *smi_virtualization_name(nvmlGpuVirtualizationMode_t mode)
{
    switch (mode) {
    case NVML_GPU_VIRTUALIZATION_MODE_NONE: return "None";
    case NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH: return "Pass-Through";
    case NVML_GPU_VIRTUALIZATION_MODE_VGPU: return "VGPU";
    case NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU: return "Host VGPU";
    case NVML_GPU_VIRTUALIZATION_MODE_HOST_VSGA: return "Host VSGA";
    default: return "N/A";
    }
}

const char *smi_compute_mode_name(nvmlComputeMode_t mode)
{
    switch (mode) {
    case NVML_COMPUTEMODE_DEFAULT: return "Default";
    case NVML_COMPUTEMODE_EXCLUSIVE_THREAD: return "Exclusive_Thread";
    case NVML_COMPUTEMODE_PROHIBITED: return "Prohibited";
    case NVML_COMPUTEMODE_EXCLUSIVE_PROCESS: return "Exclusive_Process";
    default: return "N/A";
    }
}
