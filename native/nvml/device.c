/* Device handles and identity: lookup by index/UUID/PCI bus id/serial, name, UUID, serial, brand, ... */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "fg_nvml.h"

static nvmlDevice_t handle_at(unsigned i) { return &fg_handles[i]; }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!fg_is_initialized())
        return NVML_ERROR_UNINITIALIZED;
    FG_NEED(device);
    if (index >= fg_devs.count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (fg_fault_lost(index)) /* fallen off the bus: the driver hands out no handle for it */
        return NVML_ERROR_GPU_IS_LOST;
    *device = handle_at(index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

typedef int (*match_fn)(const fg_device *d, const char *key);

static nvmlReturn_t find(const char *key, nvmlDevice_t *device, match_fn match)
{
    if (!fg_is_initialized())
        return NVML_ERROR_UNINITIALIZED;
    FG_NEED(key);
    FG_NEED(device);
    for (unsigned i = 0; i < fg_devs.count; i++)
        if (match(&fg_devs.dev[i], key)) {
            if (fg_fault_lost(i))
                return NVML_ERROR_GPU_IS_LOST;
            *device = handle_at(i);
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

static int match_uuid(const fg_device *d, const char *key) { return strcasecmp(d->uuid, key) == 0; }
static int match_serial(const fg_device *d, const char *key) { return strcmp(d->serial, key) == 0; }

/* NVML accepts "domain:bus:device.function" with 4- or 8-digit domains and "bus:device.function". */
static int match_bus_id(const fg_device *d, const char *key)
{
    unsigned dom = 0, bus = 0, dev = 0, fn = 0;
    char tail;
    if (sscanf(key, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4) {
        dom = 0;
        fn = 0;
        if (sscanf(key, "%x:%x.%x%c", &bus, &dev, &fn, &tail) != 3)
            return 0;
    }
    return dom == d->pci_domain && bus == d->pci_bus && dev == d->pci_dev && fn == d->pci_function;
}

/* A MIG- UUID names a MIG device (nvml.h: "The UUID of the target GPU or MIG instance"). */
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    nvmlReturn_t rc = find(uuid, device, match_uuid);
    if (rc != NVML_ERROR_NOT_FOUND)
        return rc;
    for (unsigned i = 0; i < fg_devs.count; i++)
        for (unsigned k = 0; k < fg_devs.dev[i].mig_count && k < FG_MIG_MAX_INSTANCES; k++)
            if (strcasecmp(fg_devs.dev[i].mig[k].uuid, uuid) == 0) {
                *device = &fg_mig_handles[i][k];
                return NVML_SUCCESS;
            }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device)
{
    return find(serial, device, match_serial);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    return find(pciBusId, device, match_bus_id);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    FG_DEVICE_OR_MIG(device, d, m);
    if (m) {
        char buf[128];
        fg_mig_device_name(d->name, &d->mig_board.profiles[m->profile], buf, sizeof buf);
        return fg_copy_out(name, length, buf);
    }
    return fg_copy_out(name, length, d->name);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    FG_DEVICE_OR_MIG(device, d, m);
    return fg_copy_out(uuid, length, m ? m->uuid : d->uuid);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    FG_DEVICE(device, d);
    if (!d->serial[0])
        return NVML_ERROR_NOT_SUPPORTED;
    return fg_copy_out(serial, length, d->serial);
}

nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length)
{
    FG_DEVICE(device, d);
    /* Real part numbers look like 692-2G506-0210-002; ours keep the shape and carry the PCI device id. */
    char buf[32];
    snprintf(buf, sizeof buf, "699-2G%03X-0200-A%u", d->pci_device_id & 0xFFF, d->cc_major);
    return fg_copy_out(partNumber, length, buf);
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    FG_DEVICE(device, d);
    FG_NEED(type);
    if (!strcmp(d->segment, "consumer"))
        *type = strstr(d->name, "TITAN") ? NVML_BRAND_TITAN : NVML_BRAND_GEFORCE;
    else if (!strcmp(d->segment, "workstation"))
        *type = NVML_BRAND_NVIDIA_RTX;
    else if (!strcmp(d->architecture, "pascal") || !strcmp(d->architecture, "volta") ||
             !strcmp(d->architecture, "maxwell"))
        *type = NVML_BRAND_TESLA;
    else
        *type = NVML_BRAND_NVIDIA;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    FG_DEVICE(device, d);
    FG_NEED(arch);
    static const struct {
        const char *name;
        unsigned value;
    } archs[] = {{"maxwell", NVML_DEVICE_ARCH_MAXWELL}, {"pascal", NVML_DEVICE_ARCH_PASCAL},
                 {"volta", NVML_DEVICE_ARCH_VOLTA},     {"turing", NVML_DEVICE_ARCH_TURING},
                 {"ampere", NVML_DEVICE_ARCH_AMPERE},   {"ada", NVML_DEVICE_ARCH_ADA},
                 {"hopper", NVML_DEVICE_ARCH_HOPPER},   {"blackwell", NVML_DEVICE_ARCH_BLACKWELL}};
    *arch = NVML_DEVICE_ARCH_UNKNOWN;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(d->architecture, archs[i].name))
            *arch = archs[i].value;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    FG_DEVICE(device, d);
    FG_NEED(major);
    FG_NEED(minor);
    *major = d->cc_major;
    *minor = d->cc_minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    FG_DEVICE(device, d);
    FG_NEED(minorNumber);
    *minorNumber = d->minor_number;
    return NVML_SUCCESS;
}

/* nvml.h: on a MIG handle, the index nvmlDeviceGetMigDeviceHandleByIndex takes back. */
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    FG_DEVICE_OR_MIG(device, d, m);
    FG_NEED(index);
    *index = m ? m->index : d->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBoardId(nvmlDevice_t device, unsigned int *boardId)
{
    FG_DEVICE(device, d);
    FG_NEED(boardId);
    /* Real board ids encode the PCI location; one GPU per board. */
    *boardId = d->pci_domain << 16 | d->pci_bus << 8;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMultiGpuBoard(nvmlDevice_t device, unsigned int *multiGpuBool)
{
    FG_DEVICE(device, d);
    FG_NEED(multiGpuBool);
    *multiGpuBool = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceOnSameBoard(nvmlDevice_t device1, nvmlDevice_t device2, int *onSameBoard)
{
    FG_DEVICE(device1, a);
    FG_DEVICE(device2, b);
    FG_NEED(onSameBoard);
    *onSameBoard = a == b;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int *numCores)
{
    FG_DEVICE(device, d);
    FG_NEED(numCores);
    FG_NOT_IN_MIG_MODE(d);
    if (!d->cuda_cores)
        return NVML_ERROR_NOT_SUPPORTED;
    *numCores = d->cuda_cores;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    FG_DEVICE(device, d);
    char buf[32];
    return fg_copy_out(version, length, fg_vbios_version(d, 1, buf, sizeof buf));
}

nvmlReturn_t nvmlDeviceGetInforomVersion(nvmlDevice_t device, nvmlInforomObject_t object, char *version,
                                         unsigned int length)
{
    FG_DEVICE(device, d);
    const char *v;
    switch (object) {
    case NVML_INFOROM_OEM: v = "2.1"; break;
    case NVML_INFOROM_ECC: v = d->ecc ? "6.16" : NULL; break;
    case NVML_INFOROM_POWER: v = NULL; break; /* datacenter boards since Ampere report N/A here */
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!v)
        return NVML_ERROR_NOT_SUPPORTED;
    return fg_copy_out(version, length, v);
}

nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    FG_DEVICE(device, d);
    char buf[32];
    snprintf(buf, sizeof buf, "G%03X.0200.00.03", d->pci_device_id & 0xFFF);
    return fg_copy_out(version, length, buf);
}

nvmlReturn_t nvmlDeviceGetInforomConfigurationChecksum(nvmlDevice_t device, unsigned int *checksum)
{
    FG_DEVICE(device, d);
    FG_NEED(checksum);
    unsigned h = 2166136261u; /* FNV-1a of the UUID: stable per device */
    for (const char *p = d->uuid; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    *checksum = h;
    return NVML_SUCCESS;
}

/* GSP firmware runs the board from Turing on, on by default, its version the driver's: a real H200 (580.159.04)
 * answers enabled/enabled and 580.159.04, and the A100 (570.148.08) and T4 (595.91.07) -q -x captures in
 * NVIDIA/k8s-test-infra show their driver's version too. */
static int has_gsp(const fg_device *d) { return d->cc_major * 10 + d->cc_minor >= 75; }

nvmlReturn_t nvmlDeviceGetGspFirmwareMode(nvmlDevice_t device, unsigned int *isEnabled, unsigned int *defaultMode)
{
    FG_DEVICE(device, d);
    FG_NEED(isEnabled);
    FG_NEED(defaultMode);
    if (!has_gsp(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *isEnabled = *defaultMode = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGspFirmwareVersion(nvmlDevice_t device, char *version)
{
    FG_DEVICE(device, d);
    FG_NEED(version);
    if (!has_gsp(d))
        return NVML_ERROR_NOT_SUPPORTED;
    return fg_copy_out(version, NVML_GSP_FIRMWARE_VERSION_BUF_SIZE, fg_cfg.driver_version);
}

/* Every discrete board, SXM ones included, talks to the host over PCIe (2 on a real H200); integrated GPUs have
 * no PCI function to report. */
nvmlReturn_t nvmlDeviceGetBusType(nvmlDevice_t device, nvmlBusType_t *type)
{
    FG_DEVICE(device, d);
    FG_NEED(type);
    if (!strcmp(d->segment, "embedded"))
        return NVML_ERROR_NOT_SUPPORTED;
    *type = NVML_BUS_TYPE_PCIE;
    return NVML_SUCCESS;
}

/* The board's place in the node, counted from 1: a real H200 in a VM reported the SXM slot it sat in (3), single
 * PCIe boards report 1 (the L40S and T4 captures in NVIDIA/k8s-test-infra). */
nvmlReturn_t nvmlDeviceGetModuleId(nvmlDevice_t device, unsigned int *moduleId)
{
    FG_DEVICE(device, d);
    FG_NEED(moduleId);
    *moduleId = d->index + 1;
    return NVML_SUCCESS;
}

/* FakeGPU keeps no InfoROM to corrupt: it checks out, as a real H200's does (inforom.checksum_validation valid). */
nvmlReturn_t nvmlDeviceValidateInforom(nvmlDevice_t device)
{
    FG_DEVICE(device, d);
    (void)d;
    return NVML_SUCCESS;
}

/* Neither HMM nor ATS: the fake's device memory is never the process's own (a real H200 in a VM reports None; a
 * host whose kernel has HMM reports HMM). */
nvmlReturn_t nvmlDeviceGetAddressingMode(nvmlDevice_t device, nvmlDeviceAddressingMode_t *mode)
{
    FG_DEVICE(device, d);
    (void)d;
    FG_NEED(mode);
    if (mode->version != nvmlDeviceAddressingMode_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    mode->value = NVML_DEVICE_ADDRESSING_MODE_NONE;
    return NVML_SUCCESS;
}

/* Where the board sits, as a machine outside a rack-scale NVLink domain reports it (a real H200: host 1, slot and
 * tray 0, no chassis serial or InfiniBand GUID, module id as nvmlDeviceGetModuleId). */
nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t device, nvmlPlatformInfo_t *platformInfo)
{
    FG_DEVICE(device, d);
    FG_NEED(platformInfo);
    if (platformInfo->version != nvmlPlatformInfo_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memset(platformInfo, 0, sizeof *platformInfo);
    platformInfo->version = nvmlPlatformInfo_v2;
    platformInfo->hostId = 1;
    platformInfo->moduleId = (unsigned char)(d->index + 1);
    return NVML_SUCCESS;
}

/* Extended GPU memory needs a Grace CPU's: no board here has it, as every captured board shows (egm disabled). */
nvmlReturn_t nvmlDeviceGetCapabilities(nvmlDevice_t device, nvmlDeviceCapabilities_t *caps)
{
    FG_DEVICE(device, d);
    (void)d;
    FG_NEED(caps);
    if (caps->version != nvmlDeviceCapabilities_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    caps->capMask = 0;
    return NVML_SUCCESS;
}

/* The C2C link to a Grace CPU: reported from Hopper on by datacenter boards, enabled on the superchips (the H100,
 * B200 and H200 captures say Disabled, the GB200 and GB300 ones Enabled, the A100 and L40S ones N/A). */
nvmlReturn_t nvmlDeviceGetC2cModeInfoV(nvmlDevice_t device, nvmlC2cModeInfo_v1_t *c2cModeInfo)
{
    FG_DEVICE(device, d);
    FG_NEED(c2cModeInfo);
    if (d->cc_major < 9 || !fg_is_datacenter(d))
        return NVML_ERROR_NOT_SUPPORTED;
    c2cModeInfo->isC2cEnabled = d->c2c ? 1 : 0;
    return NVML_SUCCESS;
}
