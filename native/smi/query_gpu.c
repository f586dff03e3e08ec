/* --query-gpu=FIELDS and --query-compute-apps=FIELDS with --format=csv[,noheader][,nounits].
 * Fields are a table: canonical name, accepted aliases, unit, and how to read the value. A value that
 * cannot be read prints [N/A], as on real boards. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smi.h"

typedef struct {
    nvmlDevice_t dev;
    unsigned index;
    unsigned count;
} ctx_t;

/* Writes the bare value (no unit) into out; returns 0, or -1 for N/A. */
typedef int (*value_fn)(const ctx_t *c, char *out, size_t len);

typedef struct {
    const char *name;
    const char *alias;
    const char *unit; /* "MiB", "%", "W", "MHz" or NULL */
    value_fn fn;
} field_t;

#define OK(expr) ((expr) == NVML_SUCCESS ? 0 : -1)

static int f_timestamp(const ctx_t *c, char *o, size_t n) { (void)c; smi_now(o, n, 1); return 0; }
static int f_driver(const ctx_t *c, char *o, size_t n) { (void)c; return OK(nvmlSystemGetDriverVersion(o, (unsigned)n)); }
static int f_count(const ctx_t *c, char *o, size_t n) { snprintf(o, n, "%u", c->count); return 0; }
static int f_index(const ctx_t *c, char *o, size_t n) { snprintf(o, n, "%u", c->index); return 0; }
static int f_name(const ctx_t *c, char *o, size_t n) { return OK(nvmlDeviceGetName(c->dev, o, (unsigned)n)); }
static int f_serial(const ctx_t *c, char *o, size_t n) { return OK(nvmlDeviceGetSerial(c->dev, o, (unsigned)n)); }
static int f_uuid(const ctx_t *c, char *o, size_t n) { return OK(nvmlDeviceGetUUID(c->dev, o, (unsigned)n)); }
static int f_vbios(const ctx_t *c, char *o, size_t n) { return OK(nvmlDeviceGetVbiosVersion(c->dev, o, (unsigned)n)); }

static int pci(const ctx_t *c, nvmlPciInfo_t *p) { return OK(nvmlDeviceGetPciInfo_v3(c->dev, p)); }
static int f_bus_id(const ctx_t *c, char *o, size_t n)
{
    nvmlPciInfo_t p;
    if (pci(c, &p))
        return -1;
    snprintf(o, n, "%s", p.busId);
    return 0;
}
#define PCI_FIELD(fn, fmt, expr)                                                                                  \
    static int fn(const ctx_t *c, char *o, size_t n)                                                              \
    {                                                                                                             \
        nvmlPciInfo_t p;                                                                                          \
        if (pci(c, &p))                                                                                           \
            return -1;                                                                                            \
        snprintf(o, n, fmt, expr);                                                                                \
        return 0;                                                                                                 \
    }
PCI_FIELD(f_pci_domain, "0x%04X", p.domain)
PCI_FIELD(f_pci_bus, "0x%02X", p.bus)
PCI_FIELD(f_pci_device, "0x%02X", p.device)
PCI_FIELD(f_pci_device_id, "0x%08X", p.pciDeviceId)
PCI_FIELD(f_pci_sub_id, "0x%08X", p.pciSubSystemId)

#define UINT_FIELD(fn, call)                                                                                      \
    static int fn(const ctx_t *c, char *o, size_t n)                                                              \
    {                                                                                                             \
        unsigned v;                                                                                               \
        if (call != NVML_SUCCESS)                                                                                 \
            return -1;                                                                                            \
        snprintf(o, n, "%u", v);                                                                                  \
        return 0;                                                                                                 \
    }
