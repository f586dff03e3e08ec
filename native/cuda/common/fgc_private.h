/* FakeGPU's private export table of its libcuda. NVIDIA's runtime and libraries reach private driver functions
 * through cuGetExportTable and a table id; FakeGPU's own cuBLAS and cuDNN reach the one thing they must tell the
 * driver the same way, under an id of FakeGPU's own that no program of NVIDIA's asks for: that a real library's
 * kernels would now be loaded into the current context, which grows by what they cost (driver/init.c). */
#ifndef FGC_PRIVATE_H
#define FGC_PRIVATE_H

#include <stddef.h>

#include "fg_log.h"
#include "fgc_timeline.h"

typedef struct {
    size_t size; /* of this struct: fields are only ever appended */
    /* "cublas" or "cudnn": grow the current context by that library's kernels, once per context. */
    void (*library_loaded)(const char *library);
    /* FakeGPU's NCCL starts an operation of global rank `rank` on CUDA device `device`: the fault board's answer
     * (common/fg_faults.h, fg_fault_collective); on FG_FAULT_NCCL_HANG the device is hung from now on. */
    unsigned (*nccl_operation)(int rank, int device);
    /* A peer of this process hangs in the collective it is in: the device is hung from now on, as a GPU whose
     * NCCL kernel waits forever for a peer is. */
    void (*device_hung)(int device);
    /* Append a library's record to the process's timeline log (common/fgc_timeline.h): a GEMM's shape, a
     * collective, a launch the driver did not see. Does nothing when no log is kept. */
    void (*timeline)(const fgc_tl_record *r, const char *name);
    /* Hand every timeline record to `sink` as well, log or no log (NULL: stop). FakeGPU's CUPTI builds its
     * activity records from them. */
    void (*timeline_sink)(fgc_tl_sink sink);
} fgc_private_table;

/* The table's id, 16 bytes as a CUuuid holds them. */
FG_HIDDEN extern const unsigned char fgc_private_table_id[16];

/* For FakeGPU's libraries: tell the driver `library` runs in the current context (cheap after the first call
 * per device; nothing happens under a driver that is not FakeGPU's). */
FG_HIDDEN void fgc_library_loaded(const char *library);
/* The table's nccl_operation and device_hung, or 0 and nothing under a driver that is not FakeGPU's. */
FG_HIDDEN unsigned fgc_nccl_operation(int rank, int device);
FG_HIDDEN void fgc_device_hung(int device);
/* The table's timeline entry (nothing under a driver that is not FakeGPU's, or when no log is kept). */
FG_HIDDEN void fgc_timeline(const fgc_tl_record *r, const char *name);
/* The table's timeline_sink: 0 when installed, -1 under a driver that is not FakeGPU's (or too old for it). */
FG_HIDDEN int fgc_timeline_sink(fgc_tl_sink sink);

#endif
