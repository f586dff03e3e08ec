/* MIG: a board's GPU instance profiles (catalog facts) and the instances a layout places on it, exactly as
 * fakegpu/devices/mig.py does (same grammar, same placement search, same GPU instance IDs and MIG UUIDs). */
#ifndef FG_MIG_H
#define FG_MIG_H

#include <stddef.h>

#include "fg_log.h"

#define FG_MIG_MAX_PROFILES 16
#define FG_MIG_MAX_SLICES 8
#define FG_MIG_MAX_INSTANCES 8
#define FG_MIG_UUID_PREFIX "MIG-" /* MIG_UUID_PREFIX in fakegpu/devices/mig.py */

typedef struct {
    char name[24]; /* 3g.40gb */
    unsigned id, nvml_profile, compute_slices, instances, memory_mib, sm_count, copy_engines, decoders, encoders,
        jpeg, ofa, p2p;
    unsigned size, nstarts, starts[FG_MIG_MAX_SLICES];
} fg_mig_profile;

typedef struct {
    unsigned compute_slices, memory_slices, nprofiles;
    fg_mig_profile profiles[FG_MIG_MAX_PROFILES];
} fg_mig_board;

typedef struct {
    unsigned index;   /* the MIG device index under its parent */
    unsigned profile; /* into fg_mig_board.profiles */
    unsigned start, gi_id, ci_id;
    char uuid[48];
} fg_mig_instance;

/* One mig.gip.N value of the table (fakegpu/profiles/table.py _gip): 0, or -1 when it does not parse. */
FG_HIDDEN int fg_mig_parse_profile(const char *value, fg_mig_profile *out);

/* The GPU instance ID real drivers give a placement: its node in the memory-slice tree. */
FG_HIDDEN unsigned fg_mig_gi_id(const fg_mig_board *b, unsigned start, unsigned size);

/* Parse and place a layout (mig.py's grammar) on a board: fills `out` (in GPU instance order) and *count, with
 * identities derived from the parent's UUID. 0, or -1 with a sentence in err. */
FG_HIDDEN int fg_mig_layout(const fg_mig_board *b, const char *board_name, const char *layout, const char *parent_uuid,
                            fg_mig_instance *out, unsigned *count, char *err, size_t errlen);

/* How many more GPU instances of profile `profile` (into b->profiles) fit beside the `n` placed ones:
 * remaining_capacity() in mig.py. */
FG_HIDDEN unsigned fg_mig_remaining(const fg_mig_board *b, const fg_mig_instance *placed, unsigned n, unsigned profile);

/* A MIG device's name, "NVIDIA A100-SXM4-80GB MIG 3g.40gb", as CUDA and NVML both name it. */
FG_HIDDEN void fg_mig_device_name(const char *board_name, const fg_mig_profile *p, char *buf, size_t len);

/* MIG-<uuid> of an instance: mig_uuid() in mig.py. */
FG_HIDDEN void fg_mig_uuid(const char *parent_uuid, unsigned gi_id, unsigned ci_id, char *buf, size_t len);

#endif
