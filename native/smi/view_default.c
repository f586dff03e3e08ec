/* The default view, in the layout of the reported driver's branch (../shared/facts/nvidia-smi-formats.md):
 * 91-character rows (89 between the borders), a GPU table of three lines per GPU, then the process table.
 * 570 and later give the PID column six more characters (the process name six fewer); 580 and later close the
 * version box with a '+' rule. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smi.h"

#define RULE "+-----------------------------------------------------------------------------------------+"
#define GPU_RULE "+-----------------------------------------+------------------------+----------------------+"
#define VERSION_RULE_550 "|-----------------------------------------+------------------------+----------------------+"

static void cut(char *dst, size_t len, const char *src, size_t max)
{
    /* Long values are cut to max characters ending in "...", as the real tool does. */
    if (strlen(src) <= max)
        snprintf(dst, len, "%s", src);
    else
        snprintf(dst, len, "%.*s...", (int)(max - 3), src);
}

static void cut_front(char *dst, size_t len, const char *src, size_t max)
{
    size_t n = strlen(src);
    if (n <= max)
        snprintf(dst, len, "%s", src);
    else
        snprintf(dst, len, "...%s", src + n - (max - 3));
}

static void gpu_rows(nvmlDevice_t d, unsigned index)
{
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "N/A", shown[40];
    nvmlDeviceGetName(d, name, sizeof name);
    cut(shown, sizeof shown, name, 27);

    nvmlEnableState_t pm, disp;
    const char *persist = nvmlDeviceGetPersistenceMode(d, &pm) ? "N/A" : pm ? "On" : "Off";
    const char *disp_a = nvmlDeviceGetDisplayActive(d, &disp) ? "N/A" : disp ? "On" : "Off";
    nvmlPciInfo_t pci;
    char bus[32] = "N/A";
    if (nvmlDeviceGetPciInfo_v3(d, &pci) == NVML_SUCCESS)
        snprintf(bus, sizeof bus, "%s", pci.busId);

    char ecc[24] = "N/A";
    nvmlEnableState_t cur, pend;
    if (nvmlDeviceGetEccMode(d, &cur, &pend) == NVML_SUCCESS) {
        unsigned long long unc = 0;
        if (!cur)
            snprintf(ecc, sizeof ecc, "Off");
        else if (smi_mig_on(d)) /* errors are the instances' then: the MIG table shows them */
            snprintf(ecc, sizeof ecc, "On");
        else if (nvmlDeviceGetTotalEccErrors(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &unc) == 0)
            snprintf(ecc, sizeof ecc, "%llu", unc);
    }
    printf("|%4u  %-30s %-3s |%19s %3s |%21s |\n", index, shown, persist, bus, disp_a, ecc);

    char fan[8] = "N/A", temp[8] = "N/A", perf[8] = "N/A", pwr[16] = "N/A", cap[16] = "N/A";
    unsigned v;
    if (nvmlDeviceGetFanSpeed(d, &v) == NVML_SUCCESS)
        snprintf(fan, sizeof fan, "%u%%", v);
    if (nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS)
        snprintf(temp, sizeof temp, "%uC", v);
    nvmlPstates_t ps;
    if (nvmlDeviceGetPerformanceState(d, &ps) == NVML_SUCCESS && ps != NVML_PSTATE_UNKNOWN)
        snprintf(perf, sizeof perf, "P%d", (int)ps);
    /* Whole watts, cut: a real H200 drawing 81.69 W shows 81W (default.txt, query_common.txt). */
    if (nvmlDeviceGetPowerUsage(d, &v) == NVML_SUCCESS)
        snprintf(pwr, sizeof pwr, "%uW", v / 1000);
    if (nvmlDeviceGetEnforcedPowerLimit(d, &v) == NVML_SUCCESS)
        snprintf(cap, sizeof cap, "%uW", v / 1000);

    char used[24] = "N/A", total[24] = "N/A";
    nvmlMemory_v2_t mem = {.version = nvmlMemory_v2};
    if (nvmlDeviceGetMemoryInfo_v2(d, &mem) == NVML_SUCCESS) {
        snprintf(used, sizeof used, "%lluMiB", smi_mib(mem.used));
        snprintf(total, sizeof total, "%lluMiB", smi_mib(mem.total));
    }
    char util[8] = "N/A";
    nvmlUtilization_t u;
    if (nvmlDeviceGetUtilizationRates(d, &u) == NVML_SUCCESS)
        snprintf(util, sizeof util, "%u%%", u.gpu);
    static const char *const modes[] = {"Default", "E. Thread", "Prohibited", "E. Process"};
    nvmlComputeMode_t cm;
    const char *compute = nvmlDeviceGetComputeMode(d, &cm) == NVML_SUCCESS && (unsigned)cm < 4 ? modes[cm] : "N/A";
    printf("| %3s   %3s    %-2s%16s / %5s |%11s / %9s |%8s%13s |\n", fan, temp, perf, pwr, cap, used, total, util,
           compute);

    unsigned mig_cur, mig_pend;
    const char *mig = nvmlDeviceGetMigMode(d, &mig_cur, &mig_pend) ? "N/A" : mig_cur ? "Enabled" : "Disabled";
    printf("|                                         |                        |%21s |\n", mig);
}

