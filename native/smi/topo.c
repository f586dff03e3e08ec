/* topo -m: the GPU connection matrix, tab-separated as the real tool prints it, its header row underlined with
 * ANSI escapes whether or not stdout is a terminal (a real H200 on 580.159.04, output to a file). */
#include <stdio.h>
#include <string.h>

#include "smi.h"

static const char *level_name(nvmlGpuTopologyLevel_t l)
{
    switch (l) {
    case NVML_TOPOLOGY_SINGLE: return "PIX";
    case NVML_TOPOLOGY_MULTIPLE: return "PXB";
    case NVML_TOPOLOGY_HOSTBRIDGE: return "PHB";
    case NVML_TOPOLOGY_NODE: return "NODE";
    default: return "SYS";
    }
}

/* Active NVLinks of a that lead to b. Links end at NVSwitches, so every pair of NVLink boards of the same
 * model in a domain is connected through all of a's links, which the real tool shows as NV<links>. */
static unsigned nvlinks_between(nvmlDevice_t a, nvmlDevice_t b)
{
    nvmlGpuP2PStatus_t st;
    if (nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_NVLINK, &st) != NVML_SUCCESS || st != NVML_P2P_STATUS_OK)
        return 0;
    unsigned n = 0;
    nvmlEnableState_t on;
    for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++)
        if (nvmlDeviceGetNvLinkState(a, l, &on) == NVML_SUCCESS && on)
            n++;
    return n;
}

static void cpu_list(nvmlDevice_t d, char *out, size_t len)
{
    unsigned long set[16] = {0};
    snprintf(out, len, "N/A");
    if (nvmlDeviceGetCpuAffinity(d, 16, set) != NVML_SUCCESS)
        return;
    const unsigned bits = 8 * sizeof(unsigned long);
    size_t o = 0;
    out[0] = '\0';
    for (unsigned c = 0; c < 16 * bits; c++) {
        if (!(set[c / bits] >> (c % bits) & 1))
            continue;
        unsigned e = c;
        while (e + 1 < 16 * bits && (set[(e + 1) / bits] >> ((e + 1) % bits) & 1))
            e++;
        int w = e > c ? snprintf(out + o, len - o, "%s%u-%u", o ? "," : "", c, e)
                      : snprintf(out + o, len - o, "%s%u", o ? "," : "", c);
        if (w < 0 || (size_t)w >= len - o)
            break;
        o += (size_t)w;
        c = e;
    }
}

int smi_view_topo(const smi_gpus *g)
{
    printf("\t\033[4m");
    for (unsigned k = 0; k < g->count; k++)
        printf("%sGPU%u", k ? "\t" : "", g->index[k]);
    printf("\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\033[0m\n");
    for (unsigned i = 0; i < g->count; i++) {
        printf("GPU%u", g->index[i]);
        for (unsigned j = 0; j < g->count; j++) {
            if (i == j) {
                printf("\t X ");
                continue;
            }
            unsigned links = nvlinks_between(g->dev[i], g->dev[j]);
            nvmlGpuTopologyLevel_t level = NVML_TOPOLOGY_SYSTEM;
            if (links)
                printf("\tNV%u", links);
            else if (nvmlDeviceGetTopologyCommonAncestor(g->dev[i], g->dev[j], &level) == NVML_SUCCESS)
                printf("\t%s", level_name(level));
            else
                printf("\tSYS");
        }
        char cpus[512];
        cpu_list(g->dev[i], cpus, sizeof cpus);
        unsigned node;
        char numa[16] = "N/A";
        if (nvmlDeviceGetNumaNodeId(g->dev[i], &node) == NVML_SUCCESS)
            snprintf(numa, sizeof numa, "%u", node);
        printf("\t%s\t%s\t\tN/A\n", cpus, numa);
    }
    printf("\nLegend:\n\n"
           "  X    = Self\n"
           "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
           "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
           "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
           "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
           "  PIX  = Connection traversing at most a single PCIe bridge\n"
           "  NV#  = Connection traversing a bonded set of # NVLinks\n");
    return SMI_OK;
}
