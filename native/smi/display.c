/* -q -d TYPE[,TYPE...]: the report narrowed to some sections. A display type names the report's top-level
 * sections it shows, by their -q -x element names (and, for the sample summaries only the text has, the names
 * report_rows.c gives them), in the order a real H200 on 580.159.04 prints them (qd_*.txt); the GPU's identity
 * (name, serial, PCI, ...) belongs to no type and shows only in the whole report. */
#include <string.h>
#include <strings.h>

#include "smi.h"

static const struct {
    const char *name;
    const char *sections[12];
} types[] = {
    {"MEMORY", {"fb_memory_usage", "bar1_memory_usage", "cc_protected_memory_usage"}},
    {"UTILIZATION", {"utilization", "gpu_utilization_samples", "memory_utilization_samples",
                     "enc_utilization_samples", "dec_utilization_samples", "jpg_utilization_samples",
                     "ofa_utilization_samples"}},
    {"ECC", {"ecc_mode", "ecc_errors"}},
    {"TEMPERATURE", {"temperature"}},
    {"POWER", {"gpu_power_readings", "power_samples", "gpu_memory_power_readings", "module_power_readings"}},
    {"CLOCK", {"clocks", "applications_clocks", "default_applications_clocks", "deferred_clocks", "max_clocks",
               "max_customer_boost_clocks", "sm_clock_samples", "memory_clock_samples", "clock_policy"}},
    {"COMPUTE", {"compute_mode"}},
    {"PIDS", {"processes"}},
    {"PERFORMANCE", {"performance_state", "clocks_event_reasons", "clocks_event_reasons_counters",
                     "sparse_operation_mode"}},
    {"SUPPORTED_CLOCKS", {"supported_clocks"}},
    {"PAGE_RETIREMENT", {"retired_pages"}},
    {"ACCOUNTING", {"accounting_mode", "accounting_mode_buffer_size", "accounted_processes"}},
    {"ENCODER_STATS", {"encoder_stats"}},
    {"SUPPORTED_GPU_TARGET_TEMP", {"supported_gpu_target_temp"}},
    {"VOLTAGE", {"voltage"}},
    {"FBC_STATS", {"fbc_stats"}},
    {"ROW_REMAPPER", {"remapped_rows"}},
    {"GSP_FIRMWARE_VERSION", {"gsp_firmware_version"}},
};

/* RESET_STATUS, which older drivers took, a real 580 driver refuses like an unknown type (qd_RESET_STATUS.txt). */
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
            for (size_t k = 0; k < 12 && types[i].sections[k]; k++)
                if (!strcmp(types[i].sections[k], section))
                    return 1;
    return 0;
}
