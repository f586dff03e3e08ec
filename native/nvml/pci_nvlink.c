/* PCI identity and link, NVLink, topology, P2P and CPU/NUMA affinity.
 *
 * The machine we pretend to be is an HGX-style node: eight GPU slots per PCI domain, slots 0-3 on socket 0
 * and 4-7 on socket 1, GPUs paired behind PCIe switches (0-1, 2-3, ...). Boards with NVLink reach every other
 * NVLink board of the same model in their domain through NVSwitches, as on HGX A100/H100. */
#include <stdio.h>

#include "fg_nvml.h"

#define SLOTS_PER_DOMAIN 8

static unsigned slot_of(const fg_device *d) { return d->index % SLOTS_PER_DOMAIN; }

unsigned fg_socket_of(const fg_device *d) { return slot_of(d) < SLOTS_PER_DOMAIN / 2 ? 0 : 1; }

static int nvlinked(const fg_device *a, const fg_device *b)
{
    return a != b && a->nvlink_links && b->nvlink_links && a->pci_domain == b->pci_domain &&
           !strcmp(a->profile, b->profile);
}

nvmlGpuTopologyLevel_t fg_topology(const fg_device *a, const fg_device *b)
{
    if (a == b)
        return NVML_TOPOLOGY_INTERNAL;
    if (a->pci_domain != b->pci_domain || fg_socket_of(a) != fg_socket_of(b))
        return NVML_TOPOLOGY_SYSTEM;
    if (slot_of(a) / 2 == slot_of(b) / 2)
        return NVML_TOPOLOGY_MULTIPLE; /* PXB: behind the same pair of PCIe switches */
    return NVML_TOPOLOGY_NODE;
}

