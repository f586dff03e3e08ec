/* FakeGPU's private export table of its libcuda. NVIDIA's runtime and libraries reach private driver functions
 * through cuGetExportTable and a table id; FakeGPU's own cuBLAS and cuDNN reach the one thing they must tell the
 * driver the same way, under an id of FakeGPU's own that no program of NVIDIA's asks for: that a real library's
 * kernels would now be loaded into the current context, which grows by what they cost (driver/init.c). */
#ifndef FGC_PRIVATE_H
#define FGC_PRIVATE_H

#include <stddef.h>

#include "fg_log.h"

typedef struct {
    size_t size; /* of this struct: fields are only ever appended */
    /* "cublas" or "cudnn": grow the current context by that library's kernels, once per context. */
    void (*library_loaded)(const char *library);
} fgc_private_table;

/* The table's id, 16 bytes as a CUuuid holds them. */
FG_HIDDEN extern const unsigned char fgc_private_table_id[16];

/* For FakeGPU's libraries: tell the driver `library` runs in the current context (cheap after the first call
 * per device; nothing happens under a driver that is not FakeGPU's). */
FG_HIDDEN void fgc_library_loaded(const char *library);

#endif
