/* -L: one line per GPU (nvlink -s opens each GPU with the same line), then a MIG-mode GPU's MIG devices. */
#include <stdio.h>

#include "smi.h"

void smi_gpu_line(const smi_gpus *g, unsigned k)
{
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "N/A", uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "N/A";
    nvmlDeviceGetName(g->dev[k], name, sizeof name);
    nvmlDeviceGetUUID(g->dev[k], uuid, sizeof uuid);
    printf("GPU %u: %s (UUID: %s)\n", g->index[k], name, uuid);
}

int smi_view_list(const smi_gpus *g)
{
    for (unsigned k = 0; k < g->count; k++) {
        smi_gpu_line(g, k);
        if (smi_mig_on(g->dev[k]))
            smi_mig_list_lines(g->dev[k]);
    }
    return SMI_OK;
}
