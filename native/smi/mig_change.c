/* nvidia-smi mig -cgi, -dgi, -cci, -dci: each change goes to NVML, and NVML refuses it as a driver refuses a user
 * or container without the capability (NO_PERMISSION; the layout is the device spec's to set). The tool prints
 * what a driver prints when the first change fails, then stops with NVML's code as its status:
 *   Unable to create a GPU instance on GPU  0 using profile 14: In use by another client
 *   Failed to create GPU instances: In use by another client
 * (580.105.08, "Unable to create" captures; "Unable to destroy GPU instance ID  1 from GPU  0: ..." with
 * "Failed to destroy GPU instances: ..." likewise). The compute instance messages follow the same pattern with
 * the words of the success lines ("... compute instance ID  0 from GPU  0 GPU instance ID  1"). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "smi.h"

#define MAX_GI 16

static int refused(nvmlReturn_t rc, const char *what, const char *line)
{
    printf("%s: %s\nFailed to %s: %s\n", line, nvmlErrorString(rc), what, nvmlErrorString(rc));
    return (int)rc;
}

/* A -cgi/-cci word: a profile ID, or a name with or without its "MIG " ("9", "3g.40gb", "MIG 3g.40gb"). */
static int names_match(const char *word, const char *name)
{
    if (!strncasecmp(word, "MIG ", 4))
        word += 4;
    if (!strncasecmp(name, "MIG ", 4))
        name += 4;
    return !strcasecmp(word, name);
}

static int is_number(const char *w)
{
    if (!*w)
        return 0;
    for (; *w; w++)
        if (!isdigit((unsigned char)*w))
            return 0;
    return 1;
}

/* An ID NVML knows no profile by, so an unknown name is refused by NVML (INVALID_ARGUMENT) as by a driver. */
#define NO_PROFILE 0xFFFFFFFFu

static unsigned gi_profile_id(nvmlDevice_t d, const char *word)
{
    if (is_number(word))
        return (unsigned)strtoul(word, NULL, 10);
    nvmlGpuInstanceProfileInfo_v2_t p[32];
    unsigned n = smi_gi_profiles(d, p, 32);
    for (unsigned i = 0; i < n; i++)
        if (names_match(word, p[i].name))
            return p[i].id;
    return NO_PROFILE;
}

static unsigned ci_profile_id(nvmlGpuInstance_t gi, const char *word, unsigned gi_slices)
{
    if (word && is_number(word))
        return (unsigned)strtoul(word, NULL, 10);
    for (unsigned k = 0; k < 32; k++) {
        nvmlComputeInstanceProfileInfo_v2_t c = {.version = nvmlComputeInstanceProfileInfo_v2};
        nvmlReturn_t rc = nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, k, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &c);
        if (rc == NVML_ERROR_INVALID_ARGUMENT)
            break;
        /* No word: the default, the profile spanning the GPU instance. */
        if (rc == NVML_SUCCESS && (word ? names_match(word, c.name) : c.sliceCount == gi_slices))
            return k;
    }
    return NO_PROFILE;
}

