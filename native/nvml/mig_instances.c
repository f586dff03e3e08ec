/* MIG GPU and compute instances: the board's GPU instance profiles and placements (catalog facts), the GPU
 * instances of its layout, and each one's single compute instance spanning it (ID 0, as `nvidia-smi mig -cgi
 * ... -C` makes). Creating or destroying instances, and switching MIG mode, answer NO_PERMISSION: what a
 * container without CAP_SYS_ADMIN hears from a real driver; the layout is the device spec's to set. */
#include <stdint.h>
#include <stdio.h>

#include "fg_nvml.h"

/* Opaque to clients: the address alone says which board and which GPU instance of its layout. */
struct nvmlGpuInstance_st {
    unsigned char unused;
};
struct nvmlComputeInstance_st {
    unsigned char unused;
};

/* gi_lookup reads board and slot off the address: one byte per handle. */
_Static_assert(sizeof(struct nvmlGpuInstance_st) == 1 && sizeof(struct nvmlComputeInstance_st) == 1,
               "instance handles are one byte each");

static struct nvmlGpuInstance_st gi_handles[FG_MAX_DEVICES][FG_MIG_MAX_INSTANCES];
static struct nvmlComputeInstance_st ci_handles[FG_MAX_DEVICES][FG_MIG_MAX_INSTANCES];

/* Slice counts of the NVML_COMPUTE_INSTANCE_PROFILE_* constants; 0: a kind (rev1, NVL) not modelled. */
static const unsigned ci_slices[NVML_COMPUTE_INSTANCE_PROFILE_COUNT] = {1, 2, 3, 4, 7, 8, 6, 0, 0};

typedef struct {
    const fg_device *d;
    const fg_mig_instance *m;
    const fg_mig_profile *p;
} gi_ref;

