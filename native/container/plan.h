/* What goes into a container: the C twin of hook/fakegpu_hook/inject.py's plan_injection and prepare_targets,
 * same order, same rules, so the rewritten config.json and inject.log match what Python produces. */
#ifndef FG_PLAN_H
#define FG_PLAN_H

#include <stddef.h>

#include "fg_root.h"
#include "request.h"

#include "fg_contract.h" /* generated from hook/fakegpu_hook/contract.py: FG_CONTAINER_* */

/* Whether dest names <libdir>/fakegpu, <libdir>/catalog.tbl or a library file (lib*.so*) directly in a library
 * folder of inject.py's list: such a mount covers no folder we prepare. */
int fg_plan_in_lib_dir(const char *dest);

typedef struct {
    char *a, *b;
} fg_pair;

typedef struct {
    char *path;
    int major, minor;
} fg_node;

#define FG_PLAN_MAX 256

typedef struct {
    char lib_dir[64];
    fg_pair files[FG_PLAN_MAX];    /* (host source, container path), read-only */
    fg_pair links[FG_PLAN_MAX];    /* (container path, link target) */
    fg_pair dirs[4];               /* (host source, container path), read-write */
    fg_pair lib_dirs[4];           /* (host source, container path), read-only, not noexec */
    fg_node nodes[FG_PLAN_MAX];
    char *notes[8];
    size_t nfiles, nlinks, ndirs, nlib_dirs, nnodes, nnotes;
} fg_plan;

void fg_plan_init(fg_plan *p);

/* 0, or -1 with err (too many entries for the plan's fixed tables). minors: the devices' /dev/nvidiaN numbers;
 * caps: the granted driver capabilities (request.h's mask), which decide the libraries and the UVM nodes;
 * driver: the driver version the driver's own libraries are named after (NULL or empty: sonames only). */
int fg_plan_make(fg_plan *p, fg_root *root, const char *native_lib_dir, const char *nvidia_smi, const char *table,
                 const char *catalog, const char *state_dir, const unsigned *minors, unsigned device_count,
                 unsigned caps, const char *driver, char *err, size_t errlen);

/* Make every mount target and link in the container root; 0, or -1 with err. */
int fg_plan_prepare(const fg_plan *p, fg_root *root, char *err, size_t errlen);

#endif
