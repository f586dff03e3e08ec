/* The process report of FakeGPU's CUDA libraries: ONE file per process, $FAKEGPU_REPORT_DIR/fakegpu-native-<pid>.json,
 * valid against fakegpu/reports/schemas/native-process.schema.json.
 *
 * Each library owns part of the facts (libcuda memory, libcudart kernel launches, cuBLAS/cuBLASLt GEMMs, NCCL
 * collectives, every library its unsupported calls) and exports nothing beyond its API, so at exit each writes
 * its part as a JSON fragment into a per-process folder, and libcuda, finalized last because every other library
 * has it as DT_NEEDED, merges the parts into the report and removes the folder. */
#ifndef FGC_REPORT_H
#define FGC_REPORT_H

#include <stdio.h>

#include "fg_log.h"

/* Open part `name` for writing (NULL when no report is wanted or on error); close it with fgc_part_close. */
FG_HIDDEN FILE *fgc_part_open(const char *name);
FG_HIDDEN void fgc_part_close(FILE *f, const char *name);
/* The parts folder of this process (empty string when no report is wanted). */
FG_HIDDEN const char *fgc_parts_dir(void);
FG_HIDDEN void fgc_json_string(FILE *f, const char *s);

/* This library's unsupported calls, as the part "unsupported-<lib>" (fgc_unsup.c). */
FG_HIDDEN void fgc_unsup_write_part(void);

#endif