static nvmlReturn_t gi_lookup(const void *h, const void *table, gi_ref *out)
{
    if (!fg_is_initialized())
        return NVML_ERROR_UNINITIALIZED;
    uintptr_t p = (uintptr_t)h, base = (uintptr_t)table;
    size_t slots = (size_t)FG_MAX_DEVICES * FG_MIG_MAX_INSTANCES;
    if (!h || p < base || p >= base + slots)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned board = (unsigned)((p - base) / FG_MIG_MAX_INSTANCES), slot = (unsigned)((p - base) % FG_MIG_MAX_INSTANCES);
    if (board >= fg_devs.count || slot >= fg_devs.dev[board].mig_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    out->d = &fg_devs.dev[board];
    out->m = &out->d->mig[slot];
    out->p = &out->d->mig_board.profiles[out->m->profile];
    return NVML_SUCCESS;
}

#define FG_GI(handle, var)                                                                                        \
    gi_ref var;                                                                                                   \
    do {                                                                                                          \
        nvmlReturn_t fg_rc_ = gi_lookup((handle), gi_handles, &var);                                              \
        if (fg_rc_ != NVML_SUCCESS)                                                                               \
            return fg_rc_;                                                                                        \
    } while (0)

static nvmlGpuInstance_t gi_handle(const gi_ref *r) { return &gi_handles[r->d->index][r->m->index]; }

/* A whole GPU in MIG mode: what every instance query asks first. */
static nvmlReturn_t need_mig_mode(const fg_device *d)
{
    return d->mig_supported && d->mig_mode ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

/* A board profile by its -lgip ID (what profileId arguments are); -1 if the board has none. */
static int profile_by_id(const fg_device *d, unsigned id)
{
    for (unsigned i = 0; i < d->mig_board.nprofiles; i++)
        if (d->mig_board.profiles[i].id == id)
            return (int)i;
    return -1;
}

static int profile_by_nvml(const fg_device *d, unsigned nvml_profile)
{
    for (unsigned i = 0; i < d->mig_board.nprofiles; i++)
        if (d->mig_board.profiles[i].nvml_profile == nvml_profile)
            return (int)i;
    return -1;
}

/* ---- GPU instance profiles and placements ---- */

static void fill_gip_v2(const fg_mig_profile *p, nvmlGpuInstanceProfileInfo_v2_t *o)
{
    o->id = p->id;
    o->isP2pSupported = p->p2p;
    o->sliceCount = p->compute_slices;
    o->instanceCount = p->instances;
    o->multiprocessorCount = p->sm_count;
    o->copyEngineCount = p->copy_engines;
    o->decoderCount = p->decoders;
    o->encoderCount = p->encoders;
    o->jpegCount = p->jpeg;
    o->ofaCount = p->ofa;
    o->memorySizeMB = p->memory_mib;
    snprintf(o->name, sizeof o->name, "MIG %s", p->name); /* as `nvidia-smi mig -lgip` names it */
}

/* v2 and v3 differ in layout (v3 drops isP2pSupported, adds capabilities): fill v2, then lay it out. */
static nvmlReturn_t profile_info_v(const fg_mig_profile *p, nvmlGpuInstanceProfileInfo_v2_t *info)
{
    nvmlGpuInstanceProfileInfo_v2_t v2 = {.version = nvmlGpuInstanceProfileInfo_v2};
    fill_gip_v2(p, &v2);
    if (info->version == nvmlGpuInstanceProfileInfo_v2) {
        *info = v2;
        return NVML_SUCCESS;
    }
    if (info->version != nvmlGpuInstanceProfileInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlGpuInstanceProfileInfo_v3_t *v3 = (nvmlGpuInstanceProfileInfo_v3_t *)info;
    *v3 = (nvmlGpuInstanceProfileInfo_v3_t){
        .version = nvmlGpuInstanceProfileInfo_v3, .id = v2.id, .sliceCount = v2.sliceCount,
        .instanceCount = v2.instanceCount, .multiprocessorCount = v2.multiprocessorCount,
        .copyEngineCount = v2.copyEngineCount, .decoderCount = v2.decoderCount, .encoderCount = v2.encoderCount,
        .jpegCount = v2.jpegCount, .ofaCount = v2.ofaCount, .memorySizeMB = v2.memorySizeMB,
        .capabilities = (p->p2p ? NVML_GPU_INSTANCE_PROFILE_CAPS_P2P : 0u) |
                        (strstr(p->name, "gfx") ? NVML_GPU_INSTANCE_PROFILE_CAPS_GFX : 0u)};
    memcpy(v3->name, v2.name, sizeof v3->name);
    return NVML_SUCCESS;
}

/* `profile` is an NVML_GPU_INSTANCE_PROFILE_* constant: clients enumerate from 0 until INVALID_ARGUMENT (the
 * header's forward-compatible walk); one the board lacks is NOT_SUPPORTED. */
static nvmlReturn_t profile_by_constant(nvmlDevice_t device, unsigned profile, const fg_mig_profile **out)
{
    FG_DEVICE(device, d);
    if (!d->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    if (profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    int i = profile_by_nvml(d, profile);
    if (i < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = &d->mig_board.profiles[i];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info)
{
    const fg_mig_profile *p = NULL;
    nvmlReturn_t rc = profile_by_constant(device, profile, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    FG_NEED(info);
    nvmlGpuInstanceProfileInfo_v2_t v2;
    fill_gip_v2(p, &v2);
    *info = (nvmlGpuInstanceProfileInfo_t){
        .id = v2.id, .isP2pSupported = v2.isP2pSupported, .sliceCount = v2.sliceCount,
        .instanceCount = v2.instanceCount, .multiprocessorCount = v2.multiprocessorCount,
        .copyEngineCount = v2.copyEngineCount, .decoderCount = v2.decoderCount, .encoderCount = v2.encoderCount,
        .jpegCount = v2.jpegCount, .ofaCount = v2.ofaCount, .memorySizeMB = v2.memorySizeMB};
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info)
{
    const fg_mig_profile *p = NULL;
    nvmlReturn_t rc = profile_by_constant(device, profile, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    FG_NEED(info);
    return profile_info_v(p, info);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned int profileId,
                                                      nvmlGpuInstanceProfileInfo_v2_t *info)
{
    FG_DEVICE(device, d);
    FG_NEED(info);
    if (!d->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    int i = profile_by_id(d, profileId);
    if (i < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    return profile_info_v(&d->mig_board.profiles[i], info);
}

/* Every placement the profile allows, MIG mode on or off (the header says so). */
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                           nvmlGpuInstancePlacement_t *placements,
                                                           unsigned int *count)
{
    FG_DEVICE(device, d);
    FG_NEED(count);
    if (!d->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    int i = profile_by_id(d, profileId);
    if (i < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    const fg_mig_profile *p = &d->mig_board.profiles[i];
    if (!placements) {
        *count = p->nstarts;
        return NVML_SUCCESS;
    }
    if (*count < p->nstarts) {
        *count = p->nstarts;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned k = 0; k < p->nstarts; k++)
        placements[k] = (nvmlGpuInstancePlacement_t){.start = p->starts[k], .size = p->size};
    *count = p->nstarts;
    return NVML_SUCCESS;
}

/* The pre-v2 symbol: same arguments (v2 fixed how drivers filled `count`, which this one already does). */
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profileId,
                                                        nvmlGpuInstancePlacement_t *placements, unsigned int *count)
{
    return nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, profileId, placements, count);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                       unsigned int *count)
{
    FG_DEVICE(device, d);
    FG_NEED(count);
    if (!d->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    int i = profile_by_id(d, profileId);
    if (i < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* With MIG mode off nothing is taken: a real H200 (580.159.04) answers each profile's whole count (7, 3, 2, 1,
     * 1, 1, 4), and its `mig -lgip` shows them free. */
    *count = d->mig_mode ? fg_mig_remaining(&d->mig_board, d->mig, d->mig_count, (unsigned)i)
                         : d->mig_board.profiles[i].instances;
    return NVML_SUCCESS;
}

/* ---- the GPU instances of the layout ---- */

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t *gpuInstances,
                                       unsigned int *count)
{
    FG_DEVICE(device, d);
    FG_NEED(count);
    FG_NEED(gpuInstances);
    nvmlReturn_t rc = need_mig_mode(d);
    if (rc != NVML_SUCCESS)
        return rc;
    int i = profile_by_id(d, profileId);
    if (i < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (unsigned k = 0; k < d->mig_count; k++)
        if (d->mig[k].profile == (unsigned)i)
            gpuInstances[n++] = &gi_handles[d->index][k];
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance)
{
    FG_DEVICE(device, d);
    FG_NEED(gpuInstance);
    nvmlReturn_t rc = need_mig_mode(d);
    if (rc != NVML_SUCCESS)
        return rc;
    for (unsigned k = 0; k < d->mig_count; k++)
        if (d->mig[k].gi_id == id) {
            *gpuInstance = &gi_handles[d->index][k];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
    FG_GI(gpuInstance, r);
    FG_NEED(info);
    info->device = &fg_handles[r.d->index];
    info->id = r.m->gi_id;
    info->profileId = r.p->id;
    info->placement = (nvmlGpuInstancePlacement_t){.start = r.m->start, .size = r.p->size};
    return NVML_SUCCESS;
}

/* ---- compute instances: one per GPU instance, spanning it ---- */

/* The compute instance profiles a GPU instance offers: the one spanning it, and smaller ones of 1, 2, 3 or 4
 * slices (3 only on a 7-slice GPU instance, as `-lcip` lists 3c.7g but no 3c.4g). */
static int ci_offered(const fg_mig_profile *gi, unsigned profile)
{
    unsigned s = ci_slices[profile];
    if (!s || s > gi->compute_slices)
        return 0;
    return s == gi->compute_slices || s <= 2 || s == 4 || (s == 3 && gi->compute_slices == 7);
}

static unsigned ci_full_profile(const fg_mig_profile *gi)
{
    for (unsigned k = 0; k < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; k++)
        if (ci_slices[k] == gi->compute_slices)
            return k;
    return 0;
}

static nvmlReturn_t ci_profile_check(const fg_mig_profile *gi, unsigned profile)
{
    if (profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    return ci_offered(gi, profile) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

static void fill_cip_v2(const gi_ref *r, unsigned profile, nvmlComputeInstanceProfileInfo_v2_t *o)
{
    unsigned s = ci_slices[profile];
    o->id = profile;
    o->sliceCount = s;
    o->instanceCount = r->p->compute_slices / s;
    o->multiprocessorCount = r->p->compute_slices ? r->p->sm_count / r->p->compute_slices * s : 0;
    o->sharedCopyEngineCount = r->p->copy_engines;
    o->sharedDecoderCount = r->p->decoders;
    o->sharedEncoderCount = r->p->encoders;
    o->sharedJpegCount = r->p->jpeg;
    o->sharedOfaCount = r->p->ofa;
    /* `-lcip` names: the spanning one as its GPU instance ("MIG 3g.40gb"), smaller ones "MIG 1c.3g.40gb". */
    if (s == r->p->compute_slices)
        snprintf(o->name, sizeof o->name, "MIG %s", r->p->name);
    else
        snprintf(o->name, sizeof o->name, "MIG %uc.%s", s, r->p->name);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t *info)
{
    FG_GI(gpuInstance, r);
    FG_NEED(info);
    if (engProfile >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = ci_profile_check(r.p, profile);
    if (rc != NVML_SUCCESS)
        return rc;
    nvmlComputeInstanceProfileInfo_v2_t v2;
    fill_cip_v2(&r, profile, &v2);
    *info = (nvmlComputeInstanceProfileInfo_t){
        .id = v2.id, .sliceCount = v2.sliceCount, .instanceCount = v2.instanceCount,
        .multiprocessorCount = v2.multiprocessorCount, .sharedCopyEngineCount = v2.sharedCopyEngineCount,
        .sharedDecoderCount = v2.sharedDecoderCount, .sharedEncoderCount = v2.sharedEncoderCount,
        .sharedJpegCount = v2.sharedJpegCount, .sharedOfaCount = v2.sharedOfaCount};
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                           unsigned int engProfile,
                                                           nvmlComputeInstanceProfileInfo_v2_t *info)
{
    FG_GI(gpuInstance, r);
    FG_NEED(info);
    if (engProfile >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlComputeInstanceProfileInfo_v2 && info->version != nvmlComputeInstanceProfileInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t rc = ci_profile_check(r.p, profile);
    if (rc != NVML_SUCCESS)
        return rc;
    unsigned version = info->version;
    /* v3 is v2 plus a trailing capabilities word (no graphics compute instances here: 0). */
    fill_cip_v2(&r, profile, info);
    info->version = version;
    if (version == nvmlComputeInstanceProfileInfo_v3)
        ((nvmlComputeInstanceProfileInfo_v3_t *)info)->capabilities = 0;
    return NVML_SUCCESS;
}

/* The one compute instance fills its GPU instance: room for no other. */
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                                unsigned int *count)
{
    FG_GI(gpuInstance, r);
    FG_NEED(count);
    nvmlReturn_t rc = ci_profile_check(r.p, profileId);
    if (rc != NVML_SUCCESS)
        return rc;
    *count = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                nvmlComputeInstance_t *computeInstances, unsigned int *count)
{
    FG_GI(gpuInstance, r);
    FG_NEED(count);
    FG_NEED(computeInstances);
    nvmlReturn_t rc = ci_profile_check(r.p, profileId);
    if (rc != NVML_SUCCESS)
        return rc;
    *count = 0;
    if (profileId == ci_full_profile(r.p))
        computeInstances[(*count)++] = &ci_handles[r.d->index][r.m->index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t *computeInstance)
{
    FG_GI(gpuInstance, r);
    FG_NEED(computeInstance);
    if (id != r.m->ci_id)
        return NVML_ERROR_NOT_FOUND;
    *computeInstance = &ci_handles[r.d->index][r.m->index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info)
{
    gi_ref r;
    nvmlReturn_t rc = gi_lookup(computeInstance, ci_handles, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    FG_NEED(info);
    info->device = &fg_handles[r.d->index];
    info->gpuInstance = gi_handle(&r);
    info->id = r.m->ci_id;
    info->profileId = ci_full_profile(r.p);
    /* The spanning compute instance's placement covers its GPU instance's slots: 0:4 for a 3g.40gb, 0:2 for an
     * H100's 1g.24gb, 0:1 for a 1g.10gb (`nvidia-smi mig -lci` captures, e.g. aminmsalimi/migops
     * tests/test_h100_ci_parser.py), not its compute slice count. */
    info->placement = (nvmlComputeInstancePlacement_t){.start = 0, .size = r.p->size};
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info)
{
    return nvmlComputeInstanceGetInfo_v2(computeInstance, info);
}

/* ---- changes: refused ---- */

nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus)
{
    FG_DEVICE(device, d);
    FG_NEED(activationStatus);
    if (!d->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    if (mode != NVML_DEVICE_MIG_DISABLE && mode != NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_ERROR_NO_PERMISSION;
}

static nvmlReturn_t refuse_create(nvmlDevice_t device, unsigned profileId, const void *out)
{
    FG_DEVICE(device, d);
    FG_NEED(out);
    nvmlReturn_t rc = need_mig_mode(d);
    if (rc != NVML_SUCCESS)
        return rc;
    return profile_by_id(d, profileId) < 0 ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NO_PERMISSION;
}

nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t *gpuInstance)
{
    return refuse_create(device, profileId, gpuInstance);
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t *placement,
                                                      nvmlGpuInstance_t *gpuInstance)
{
    FG_NEED(placement);
    return refuse_create(device, profileId, gpuInstance);
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance)
{
    FG_GI(gpuInstance, r);
    (void)r;
    return NVML_ERROR_NO_PERMISSION;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                  nvmlComputeInstance_t *computeInstance)
{
    FG_GI(gpuInstance, r);
    FG_NEED(computeInstance);
    nvmlReturn_t rc = ci_profile_check(r.p, profileId);
    return rc != NVML_SUCCESS ? rc : NVML_ERROR_NO_PERMISSION;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                               const nvmlComputeInstancePlacement_t *placement,
                                                               nvmlComputeInstance_t *computeInstance)
{
    FG_NEED(placement);
    return nvmlGpuInstanceCreateComputeInstance(gpuInstance, profileId, computeInstance);
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance)
{
    gi_ref r;
    nvmlReturn_t rc = gi_lookup(computeInstance, ci_handles, &r);
    return rc != NVML_SUCCESS ? rc : NVML_ERROR_NO_PERMISSION;
}
