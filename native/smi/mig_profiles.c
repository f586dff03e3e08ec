/* nvidia-smi mig -lgip, -lgipp and -lcip: a board's GPU instance profiles with what is still free, their
 * possible placements, and the compute instance profiles each GPU instance offers.
 *
 * Layouts of R515-R580 drivers on A100 80GB and H100 boards: -lgip 79 columns, two lines a profile (SM DEC ENC
 * over CE JPEG OFA; seansiddens/mps-test README.md has the same table from 450), -lcip 88 with the default
 * profile (the one -C creates) starred, -lgipp one line a profile ("Placement :" when there is one). The name
 * column widens as in mig_list.c. */
#include <stdio.h>
#include <string.h>

#include "smi.h"

static const smi_cell lgip_heading[] = {
    {2, 0, "GPU"}, {8, 0, "Name"}, {25, 1, "ID"}, {31, 1, "Instances"}, {43, 1, "Memory"}, {54, 1, "P2P"},
    {61, 1, "SM"}, {67, 1, "DEC"}, {73, 1, "ENC"}, SMI_ROW_END,
    {31, 1, "Free/Total"}, {44, 1, "GiB"}, {61, 1, "CE"}, {67, 1, "JPEG"}, {73, 1, "OFA"}, SMI_ROW_END,
    SMI_HEADING_END,
};

int smi_mig_lgip(const smi_gpus *g)
{
    for (unsigned k = 0; k < g->count; k++) {
        nvmlGpuInstanceProfileInfo_v2_t p[32];
        unsigned n = smi_gi_profiles(g->dev[k], p, 32);
        int s = smi_mig_name_width(g->dev[k]) - 16, width = 79 + s;
        if (k == 0)
            smi_heading(width, s, "GPU instance profiles:", lgip_heading);
        for (unsigned i = 0; i < n; i++) {
            unsigned free = 0;
            if (nvmlDeviceGetGpuInstanceRemainingCapacity(g->dev[k], p[i].id, &free) != NVML_SUCCESS)
                free = 0;
            smi_row r;
            smi_row_init(&r, width);
            smi_row_right(&r, 5, "%u", g->index[k]);
            smi_row_left(&r, 7, "%s", p[i].name);
            smi_row_right(&r, 27 + s, "%u", p[i].id);
            smi_row_left(&r, 32 + s, "%u/%u", free, p[i].instanceCount);
            smi_row_left(&r, 43 + s, "%.2f", (double)p[i].memorySizeMB / 1024.0);
            smi_row_left(&r, 54 + s, "%s", p[i].isP2pSupported ? "Yes" : "No");
            smi_row_left(&r, 61 + s, "%u", p[i].multiprocessorCount);
            smi_row_left(&r, 68 + s, "%u", p[i].decoderCount);
            smi_row_left(&r, 74 + s, "%u", p[i].encoderCount);
            smi_row_print(&r);
            smi_row_init(&r, width);
            smi_row_right(&r, 63 + s, "%u", p[i].copyEngineCount);
            smi_row_left(&r, 68 + s, "%u", p[i].jpegCount);
            smi_row_left(&r, 74 + s, "%u", p[i].ofaCount);
            smi_row_print(&r);
            smi_rule(width, '-');
        }
    }
    return SMI_OK;
}

int smi_mig_lgipp(const smi_gpus *g)
{
    for (unsigned k = 0; k < g->count; k++) {
        nvmlGpuInstanceProfileInfo_v2_t p[32];
        unsigned n = smi_gi_profiles(g->dev[k], p, 32);
        for (unsigned i = 0; i < n; i++) {
            nvmlGpuInstancePlacement_t pl[16];
            unsigned count = 16;
            if (nvmlDeviceGetGpuInstancePossiblePlacements_v2(g->dev[k], p[i].id, pl, &count) != NVML_SUCCESS || !count)
                continue;
            char starts[64] = "";
            size_t used = 0;
            for (unsigned j = 0; j < count && used < sizeof starts; j++)
                used += (size_t)snprintf(starts + used, sizeof starts - used, "%s%u", j ? "," : "", pl[j].start);
            printf("GPU %2u Profile ID %2u Placement%s: {%s}:%u\n", g->index[k], p[i].id, count > 1 ? "s" : " ",
                   starts, pl[0].size);
        }
    }
    return SMI_OK;
}

