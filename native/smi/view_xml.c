/* -q -x: the XML report. The prolog and root are those of real captures; each <gpu> is report_rows.c's table. */
#include <stdio.h>
#include <stdlib.h>

#include "smi.h"

/* The DTD's version follows the driver branch: captures show v12 on 570 and v13 from 580 on. */
static int dtd_version(const char *driver) { return atoi(driver) >= 580 ? 13 : 12; }

static void gpu(nvmlDevice_t d)
{
    nvmlPciInfo_t pci;
    printf("\t<gpu id=\"");
    smi_xml_escaped(nvmlDeviceGetPciInfo_v3(d, &pci) == NVML_SUCCESS ? pci.busId : "N/A");
    printf("\">\n");
    smi_report_gpu_xml(d, 2);
    printf("\t</gpu>\n\n");
}

int smi_view_query_xml(const smi_gpus *g)
{
    smi_system s;
    char attached[16];
    smi_system_info(&s);
    snprintf(attached, sizeof attached, "%u", s.attached);
    printf("<?xml version=\"1.0\" ?>\n");
    printf("<!DOCTYPE nvidia_smi_log SYSTEM \"nvsmi_device_v%d.dtd\">\n", dtd_version(s.driver));
    smi_xml_open(0, "nvidia_smi_log");
    smi_xml_leaf(1, "timestamp", s.timestamp);
    smi_xml_leaf(1, "driver_version", s.driver);
    smi_xml_leaf(1, "cuda_version", s.cuda);
    smi_xml_leaf(1, "attached_gpus", attached);
    for (unsigned k = 0; k < g->count; k++)
        gpu(g->dev[k]);
    smi_xml_close(0, "nvidia_smi_log");
    return SMI_OK;
}