static int create_gis(const smi_gpus *g, const char *profiles)
{
    char list[256];
    snprintf(list, sizeof list, "%s", profiles ? profiles : "");
    for (unsigned k = 0; k < g->count; k++) {
        char copy[256], *save = NULL;
        memcpy(copy, list, sizeof copy);
        for (char *w = strtok_r(copy, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
            nvmlGpuInstance_t gi;
            nvmlReturn_t rc = nvmlDeviceCreateGpuInstance(g->dev[k], gi_profile_id(g->dev[k], w), &gi);
            if (rc != NVML_SUCCESS) {
                char line[160];
                snprintf(line, sizeof line, "Unable to create a GPU instance on GPU %2u using profile %s", g->index[k], w);
                return refused(rc, "create GPU instances", line);
            }
        }
    }
    return SMI_OK;
}

static int change_cis(const smi_gpus *g, const smi_mig_args *a, int create)
{
    int any = 0;
    for (unsigned k = 0; k < g->count; k++) {
        nvmlGpuInstance_t gis[MAX_GI];
        nvmlGpuInstanceInfo_t info[MAX_GI];
        unsigned n = smi_gpu_instances(g->dev[k], gis, info, MAX_GI);
        for (unsigned i = 0; i < n; i++) {
            if (!smi_id_listed(a->gi, info[i].id))
                continue;
            any = 1;
            char line[200];
            if (create) {
                nvmlGpuInstanceProfileInfo_v2_t gip = {.version = nvmlGpuInstanceProfileInfo_v2};
                nvmlDeviceGetGpuInstanceProfileInfoByIdV(g->dev[k], info[i].profileId, &gip);
                /* The first profile of the list: the refusal stops the tool before a second. */
                char shown[64] = "";
                if (a->profiles) {
                    snprintf(shown, sizeof shown, "%s", a->profiles);
                    shown[strcspn(shown, ",")] = '\0';
                }
                const char *word = a->profiles ? shown : NULL;
                unsigned id = ci_profile_id(gis[i], word, gip.sliceCount);
                nvmlComputeInstance_t ci;
                nvmlReturn_t rc = nvmlGpuInstanceCreateComputeInstance(gis[i], id, &ci);
                if (rc != NVML_SUCCESS) {
                    if (!word) /* no list: the default profile, named by its ID as -cci 2 would name it */
                        snprintf(shown, sizeof shown, "%u", id);
                    snprintf(line, sizeof line,
                             "Unable to create a compute instance on GPU %2u GPU instance ID %2u using profile %s",
                             g->index[k], info[i].id, shown);
                    return refused(rc, "create compute instances", line);
                }
                continue;
            }
            for (unsigned p = 0; p < 32; p++) {
                nvmlComputeInstance_t cis[8];
                unsigned count = 8;
                nvmlReturn_t rc = nvmlGpuInstanceGetComputeInstances(gis[i], p, cis, &count);
                if (rc == NVML_ERROR_INVALID_ARGUMENT)
                    break;
                for (unsigned c = 0; rc == NVML_SUCCESS && c < count; c++) {
                    nvmlComputeInstanceInfo_t ci;
                    if (nvmlComputeInstanceGetInfo_v2(cis[c], &ci) != NVML_SUCCESS || !smi_id_listed(a->ci, ci.id))
                        continue;
                    nvmlReturn_t d = nvmlComputeInstanceDestroy(cis[c]);
                    if (d != NVML_SUCCESS) {
                        snprintf(line, sizeof line, "Unable to destroy compute instance ID %2u from GPU %2u GPU instance ID %2u",
                                 ci.id, g->index[k], info[i].id);
                        return refused(d, "destroy compute instances", line);
                    }
                }
            }
        }
    }
    if (!any) {
        printf("No GPU instances found.\n");
        return SMI_EXIT_NOT_FOUND;
    }
    return SMI_OK;
}

static int destroy_gis(const smi_gpus *g, const char *ids)
{
    int any = 0;
    for (unsigned k = 0; k < g->count; k++) {
        nvmlGpuInstance_t gis[MAX_GI];
        nvmlGpuInstanceInfo_t info[MAX_GI];
        unsigned n = smi_gpu_instances(g->dev[k], gis, info, MAX_GI);
        for (unsigned i = 0; i < n; i++) {
            if (!smi_id_listed(ids, info[i].id))
                continue;
            any = 1;
            nvmlReturn_t rc = nvmlGpuInstanceDestroy(gis[i]);
            if (rc != NVML_SUCCESS) {
                char line[120];
                snprintf(line, sizeof line, "Unable to destroy GPU instance ID %2u from GPU %2u", info[i].id, g->index[k]);
                return refused(rc, "destroy GPU instances", line);
            }
        }
    }
    if (!any) {
        printf("No GPU instances found.\n");
        return SMI_EXIT_NOT_FOUND;
    }
    return SMI_OK;
}

int smi_mig_change(const smi_gpus *g, const smi_mig_args *a)
{
    switch (a->op) {
    case SMI_MIG_CGI: return create_gis(g, a->profiles);
    case SMI_MIG_DGI: return destroy_gis(g, a->gi);
    case SMI_MIG_CCI: return change_cis(g, a, 1);
    default: return change_cis(g, a, 0);
    }
}