UINT_FIELD(f_gen_cur, nvmlDeviceGetCurrPcieLinkGeneration(c->dev, &v))
UINT_FIELD(f_gen_max, nvmlDeviceGetMaxPcieLinkGeneration(c->dev, &v))
UINT_FIELD(f_width_cur, nvmlDeviceGetCurrPcieLinkWidth(c->dev, &v))
UINT_FIELD(f_width_max, nvmlDeviceGetMaxPcieLinkWidth(c->dev, &v))
UINT_FIELD(f_fan, nvmlDeviceGetFanSpeed(c->dev, &v))
UINT_FIELD(f_temp, nvmlDeviceGetTemperature(c->dev, NVML_TEMPERATURE_GPU, &v))
UINT_FIELD(f_clk_sm, nvmlDeviceGetClockInfo(c->dev, NVML_CLOCK_SM, &v))
UINT_FIELD(f_clk_gr, nvmlDeviceGetClockInfo(c->dev, NVML_CLOCK_GRAPHICS, &v))
UINT_FIELD(f_clk_mem, nvmlDeviceGetClockInfo(c->dev, NVML_CLOCK_MEM, &v))
UINT_FIELD(f_clk_video, nvmlDeviceGetClockInfo(c->dev, NVML_CLOCK_VIDEO, &v))
UINT_FIELD(f_max_sm, nvmlDeviceGetMaxClockInfo(c->dev, NVML_CLOCK_SM, &v))
UINT_FIELD(f_max_gr, nvmlDeviceGetMaxClockInfo(c->dev, NVML_CLOCK_GRAPHICS, &v))
UINT_FIELD(f_max_mem, nvmlDeviceGetMaxClockInfo(c->dev, NVML_CLOCK_MEM, &v))
UINT_FIELD(f_app_gr, nvmlDeviceGetApplicationsClock(c->dev, NVML_CLOCK_GRAPHICS, &v))
UINT_FIELD(f_app_mem, nvmlDeviceGetApplicationsClock(c->dev, NVML_CLOCK_MEM, &v))

static int util(const ctx_t *c, nvmlUtilization_t *u) { return OK(nvmlDeviceGetUtilizationRates(c->dev, u)); }
static int f_util_gpu(const ctx_t *c, char *o, size_t n)
{
    nvmlUtilization_t u;
    if (util(c, &u))
        return -1;
    snprintf(o, n, "%u", u.gpu);
    return 0;
}
static int f_util_mem(const ctx_t *c, char *o, size_t n)
{
    nvmlUtilization_t u;
    if (util(c, &u))
        return -1;
    snprintf(o, n, "%u", u.memory);
    return 0;
}

static int mem(const ctx_t *c, nvmlMemory_v2_t *m)
{
    m->version = nvmlMemory_v2;
    return OK(nvmlDeviceGetMemoryInfo_v2(c->dev, m));
}
#define MEM_FIELD(fn, member)                                                                                     \
    static int fn(const ctx_t *c, char *o, size_t n)                                                              \
    {                                                                                                             \
        nvmlMemory_v2_t m;                                                                                        \
        if (mem(c, &m))                                                                                           \
            return -1;                                                                                            \
        snprintf(o, n, "%llu", smi_mib(m.member));                                                                \
        return 0;                                                                                                 \
    }
MEM_FIELD(f_mem_total, total)
MEM_FIELD(f_mem_used, used)
MEM_FIELD(f_mem_free, free)
MEM_FIELD(f_mem_reserved, reserved)

#define WATT_FIELD(fn, call)                                                                                      \
    static int fn(const ctx_t *c, char *o, size_t n)                                                              \
    {                                                                                                             \
        unsigned v, lo;                                                                                           \
        (void)lo;                                                                                                 \
        if (call != NVML_SUCCESS)                                                                                 \
            return -1;                                                                                            \
        snprintf(o, n, "%.2f", v / 1000.0);                                                                       \
        return 0;                                                                                                 \
    }
WATT_FIELD(f_power_draw, nvmlDeviceGetPowerUsage(c->dev, &v))
WATT_FIELD(f_power_limit, nvmlDeviceGetPowerManagementLimit(c->dev, &v))
WATT_FIELD(f_power_enforced, nvmlDeviceGetEnforcedPowerLimit(c->dev, &v))
WATT_FIELD(f_power_default, nvmlDeviceGetPowerManagementDefaultLimit(c->dev, &v))
WATT_FIELD(f_power_min, nvmlDeviceGetPowerManagementLimitConstraints(c->dev, &v, &lo))
WATT_FIELD(f_power_max, nvmlDeviceGetPowerManagementLimitConstraints(c->dev, &lo, &v))

static int f_cc(const ctx_t *c, char *o, size_t n)
{
    int major, minor;
    if (nvmlDeviceGetCudaComputeCapability(c->dev, &major, &minor) != NVML_SUCCESS)
        return -1;
    snprintf(o, n, "%d.%d", major, minor);
    return 0;
}

