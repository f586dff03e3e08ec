/* The default view's "MIG devices:" table: after the GPU table when a GPU shown is in MIG mode, two lines a MIG
 * device (framebuffer, then BAR1), as the 570.148.08 capture of an A100 80GB split 3g.40gb+2g.20gb+1g.10gb x2 in
 * ztouchnetworks/k8s-dra-driver-gpu README.md lays it out:
 *   |  0    1   0   0  |             107MiB / 40192MiB    | 42      0 |  3   0    2    0    0 |
 *   |                  |                 0MiB / 65535MiB  |           |                       |
 * 580 right-aligns the BAR1 pair like the framebuffer one (580.105.08, RTX PRO 6000: "0MiB /  8327MiB    |");
 * 550 has the 570 rows under other engine headings (550.54.14 on an A100-SXM4-80GB).
 * A GPU in MIG mode with no MIG device gets the "No MIG devices found" row. */
#include <stdio.h>

#include "smi.h"

#define WIDE_RULE "+-----------------------------------------------------------------------------------------+"
#define MIG_RULE "+------------------+----------------------------------+-----------+-----------------------+"

static void mib_pair(char *out, size_t len, int ok, unsigned long long used, unsigned long long total, int bar1_570)
{
    char u[24], t[24];
    if (!ok) {
        snprintf(out, len, "%32s  ", "N/A");
        return;
    }
    snprintf(u, sizeof u, "%lluMiB", smi_mib(used));
    snprintf(t, sizeof t, "%lluMiB", smi_mib(total));
    if (bar1_570)
        snprintf(out, len, "%21s / %8s  ", u, t);
    else
        snprintf(out, len, "%19s / %8s    ", u, t);
}

static void mig_rows(nvmlDevice_t parent, unsigned gpu, nvmlDevice_t mig, int branch)
{
    unsigned gi = 0, ci = 0, index = 0;
    nvmlDeviceGetGpuInstanceId(mig, &gi);
    nvmlDeviceGetComputeInstanceId(mig, &ci);
    nvmlDeviceGetIndex(mig, &index);

    char fb[80], bar1[80], unc[24] = "N/A";
    nvmlMemory_t mem;
    int ok = nvmlDeviceGetMemoryInfo(mig, &mem) == NVML_SUCCESS;
    mib_pair(fb, sizeof fb, ok, ok ? mem.used : 0, ok ? mem.total : 0, 0);
    nvmlBAR1Memory_t b;
    ok = nvmlDeviceGetBAR1MemoryInfo(mig, &b) == NVML_SUCCESS;
    mib_pair(bar1, sizeof bar1, ok, ok ? b.bar1Used : 0, ok ? b.bar1Total : 0, branch < 580);

    /* The volatile uncorrected count, N/A with ECC off (the 580 capture's ECC-less board); NVML counts errors per
     * board, so the instance shows its parent's. */
    nvmlEnableState_t cur, pend;
    unsigned long long errors = 0;
    if (nvmlDeviceGetEccMode(parent, &cur, &pend) == NVML_SUCCESS && cur == NVML_FEATURE_ENABLED &&
        (nvmlDeviceGetTotalEccErrors(mig, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &errors) == NVML_SUCCESS ||
         nvmlDeviceGetTotalEccErrors(parent, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &errors) ==
             NVML_SUCCESS))
        snprintf(unc, sizeof unc, "%llu", errors);

    nvmlDeviceAttributes_t at;
    if (nvmlDeviceGetAttributes_v2(mig, &at) != NVML_SUCCESS) {
        printf("|%3u %4u %3u %3u  |%s|%10s |%22s |\n", gpu, gi, ci, index, fb, "N/A", "N/A");
    } else {
        printf("|%3u %4u %3u %3u  |%s|%3u%7s |%3u%4u%5u%5u%5u |\n", gpu, gi, ci, index, fb, at.multiprocessorCount, unc,
               at.sharedCopyEngineCount, at.sharedEncoderCount, at.sharedDecoderCount, at.sharedOfaCount,
               at.sharedJpegCount);
    }
    printf("|                  |%s|           |                       |\n", bar1);
    printf(MIG_RULE "\n");
}

void smi_mig_table(const smi_gpus *g, int branch)
{
    int any_mode = 0;
    for (unsigned k = 0; k < g->count; k++)
        any_mode |= smi_mig_on(g->dev[k]);
    if (!any_mode)
        return;
    /* 550 centres "Shared" less and packs the engine names (550.54.14, A100-SXM4-80GB). */
    int r550 = branch < 570;
    printf("\n" WIDE_RULE "\n"
           "| MIG devices:                                                                            |\n" MIG_RULE "\n"
           "| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|%s|\n"
           "|      ID  ID  Dev |                       BAR1-Usage | SM     Unc|%s|\n"
           "|                  |                                  |        ECC|                       |\n"
           "|==================+==================================+===========+=======================|\n",
           r550 ? "      Shared           " : "        Shared         ",
           r550 ? " CE ENC DEC OFA JPG    " : " CE ENC  DEC  OFA  JPG ");
    int any = 0;
    for (unsigned k = 0; k < g->count; k++) {
        if (!smi_mig_on(g->dev[k]))
            continue;
        nvmlDevice_t migs[16];
        unsigned n = smi_mig_devices(g->dev[k], migs, 16);
        for (unsigned i = 0; i < n; i++, any = 1)
            mig_rows(g->dev[k], g->index[k], migs[i], branch);
    }
    if (!any) {
        smi_row_text(91, "No MIG devices found");
        printf(WIDE_RULE "\n");
    }
}
