/* nvidia-smi mig: the listing reports (-lgi, -lci, -lgip, -lcip, -lgipp, -lcipp) and the instance changes
 * (-cgi, -dgi, -cci, -dci), as a driver answers them while no selected GPU has MIG mode enabled: the one line
 * "No MIG-enabled devices found." and status 6 (real captures; scripts test for that line). That is every
 * FakeGPU board today, a MIG-capable one included: MIG mode is off until a layout enables it (the MIG issue),
 * and a board without MIG answers the same. A GPU with MIG enabled but no instances gets the driver's
 * "No GPU instances found." (or compute instances) instead. */
#include <stdio.h>

#include "smi.h"

int smi_view_mig(const smi_gpus *g, int compute)
{
    int enabled = 0;
    for (unsigned k = 0; k < g->count; k++) {
        unsigned current = NVML_DEVICE_MIG_DISABLE, pending = NVML_DEVICE_MIG_DISABLE;
        if (nvmlDeviceGetMigMode(g->dev[k], &current, &pending) == NVML_SUCCESS && current == NVML_DEVICE_MIG_ENABLE)
            enabled = 1;
    }
    if (!enabled)
        printf("No MIG-enabled devices found.\n");
    else
        printf("No %s instances found.\n", compute ? "compute" : "GPU");
    return SMI_EXIT_NOT_FOUND;
}