static const smi_cell lcip_heading[] = {
    {2, 0, "GPU"}, {10, 0, "GPU"}, {20, 0, "Name"}, {37, 1, "Profile"}, {46, 1, "Instances"}, {58, 1, "Exclusive"},
    {74, 1, "Shared"}, SMI_ROW_END,
    {8, 0, "Instance"}, {39, 1, "ID"}, {46, 1, "Free/Total"}, {61, 1, "SM"}, {70, 1, "DEC"}, {76, 1, "ENC"},
    {82, 1, "OFA"}, SMI_ROW_END,
    {10, 0, "ID"}, {70, 1, "CE"}, {76, 1, "JPEG"}, SMI_ROW_END,
    SMI_HEADING_END,
};

int smi_mig_lcip(const smi_gpus *g, const smi_mig_args *a)
{
    int any = 0;
    for (unsigned k = 0; k < g->count; k++) {
        nvmlGpuInstance_t gis[16];
        nvmlGpuInstanceInfo_t info[16];
        unsigned n = smi_gpu_instances(g->dev[k], gis, info, 16);
        int s = smi_mig_name_width(g->dev[k]) - 16, width = 88 + s;
        for (unsigned i = 0; i < n; i++) {
            if (!smi_id_listed(a->gi, info[i].id))
                continue;
            nvmlGpuInstanceProfileInfo_v2_t gip = {.version = nvmlGpuInstanceProfileInfo_v2};
            nvmlDeviceGetGpuInstanceProfileInfoByIdV(g->dev[k], info[i].profileId, &gip);
            for (unsigned p = 0; p < 32; p++) {
                nvmlComputeInstanceProfileInfo_v2_t c = {.version = nvmlComputeInstanceProfileInfo_v2};
                nvmlReturn_t rc = nvmlGpuInstanceGetComputeInstanceProfileInfoV(
                    gis[i], p, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &c);
                if (rc == NVML_ERROR_INVALID_ARGUMENT)
                    break;
                if (rc != NVML_SUCCESS)
                    continue;
                unsigned free = 0;
                if (nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gis[i], p, &free) != NVML_SUCCESS)
                    free = 0;
                if (!any)
                    smi_heading(width, s, "Compute instance profiles:", lcip_heading);
                any = 1;
                smi_row r;
                smi_row_init(&r, width);
                smi_row_right(&r, 5, "%u", g->index[k]);
                smi_row_right(&r, 12, "%u", info[i].id);
                smi_row_left(&r, 19, "%s", c.name);
                /* The star marks the profile spanning the GPU instance: what -cgi ... -C gives it. */
                smi_row_left(&r, 40 + s, "%u%s", c.id, c.sliceCount == gip.sliceCount ? "*" : "");
                smi_row_left(&r, 47 + s, "%u/%u", free, c.instanceCount);
                smi_row_right(&r, 63 + s, "%u", c.multiprocessorCount);
                smi_row_right(&r, 72 + s, "%u", c.sharedDecoderCount);
                smi_row_right(&r, 78 + s, "%u", c.sharedEncoderCount);
                smi_row_right(&r, 84 + s, "%u", c.sharedOfaCount);
                smi_row_print(&r);
                smi_row_init(&r, width);
                smi_row_right(&r, 72 + s, "%u", c.sharedCopyEngineCount);
                smi_row_right(&r, 78 + s, "%u", c.sharedJpegCount);
                smi_row_print(&r);
                smi_rule(width, '-');
            }
        }
    }
    if (!any) {
        printf("No GPU instances found.\n");
        return SMI_EXIT_NOT_FOUND;
    }
    return SMI_OK;
}