static int enabled(nvmlReturn_t rc, int on, char *o, size_t n)
{
    if (rc != NVML_SUCCESS)
        return -1;
    snprintf(o, n, "%s", on ? "Enabled" : "Disabled");
    return 0;
}
static int f_persistence(const ctx_t *c, char *o, size_t n)
{
    nvmlEnableState_t s = 0;
    nvmlReturn_t rc = nvmlDeviceGetPersistenceMode(c->dev, &s);
    return enabled(rc, s, o, n);
}
static int f_display_mode(const ctx_t *c, char *o, size_t n)
{
    nvmlEnableState_t s = 0;
    nvmlReturn_t rc = nvmlDeviceGetDisplayMode(c->dev, &s);
    return enabled(rc, s, o, n);
}
static int f_display_active(const ctx_t *c, char *o, size_t n)
{
    nvmlEnableState_t s = 0;
    nvmlReturn_t rc = nvmlDeviceGetDisplayActive(c->dev, &s);
    return enabled(rc, s, o, n);
}
static int f_ecc_cur(const ctx_t *c, char *o, size_t n)
{
    nvmlEnableState_t cur = 0, pend = 0;
    nvmlReturn_t rc = nvmlDeviceGetEccMode(c->dev, &cur, &pend);
    return enabled(rc, cur, o, n);
}
static int f_ecc_pend(const ctx_t *c, char *o, size_t n)
{
    nvmlEnableState_t cur = 0, pend = 0;
    nvmlReturn_t rc = nvmlDeviceGetEccMode(c->dev, &cur, &pend);
    return enabled(rc, pend, o, n);
}
static int f_ecc_unc(const ctx_t *c, char *o, size_t n)
{
    unsigned long long v;
    if (nvmlDeviceGetTotalEccErrors(c->dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &v))
        return -1;
    snprintf(o, n, "%llu", v);
    return 0;
}
static int f_mig_cur(const ctx_t *c, char *o, size_t n)
{
    unsigned cur = 0, pend = 0;
    nvmlReturn_t rc = nvmlDeviceGetMigMode(c->dev, &cur, &pend);
    return enabled(rc, cur, o, n);
}
static int f_mig_pend(const ctx_t *c, char *o, size_t n)
{
    unsigned cur = 0, pend = 0;
    nvmlReturn_t rc = nvmlDeviceGetMigMode(c->dev, &cur, &pend);
    return enabled(rc, pend, o, n);
}
static int f_pstate(const ctx_t *c, char *o, size_t n)
{
    nvmlPstates_t p;
    if (nvmlDeviceGetPerformanceState(c->dev, &p) != NVML_SUCCESS || p == NVML_PSTATE_UNKNOWN)
        return -1;
    snprintf(o, n, "P%d", (int)p);
    return 0;
}
static int f_compute_mode(const ctx_t *c, char *o, size_t n)
{
    static const char *const modes[] = {"Default", "Exclusive_Thread", "Prohibited", "Exclusive_Process"};
    nvmlComputeMode_t m;
    if (nvmlDeviceGetComputeMode(c->dev, &m) != NVML_SUCCESS || (unsigned)m > 3)
        return -1;
    snprintf(o, n, "%s", modes[m]);
    return 0;
}
static int f_reasons(const ctx_t *c, char *o, size_t n)
{
    unsigned long long r;
    if (nvmlDeviceGetCurrentClocksEventReasons(c->dev, &r) != NVML_SUCCESS)
        return -1;
    snprintf(o, n, "0x%016llX", r);
    return 0;
}
static int f_na(const ctx_t *c, char *o, size_t n) { (void)c; (void)o; (void)n; return -1; }