void fg_fill_pci(const fg_device *d, nvmlPciInfo_t *pci)
{
    memset(pci, 0, sizeof *pci);
    pci->domain = d->pci_domain;
    pci->bus = d->pci_bus;
    pci->device = d->pci_dev;
    pci->pciDeviceId = d->pci_device_id << 16 | 0x10DE;
    pci->pciSubSystemId = d->pci_subsystem_id;
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", d->pci_domain, d->pci_bus, d->pci_dev,
             d->pci_function);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", d->pci_domain & 0xFFFF, d->pci_bus,
             d->pci_dev, d->pci_function);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    FG_DEVICE(device, d);
    FG_NEED(pci);
    fg_fill_pci(d, pci);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t *pci)
{
    FG_DEVICE(device, d);
    FG_NEED(pci);
    if (pci->version != nvmlPciInfoExt_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlPciInfo_t base;
    fg_fill_pci(d, &base);
    pci->domain = base.domain;
    pci->bus = base.bus;
    pci->device = base.device;
    pci->pciDeviceId = base.pciDeviceId;
    pci->pciSubSystemId = base.pciSubSystemId;
    pci->baseClass = 0x03; /* display controller */
    pci->subClass = 0x02;  /* 3D controller, as compute boards enumerate */
    memcpy(pci->busId, base.busId, sizeof pci->busId);
    return NVML_SUCCESS;
}

#define FG_UINT_QUERY(fn, expr)                                                                                   \
    nvmlReturn_t fn(nvmlDevice_t device, unsigned int *out)                                                       \
    {                                                                                                             \
        FG_DEVICE(device, d);                                                                                     \
        FG_NEED(out);                                                                                             \
        *out = (expr);                                                                                            \
        return NVML_SUCCESS;                                                                                      \
    }

/* Links train at their maximum on a busy board and stay there: no power-saving downshift to model. */
FG_UINT_QUERY(nvmlDeviceGetCurrPcieLinkGeneration, d->pcie_gen)
FG_UINT_QUERY(nvmlDeviceGetMaxPcieLinkGeneration, d->pcie_gen)
FG_UINT_QUERY(nvmlDeviceGetGpuMaxPcieLinkGeneration, d->pcie_gen)
FG_UINT_QUERY(nvmlDeviceGetCurrPcieLinkWidth, d->pcie_width)
FG_UINT_QUERY(nvmlDeviceGetMaxPcieLinkWidth, d->pcie_width)
FG_UINT_QUERY(nvmlDeviceGetPcieReplayCounter, 0u)
FG_UINT_QUERY(nvmlDeviceGetNumaNodeId, fg_socket_of(d))

static unsigned mbps_per_lane(unsigned gen)
{
    static const unsigned speed[] = {0, 2500, 5000, 8000, 16000, 32000, 64000};
    return gen < sizeof speed / sizeof speed[0] ? speed[gen] : 64000;
}

FG_UINT_QUERY(nvmlDeviceGetPcieSpeed, mbps_per_lane(d->pcie_gen))
FG_UINT_QUERY(nvmlDeviceGetPcieLinkMaxSpeed, d->pcie_gen > 6 ? 6u : d->pcie_gen)

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter, unsigned int *value)
{
    FG_DEVICE(device, d);
    FG_NEED(value);
    if ((unsigned)counter >= NVML_PCIE_UTIL_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    fg_usage u;
    fg_usage_of(d->index, &u);
    /* KB/s: driver heartbeat traffic when idle, a steady host<->device stream when busy. */
    unsigned busy = u.compute_procs + u.graphics_procs > 0;
    *value = counter == NVML_PCIE_UTIL_TX_BYTES ? (busy ? 184320 : 312) : (busy ? 2457600 : 416);
    return NVML_SUCCESS;
}

/* ---- NVLink ---- */

#define FG_LINK(d, link)                                                                                          \
    do {                                                                                                          \
        if (!(d)->nvlink_links)                                                                                   \
            return NVML_ERROR_NOT_SUPPORTED;                                                                      \
        if ((link) >= (d)->nvlink_links)                                                                          \
            return NVML_ERROR_INVALID_ARGUMENT;                                                                   \
    } while (0)

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive)
{
    FG_DEVICE(device, d);
    FG_NEED(isActive);
    FG_LINK(d, link);
    *isActive = NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link, unsigned int *version)
{
    FG_DEVICE(device, d);
    FG_NEED(version);
    FG_LINK(d, link);
    /* nvmlNvlinkVersion_t counts point releases too: NVLink 3.0 is 4, 4.0 is 6, 5.0 is 7. */
    static const unsigned by_generation[] = {0, 1, 2, 4, 6, 7};
    unsigned g = d->nvlink_version;
    *version = g < sizeof by_generation / sizeof by_generation[0] ? by_generation[g] : 7;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link, nvmlNvLinkCapability_t capability,
                                           unsigned int *capResult)
{
    FG_DEVICE(device, d);
    FG_NEED(capResult);
    FG_LINK(d, link);
    switch (capability) {
    case NVML_NVLINK_CAP_P2P_SUPPORTED:
    case NVML_NVLINK_CAP_P2P_ATOMICS:
    case NVML_NVLINK_CAP_VALID: *capResult = 1; break;
    case NVML_NVLINK_CAP_SYSMEM_ACCESS:
    case NVML_NVLINK_CAP_SYSMEM_ATOMICS:
    case NVML_NVLINK_CAP_SLI_BRIDGE: *capResult = 0; break; /* x86 hosts: no NVLink to the CPU */
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

/* Links spread over the baseboard's NVSwitches (6 on NVLink 3 boards, 4 on NVLink 4 and later). */
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    FG_DEVICE(device, d);
    FG_NEED(pci);
    FG_LINK(d, link);
    unsigned switches = d->nvlink_version >= 4 ? 4 : 6;
    unsigned switch_id = d->nvlink_version >= 4 ? 0x22A3 : 0x1AF1;
    memset(pci, 0, sizeof *pci);
    pci->domain = d->pci_domain;
    pci->bus = 0xC4 + link % switches;
    pci->pciDeviceId = switch_id << 16 | 0x10DE;
    pci->pciSubSystemId = switch_id << 16 | 0x10DE;
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:00.0", pci->domain, pci->bus);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:00.0", pci->domain & 0xFFFF, pci->bus);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetNvLinkRemotePciInfo_v2(device, link, pci);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                 nvmlIntNvLinkDeviceType_t *pNvLinkDeviceType)
{
    FG_DEVICE(device, d);
    FG_NEED(pNvLinkDeviceType);
    FG_LINK(d, link);
    *pNvLinkDeviceType = NVML_NVLINK_DEVICE_TYPE_SWITCH;
    return NVML_SUCCESS;
}

