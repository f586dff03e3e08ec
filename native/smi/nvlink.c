/* nvlink -s / --status: each GPU's links and their speed, as the real tool prints them:
 *
 *     GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-...)
 *     <TAB> Link 0: 25 GB/s
 *
 * An inactive link reads "<inactive>". The speed is a link's per-direction signalling rate, which follows the
 * NVLink generation (real captures: 25.781 GB/s on NVLink 2 boards, 25 on NVLink 3, 26.562 on NVLink 4, 53.125
 * on NVLink 5), not the profile's aggregate bandwidth. A board without NVLink prints its GPU line only. */
#include <stdio.h>

#include "smi.h"

static const char *link_speed(unsigned version)
{
    switch (version) {
    case NVML_NVLINK_VERSION_2_0:
    case NVML_NVLINK_VERSION_2_2: return "25.781 GB/s";
    case NVML_NVLINK_VERSION_3_0:
    case NVML_NVLINK_VERSION_3_1: return "25 GB/s";
    case NVML_NVLINK_VERSION_4_0: return "26.562 GB/s";
    case NVML_NVLINK_VERSION_5_0: return "53.125 GB/s";
    default: return "N/A";
    }
}

int smi_view_nvlink_status(const smi_gpus *g)
{
    for (unsigned k = 0; k < g->count; k++) {
        smi_gpu_line(g, k);
        for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; link++) {
            nvmlEnableState_t active;
            unsigned version;
            if (nvmlDeviceGetNvLinkState(g->dev[k], link, &active) != NVML_SUCCESS)
                break; /* no NVLink, or past the board's last link */
            if (active != NVML_FEATURE_ENABLED)
                printf("\t Link %u: <inactive>\n", link);
            else if (nvmlDeviceGetNvLinkVersion(g->dev[k], link, &version) == NVML_SUCCESS)
                printf("\t Link %u: %s\n", link, link_speed(version));
            else
                printf("\t Link %u: N/A\n", link);
        }
    }
    return SMI_OK;
}
