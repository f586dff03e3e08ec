/* Process-wide settings every FakeGPU CUDA library must read the same way (one parser, compiled into each). */
#ifndef FGC_ENV_H
#define FGC_ENV_H

#include "fg_log.h"

/* FAKEGPU_MEMORY=accounting: device memory is address space and an account only. Bytes written to the device
 * (host-to-device and device-to-device copies, memsets, collectives' outputs) are not kept, and the device reads
 * as zeros, so loading a large model costs almost no host RAM. Anything else (unset, "full") keeps the bytes.
 * Returns 1 in accounting mode. */
FG_HIDDEN int fgc_memory_accounting(void);

#endif
