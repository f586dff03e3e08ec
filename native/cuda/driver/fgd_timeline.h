/* The driver's side of the timeline log (driver/timeline.c; the format: common/fgc_timeline.h). */
#ifndef FGD_TIMELINE_H
#define FGD_TIMELINE_H

#include "fgc_timeline.h"
#include "fgd.h"

/* Whether this process keeps a timeline log ($FAKEGPU_TIMELINE_DIR): cheap after the first call. */
FG_HIDDEN int fgd_timeline_on(void);
/* A call's start on both clocks (zeros, and no clock read, when no log is kept). */
typedef struct {
    long long wall, cpu;
} fgd_stamp;
FG_HIDDEN fgd_stamp fgd_timeline_stamp(void);
/* Append `r` (tid filled in; the current context's device when r->device is FGC_TL_NO_DEVICE); `name`, when
 * given, is interned and its id stored in the record (c for a GEMM, a otherwise). */
FG_HIDDEN void fgd_timeline_put(fgc_tl_record *r, const char *name);
/* A kernel launched on `s` by a call that began at t0. */
FG_HIDDEN void fgd_timeline_kernel(CUstream s, const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                   unsigned by, unsigned bz, unsigned smem, fgd_stamp t0);
/* Any other record whose fields are a and b (copies, fills, synchronisations, events, stream creation). */
FG_HIDDEN void fgd_timeline_simple(int kind, int sub, CUstream s, unsigned long long a, unsigned long long b,
                                   fgd_stamp t0);
/* The private table's entry: a record of one of FakeGPU's libraries. */
FG_HIDDEN void fgd_timeline_library(const fgc_tl_record *r, const char *name);
/* The private table's entry: every record goes to `sink` too (NULL: no more), whether or not a log is kept. */
FG_HIDDEN void fgd_timeline_set_sink(fgc_tl_sink sink);

#endif
