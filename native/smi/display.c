/* -q -d TYPE[,TYPE...]: the report narrowed to some sections. A display type names the report's top-level
 * sections it shows, by their -q -x element names, so the text and the XML tables share one vocabulary; the
 * GPU's identity (name, serial, PCI, ...) belongs to no type and shows only in the whole report. */
#include <string.h>
#include <strings.h>

#include "smi.h"

static const struct {
    const char *name;
    const char *sections[8];
} types[] = {
    {"MEMORY", {"fb_memory_usage", "bar1_memory_usage", "cc_protected_memory_usage"}},
    {"UTILIZATION", {"utilization"}},
    {"ECC", {"ecc_mode", "ecc_errors"}},
    {"TEMPERATURE", {"temperature"}},
    {"POWER", {"gpu_power_readings", "module_power_readings"}},
    {"CLOCK", {"clocks", "applications_clocks", "default_applications_clocks", "deferred_clocks", "max_clocks",
               "max_customer_boost_clocks", "clock_policy"}},
    {"COMPUTE", {"compute_mode"}},
    {"PIDS", {"processes"}},
    {"PERFORMANCE", {"performance_state", "clocks_event_reasons"}},
    {"SUPPORTED_CLOCKS", {"supported_clocks"}},
    {"PAGE_RETIREMENT", {"retired_pages"}},
    {"ACCOUNTING", {"accounting_mode", "accounting_mode_buffer_size", "accounted_processes"}},
    {"ENCODER_STATS", {"encoder_stats"}},
    {"SUPPORTED_GPU_TARGET_TEMP", {"supported_gpu_target_temp"}},
    {"VOLTAGE", {"voltage"}},
    {"FBC_STATS", {"fbc_stats"}},
    {"ROW_REMAPPER", {"remapped_rows"}},
    {"RESET_STATUS", {"gpu_reset_status"}},
    {"GSP_FIRMWARE_VERSION", {"gsp_firmware_version"}},
};

_Static_assert(sizeof types / sizeof types[0] <= 32, "a display mask holds 32 types");

int smi_display_parse(const char *list, unsigned *mask)
{
    char buf[512];
    *mask = 0;
    if (!list || strlen(list) >= sizeof buf)
        return -1;
    strcpy(buf, list);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        size_t i = 0;
        while (i < sizeof types / sizeof types[0] && strcasecmp(t, types[i].name) != 0)
            i++;
        if (i == sizeof types / sizeof types[0])
            return -1;
        *mask |= 1u << i;
    }
    return *mask ? 0 : -1;
}

int smi_display_shows(unsigned mask, const char *section)
{
    if (!mask)
        return 1;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (mask & (1u << i))
            for (size_t k = 0; k < 8 && types[i].sections[k]; k++)
                if (!strcmp(types[i].sections[k], section))
                    return 1;
    return 0;
}