static const field_t GPU_FIELDS[] = {
    {"timestamp", NULL, NULL, f_timestamp},
    {"driver_version", NULL, NULL, f_driver},
    {"count", NULL, NULL, f_count},
    {"name", "gpu_name", NULL, f_name},
    {"serial", "gpu_serial", NULL, f_serial},
    {"uuid", "gpu_uuid", NULL, f_uuid},
    {"pci.bus_id", "gpu_bus_id", NULL, f_bus_id},
    {"pci.domain", NULL, NULL, f_pci_domain},
    {"pci.bus", NULL, NULL, f_pci_bus},
    {"pci.device", NULL, NULL, f_pci_device},
    {"pci.device_id", NULL, NULL, f_pci_device_id},
    {"pci.sub_device_id", NULL, NULL, f_pci_sub_id},
    {"pcie.link.gen.current", "pcie.link.gen.gpucurrent", NULL, f_gen_cur},
    {"pcie.link.gen.max", "pcie.link.gen.gpumax", NULL, f_gen_max},
    {"pcie.link.width.current", NULL, NULL, f_width_cur},
    {"pcie.link.width.max", NULL, NULL, f_width_max},
    {"index", NULL, NULL, f_index},
    {"display_mode", NULL, NULL, f_display_mode},
    {"display_active", NULL, NULL, f_display_active},
    {"persistence_mode", NULL, NULL, f_persistence},
    {"vbios_version", NULL, NULL, f_vbios},
    {"fan.speed", NULL, "%", f_fan},
    {"pstate", NULL, NULL, f_pstate},
    {"clocks_event_reasons.active", "clocks_throttle_reasons.active", NULL, f_reasons},
    {"memory.total", NULL, "MiB", f_mem_total},
    {"memory.reserved", NULL, "MiB", f_mem_reserved},
    {"memory.used", NULL, "MiB", f_mem_used},
    {"memory.free", NULL, "MiB", f_mem_free},
    {"compute_mode", NULL, NULL, f_compute_mode},
    {"compute_cap", NULL, NULL, f_cc},
    {"utilization.gpu", NULL, "%", f_util_gpu},
    {"utilization.memory", NULL, "%", f_util_mem},
    {"ecc.mode.current", NULL, NULL, f_ecc_cur},
    {"ecc.mode.pending", NULL, NULL, f_ecc_pend},
    {"ecc.errors.uncorrected.volatile.total", NULL, NULL, f_ecc_unc},
    {"temperature.gpu", NULL, NULL, f_temp},
    {"temperature.memory", NULL, NULL, f_na},
    {"power.draw", NULL, "W", f_power_draw},
    {"power.limit", NULL, "W", f_power_limit},
    {"enforced.power.limit", NULL, "W", f_power_enforced},
    {"power.default_limit", NULL, "W", f_power_default},
    {"power.min_limit", NULL, "W", f_power_min},
    {"power.max_limit", NULL, "W", f_power_max},
    {"clocks.current.graphics", "clocks.gr", "MHz", f_clk_gr},
    {"clocks.current.sm", "clocks.sm", "MHz", f_clk_sm},
    {"clocks.current.memory", "clocks.mem", "MHz", f_clk_mem},
    {"clocks.current.video", "clocks.video", "MHz", f_clk_video},
    {"clocks.applications.graphics", "clocks.applications.gr", "MHz", f_app_gr},
    {"clocks.applications.memory", "clocks.applications.mem", "MHz", f_app_mem},
    {"clocks.max.graphics", "clocks.max.gr", "MHz", f_max_gr},
    {"clocks.max.sm", NULL, "MHz", f_max_sm},
    {"clocks.max.memory", "clocks.max.mem", "MHz", f_max_mem},
    {"mig.mode.current", NULL, NULL, f_mig_cur},
    {"mig.mode.pending", NULL, NULL, f_mig_pend},
};
#define N_GPU_FIELDS (sizeof GPU_FIELDS / sizeof GPU_FIELDS[0])

/* The header shows what the real tool shows: the canonical name, even when an alias was asked for
 * (clocks.sm -> clocks.current.sm is the one exception it keeps short, and so do we). */
static const field_t *lookup(const field_t *table, size_t n, const char *name, const char **shown)
{
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(table[i].name, name)) {
            *shown = table[i].name;
            return &table[i];
        }
        if (table[i].alias && !strcmp(table[i].alias, name)) {
            /* Short clock names head their own column; gpu_* aliases map to the plain name. */
            *shown = !strncmp(name, "clocks.", 7) ? name : table[i].name;
            return &table[i];
        }
    }
    return NULL;
}

#define MAX_FIELDS 128

typedef struct {
    const field_t *f[MAX_FIELDS];
    const char *shown[MAX_FIELDS];
    unsigned n;
    char buf[4096];
} selection_t;

static int parse_fields(const field_t *table, size_t n, const char *spec, selection_t *sel)
{
    snprintf(sel->buf, sizeof sel->buf, "%s", spec ? spec : "");
    sel->n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(sel->buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        char *end = tok + strlen(tok);
        while (end > tok && end[-1] == ' ')
            *--end = '\0';
        const field_t *f = lookup(table, n, tok, &sel->shown[sel->n]);
        if (!f || sel->n == MAX_FIELDS) {
            printf("Field \"%s\" is not a valid field to query.\n\n", tok);
            return SMI_EXIT_ARGS;
        }
        sel->f[sel->n++] = f;
    }
    if (!sel->n) {
        printf("Field \"\" is not a valid field to query.\n\n");
        return SMI_EXIT_ARGS;
    }
    return SMI_OK;
}