static int process_rows(const smi_gpus *g, int wide_pid)
{
    int any = 0;
    for (unsigned k = 0; k < g->count; k++) {
        for (int graphics = 0; graphics < 2; graphics++) {
            nvmlProcessInfo_t procs[256];
            unsigned n = 256;
            nvmlReturn_t rc = graphics ? nvmlDeviceGetGraphicsRunningProcesses_v3(g->dev[k], &n, procs)
                                       : nvmlDeviceGetComputeRunningProcesses_v3(g->dev[k], &n, procs);
            if (rc != NVML_SUCCESS)
                continue;
            for (unsigned i = 0; i < n; i++) {
                char name[256] = "", shown[48], mem[24];
                if (nvmlSystemGetProcessName(procs[i].pid, name, sizeof name) != NVML_SUCCESS)
                    snprintf(name, sizeof name, "N/A");
                int name_width = wide_pid ? 35 : 41;
                cut_front(shown, sizeof shown, name, (size_t)name_width);
                snprintf(mem, sizeof mem, "%lluMiB", smi_mib(procs[i].usedGpuMemory));
                char gi[12] = "N/A", ci[12] = "N/A"; /* a process in a MIG instance shows its IDs */
                if (procs[i].gpuInstanceId != 0xFFFFFFFF) {
                    snprintf(gi, sizeof gi, "%u", procs[i].gpuInstanceId);
                    snprintf(ci, sizeof ci, "%u", procs[i].computeInstanceId);
                }
                printf("|%5u %5s%5s%*u%7s   %-*s%11s |\n", g->index[k], gi, ci, wide_pid ? 16 : 10, procs[i].pid,
                       graphics ? "G" : "C", name_width, shown, mem);
                any = 1;
            }
        }
    }
    return any;
}

int smi_view_default(const smi_gpus *g)
{
    char now[64], driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "N/A", cuda[16] = "N/A";
    smi_now(now, sizeof now, 0);
    int cv;
    nvmlSystemGetDriverVersion(driver, sizeof driver);
    if (nvmlSystemGetCudaDriverVersion_v2(&cv) == NVML_SUCCESS)
        snprintf(cuda, sizeof cuda, "%d.%d", cv / 1000, (cv % 1000) / 10);

    printf("%s       \n", now);
    printf(RULE "\n");
    printf("| NVIDIA-SMI %-23sDriver Version: %-15sCUDA Version: %-9s|\n", driver, driver, cuda);
    int branch = atoi(driver);
    printf("%s\n", branch >= 580 ? GPU_RULE : VERSION_RULE_550);
    printf("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n"
           "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n"
           "|                                         |                        |               MIG M. |\n"
           "|=========================================+========================+======================|\n");
    for (unsigned k = 0; k < g->count; k++) {
        gpu_rows(g->dev[k], g->index[k]);
        printf(GPU_RULE "\n");
    }
    smi_mig_table(g, branch);
    /* The line between the tables: empty from 580 on (a real H200 on 580.159.04), spaces before. */
    printf("%s\n", branch >= 580 ? "" : "                                                                                         ");
    printf(RULE "\n"
           "| Processes:                                                                              |\n"
           "%s"
           "|        ID   ID                                                               Usage      |\n"
           "|=========================================================================================|\n",
           branch >= 570 ? "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |\n"
                         : "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |\n");
    if (!process_rows(g, branch >= 570))
        printf("|  No running processes found                                                             |\n");
    printf(RULE "\n");
    return SMI_OK;
}
