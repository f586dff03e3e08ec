/* nvidia-smi mig -lgi and -lci, and the MIG device lines of -L.
 *
 * Layouts of R515-R580 drivers: -lgi 57 columns (the 450 one, narrower in its name column, is in
 * seansiddens/mps-test README.md), -lci 70 with its Placement column (an H100 capture in aminmsalimi/migops
 * tests/test_h100_ci_parser.py). The name column is 16 wide and widens for boards whose profile names are longer
 * (smi_mig_name_width), which is how 580 lays out an RTX PRO 6000's "MIG 1g.24gb+me.all". */
#include <stdio.h>
#include <string.h>

#include "smi.h"

#define MAX_GI 16

static const smi_cell lgi_heading[] = {
    {2, 0, "GPU"}, {8, 0, "Name"}, {25, 1, "Profile"}, {34, 1, "Instance"}, {45, 1, "Placement"}, SMI_ROW_END,
    {27, 1, "ID"}, {36, 1, "ID"}, {45, 1, "Start:Size"}, SMI_ROW_END,
    SMI_HEADING_END,
};

static void gi_profile_name(nvmlDevice_t d, unsigned profile_id, char *out, size_t len)
{
    nvmlGpuInstanceProfileInfo_v2_t p = {.version = nvmlGpuInstanceProfileInfo_v2};
    if (nvmlDeviceGetGpuInstanceProfileInfoByIdV(d, profile_id, &p) == NVML_SUCCESS)
        snprintf(out, len, "%s", p.name);
    else
        snprintf(out, len, "N/A");
}

int smi_mig_lgi(const smi_gpus *g)
{
    int any = 0;
    for (unsigned k = 0; k < g->count; k++) {
        nvmlGpuInstance_t gis[MAX_GI];
        nvmlGpuInstanceInfo_t info[MAX_GI];
        unsigned n = smi_gpu_instances(g->dev[k], gis, info, MAX_GI);
        int s = smi_mig_name_width(g->dev[k]) - 16, width = 57 + s;
        for (unsigned i = 0; i < n; i++) {
            if (!any) {
                smi_heading(width, s, "GPU instances:", lgi_heading);
                any = 1;
            }
            char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
            gi_profile_name(g->dev[k], info[i].profileId, name, sizeof name);
            smi_row r;
            smi_row_init(&r, width);
            smi_row_right(&r, 5, "%u", g->index[k]);
            smi_row_left(&r, 7, "%s", name);
            smi_row_right(&r, 29 + s, "%u", info[i].profileId);
            smi_row_right(&r, 38 + s, "%u", info[i].id);
            smi_row_left(&r, 48 + s, "%u:%u", info[i].placement.start, info[i].placement.size);
            smi_row_print(&r);
            smi_rule(width, '-');
        }
    }
    if (!any) {
        printf("No GPU instances found.\n");
        return SMI_EXIT_NOT_FOUND;
    }
    return SMI_OK;
}

static const smi_cell lci_heading[] = {
    {2, 0, "GPU"}, {10, 0, "GPU"}, {20, 0, "Name"}, {37, 1, "Profile"}, {47, 1, "Instance"}, {58, 1, "Placement"},
    SMI_ROW_END,
    {8, 0, "Instance"}, {39, 1, "ID"}, {49, 1, "ID"}, {58, 1, "Start:Size"}, SMI_ROW_END,
    {10, 0, "ID"}, SMI_ROW_END,
    SMI_HEADING_END,
};

int smi_mig_lci(const smi_gpus *g, const smi_mig_args *a)
{
    int any = 0;
    for (unsigned k = 0; k < g->count; k++) {
        nvmlGpuInstance_t gis[MAX_GI];
        nvmlGpuInstanceInfo_t info[MAX_GI];
        unsigned n = smi_gpu_instances(g->dev[k], gis, info, MAX_GI);
        int s = smi_mig_name_width(g->dev[k]) - 16, width = 70 + s;
        for (unsigned i = 0; i < n; i++) {
            if (!smi_id_listed(a->gi, info[i].id))
                continue;
            /* Each compute instance profile the GPU instance offers, in profile order (-lcip's). */
            for (unsigned p = 0; p < 32; p++) {
                nvmlComputeInstance_t cis[8];
                unsigned count = 8;
                nvmlReturn_t rc = nvmlGpuInstanceGetComputeInstances(gis[i], p, cis, &count);
                if (rc == NVML_ERROR_INVALID_ARGUMENT)
                    break;
                if (rc != NVML_SUCCESS)
                    continue;
                nvmlComputeInstanceProfileInfo_v2_t prof = {.version = nvmlComputeInstanceProfileInfo_v2};
                if (nvmlGpuInstanceGetComputeInstanceProfileInfoV(gis[i], p, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                                                                  &prof) != NVML_SUCCESS)
                    snprintf(prof.name, sizeof prof.name, "N/A");
                for (unsigned c = 0; c < count; c++) {
                    nvmlComputeInstanceInfo_t ci;
                    if (nvmlComputeInstanceGetInfo_v2(cis[c], &ci) != NVML_SUCCESS || !smi_id_listed(a->ci, ci.id))
                        continue;
                    if (!any)
                        smi_heading(width, s, "Compute instances:", lci_heading);
                    any = 1;
                    smi_row r;
                    smi_row_init(&r, width);
                    smi_row_right(&r, 5, "%u", g->index[k]);
                    smi_row_right(&r, 12, "%u", info[i].id);
                    smi_row_left(&r, 19, "%s", prof.name);
                    smi_row_right(&r, 41 + s, "%u", ci.profileId);
                    smi_row_right(&r, 51 + s, "%u", ci.id);
                    smi_row_left(&r, 61 + s, "%u:%u", ci.placement.start, ci.placement.size);
                    smi_row_print(&r);
                    smi_rule(width, '-');
                }
            }
        }
    }
    if (!any) {
        printf("No compute instances found.\n");
        return SMI_EXIT_NOT_FOUND;
    }
    return SMI_OK;
}

/* "  MIG 3g.40gb     Device  0: (UUID: MIG-...)": the profile part of the MIG device's name in 16 columns, the
 * index in two (captures from 460 to 580 drivers agree, e.g. the 580.105.08 RTX PRO 6000 one). */
void smi_mig_list_lines(nvmlDevice_t d)
{
    nvmlDevice_t migs[16];
    unsigned n = smi_mig_devices(d, migs, 16);
    for (unsigned i = 0; i < n; i++) {
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "N/A", uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "N/A";
        unsigned index = i;
        nvmlDeviceGetName(migs[i], name, sizeof name);
        nvmlDeviceGetUUID(migs[i], uuid, sizeof uuid);
        nvmlDeviceGetIndex(migs[i], &index);
        const char *profile = strstr(name, " MIG ");
        printf("  %-16sDevice %2u: (UUID: %s)\n", profile ? profile + 1 : name, index, uuid);
    }
}