static void print_header(const selection_t *sel, const smi_format *fmt)
{
    if (fmt->noheader)
        return;
    for (unsigned i = 0; i < sel->n; i++) {
        printf("%s%s", i ? ", " : "", sel->shown[i]);
        if (sel->f[i]->unit && !fmt->nounits)
            printf(" [%s]", sel->f[i]->unit);
    }
    printf("\n");
}

static void print_row(const selection_t *sel, const ctx_t *c, const smi_format *fmt)
{
    for (unsigned i = 0; i < sel->n; i++) {
        char v[256];
        const char *sep = i ? ", " : "";
        if (sel->f[i]->fn(c, v, sizeof v) != 0)
            printf("%s[N/A]", sep);
        else if (sel->f[i]->unit && !fmt->nounits)
            printf("%s%s %s", sep, v, sel->f[i]->unit);
        else
            printf("%s%s", sep, v);
    }
    printf("\n");
}

int smi_query_gpu(const smi_gpus *g, const char *fields, const smi_format *fmt)
{
    static selection_t sel;
    int rc = parse_fields(GPU_FIELDS, N_GPU_FIELDS, fields, &sel);
    if (rc)
        return rc;
    unsigned count = 0;
    nvmlDeviceGetCount_v2(&count);
    print_header(&sel, fmt);
    for (unsigned k = 0; k < g->count; k++) {
        ctx_t c = {g->dev[k], g->index[k], count};
        print_row(&sel, &c, fmt);
    }
    return SMI_OK;
}

/* ---- --query-compute-apps ---- */

typedef struct {
    ctx_t gpu;
    unsigned pid;
    unsigned long long used;
} app_t;

static const app_t *cur_app;
static int a_pid(const ctx_t *c, char *o, size_t n) { (void)c; snprintf(o, n, "%u", cur_app->pid); return 0; }
static int a_name(const ctx_t *c, char *o, size_t n)
{
    (void)c;
    return OK(nvmlSystemGetProcessName(cur_app->pid, o, (unsigned)n));
}
static int a_used(const ctx_t *c, char *o, size_t n)
{
    (void)c;
    snprintf(o, n, "%llu", smi_mib(cur_app->used));
    return 0;
}

static const field_t APP_FIELDS[] = {
    {"timestamp", NULL, NULL, f_timestamp},
    {"gpu_name", NULL, NULL, f_name},
    {"gpu_bus_id", NULL, NULL, f_bus_id},
    {"gpu_serial", NULL, NULL, f_serial},
    {"gpu_uuid", NULL, NULL, f_uuid},
    {"pid", NULL, NULL, a_pid},
    {"process_name", "name", NULL, a_name},
    {"used_gpu_memory", "used_memory", "MiB", a_used},
};

int smi_query_apps(const smi_gpus *g, const char *fields, const smi_format *fmt)
{
    static selection_t sel;
    int rc = parse_fields(APP_FIELDS, sizeof APP_FIELDS / sizeof APP_FIELDS[0], fields, &sel);
    if (rc)
        return rc;
    print_header(&sel, fmt);
    for (unsigned k = 0; k < g->count; k++) {
        nvmlProcessInfo_t procs[256];
        unsigned n = 256;
        if (nvmlDeviceGetComputeRunningProcesses_v3(g->dev[k], &n, procs) != NVML_SUCCESS)
            continue;
        for (unsigned i = 0; i < n; i++) {
            app_t a = {{g->dev[k], g->index[k], g->count}, procs[i].pid, procs[i].usedGpuMemory};
            cur_app = &a;
            print_row(&sel, &a.gpu, fmt);
        }
    }
    return SMI_OK;
}

int smi_help_query_gpu(void)
{
    printf("List of valid properties to query for the switch \"--query-gpu=\":\n\n");
    for (size_t i = 0; i < N_GPU_FIELDS; i++) {
        if (GPU_FIELDS[i].alias)
            printf("\"%s\" or \"%s\"\n", GPU_FIELDS[i].name, GPU_FIELDS[i].alias);
        else
            printf("\"%s\"\n", GPU_FIELDS[i].name);
    }
    return SMI_OK;
}