/* ---- topology and P2P ---- */

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 nvmlGpuTopologyLevel_t *pathInfo)
{
    FG_DEVICE(device1, a);
    FG_DEVICE(device2, b);
    FG_NEED(pathInfo);
    *pathInfo = fg_topology(a, b);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t device, nvmlGpuTopologyLevel_t level,
                                              unsigned int *count, nvmlDevice_t *deviceArray)
{
    FG_DEVICE(device, d);
    FG_NEED(count);
    unsigned n = 0, room = *count;
    for (unsigned i = 0; i < fg_devs.count; i++) {
        const fg_device *o = &fg_devs.dev[i];
        if (o == d || fg_topology(d, o) > level)
            continue;
        if (deviceArray && n < room)
            deviceArray[n] = &fg_handles[i];
        n++;
    }
    *count = n;
    return deviceArray && n > room ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetTopologyGpuSet(unsigned int cpuNumber, unsigned int *count, nvmlDevice_t *deviceArray)
{
    if (!fg_is_initialized())
        return NVML_ERROR_UNINITIALIZED;
    FG_NEED(count);
    unsigned half = fg_cfg.cpu_count > 1 ? fg_cfg.cpu_count / 2 : 1;
    unsigned socket = cpuNumber >= half ? 1 : 0;
    unsigned n = 0, room = *count;
    for (unsigned i = 0; i < fg_devs.count; i++) {
        if (fg_cfg.cpu_count > 1 && fg_socket_of(&fg_devs.dev[i]) != socket)
            continue;
        if (deviceArray && n < room)
            deviceArray[n] = &fg_handles[i];
        n++;
    }
    *count = n;
    return deviceArray && n > room ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuP2PCapsIndex_t p2pIndex,
                                    nvmlGpuP2PStatus_t *p2pStatus)
{
    FG_DEVICE(device1, a);
    FG_DEVICE(device2, b);
    FG_NEED(p2pStatus);
    if ((unsigned)p2pIndex >= NVML_P2P_CAPS_INDEX_UNKNOWN)
        return NVML_ERROR_INVALID_ARGUMENT;
    int linked = nvlinked(a, b);
    int pcie_ok = a != b && fg_topology(a, b) <= NVML_TOPOLOGY_NODE;
    switch (p2pIndex) {
    case NVML_P2P_CAPS_INDEX_NVLINK: *p2pStatus = linked ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED; break;
    case NVML_P2P_CAPS_INDEX_PCI: *p2pStatus = pcie_ok ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED; break;
    default:
        *p2pStatus = (linked || pcie_ok) ? NVML_P2P_STATUS_OK
                     : a == b            ? NVML_P2P_STATUS_NOT_SUPPORTED
                                         : NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}

/* ---- affinity ---- */

/* The CPUs of a GPU's socket: the first or second half of the host's CPUs (all of them on a 1-CPU host). */
static void cpu_range(const fg_device *d, unsigned *first, unsigned *last)
{
    unsigned n = fg_cfg.cpu_count;
    if (n < 2) {
        *first = 0;
        *last = n ? n - 1 : 0;
        return;
    }
    unsigned half = n / 2;
    *first = fg_socket_of(d) ? half : 0;
    *last = fg_socket_of(d) ? n - 1 : half - 1;
}

static nvmlReturn_t fill_cpus(const fg_device *d, unsigned int cpuSetSize, unsigned long *cpuSet)
{
    if (!cpuSetSize || !cpuSet)
        return NVML_ERROR_INVALID_ARGUMENT;
    const unsigned bits = 8 * sizeof(unsigned long);
    memset(cpuSet, 0, cpuSetSize * sizeof *cpuSet);
    unsigned first, last;
    cpu_range(d, &first, &last);
    for (unsigned c = first; c <= last && c / bits < cpuSetSize; c++)
        cpuSet[c / bits] |= 1ul << (c % bits);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long *cpuSet)
{
    FG_DEVICE(device, d);
    return fill_cpus(d, cpuSetSize, cpuSet);
}

nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long *cpuSet,
                                                 nvmlAffinityScope_t scope)
{
    FG_DEVICE(device, d);
    if (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET)
        return NVML_ERROR_INVALID_ARGUMENT;
    return fill_cpus(d, cpuSetSize, cpuSet); /* one NUMA node per socket: both scopes agree */
}

nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int nodeSetSize, unsigned long *nodeSet,
                                         nvmlAffinityScope_t scope)
{
    FG_DEVICE(device, d);
    if (!nodeSetSize || !nodeSet || (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET))
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(nodeSet, 0, nodeSetSize * sizeof *nodeSet);
    nodeSet[0] = 1ul << fg_socket_of(d);
    return NVML_SUCCESS;
}
