/* The one not-supported path of FakeGPU's CUDA libraries: every generated stub (tools/gen_cuda_stubs.py)
 * returns through fgc_unsupported(), which counts the hit and applies the policy
 * FAKEGPU_UNSUPPORTED_API=allow|warn|error (FAKEGPU_UNSUPPORTED is accepted too, as NVML reads it):
 * allow counts only, warn prints one line per function, error prints and aborts, for CI that must notice.
 * At exit each library adds its counts to the process report (fgc_report.h). */
#ifndef FGC_UNSUP_H
#define FGC_UNSUP_H

#include <stdatomic.h>

#include "fg_log.h"

#define FGC_EXPORT __attribute__((visibility("default")))
#define FGC_MAX_STUBS 2048

typedef struct fgc_stubset {
    const char *lib;
    const char *const *names;
    unsigned count;
    atomic_uint hits[FGC_MAX_STUBS];
} fgc_stubset;

/* Count a call of stub `index` of `set`; returns `status` (the library's not-supported code) unless the
 * policy aborts. Also used by hand-written functions that refuse part of their input (fgc_refuse). */
FG_HIDDEN long fgc_unsupported(fgc_stubset *set, unsigned index, long status);

/* A hand-written function that does not support what it was asked (a flag, a mode): same policy, the
 * reason is recorded under `what` (a string literal). */
FG_HIDDEN long fgc_refuse(const char *lib, const char *what, long status);

/* 0 allow, 1 warn, 2 error. */
FG_HIDDEN int fgc_policy(void);

#endif
