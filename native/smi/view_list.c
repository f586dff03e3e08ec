/* -L: one line per GPU. */
#include <stdio.h>

#include "smi.h"

int smi_view_list(const smi_gpus *g)
{
    for (unsigned k = 0; k < g->count; k++) {
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "N/A", uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "N/A";
        nvmlDeviceGetName(g->dev[k], name, sizeof name);
        nvmlDeviceGetUUID(g->dev[k], uuid, sizeof uuid);
        printf("GPU %u: %s (UUID: %s)\n", g->index[k], name, uuid);
    }
    return SMI_OK;
}
