/* The one driver FakeGPU stands in for, asked by NVML (and so nvidia-smi) and by libcuda alike, so every
 * surface of a host reports the same driver: the process's FAKEGPU_DRIVER_VERSION, else the driver its device
 * table names (the container runtime resolves one per container: hook/fakegpu_hook/env.py requested_driver),
 * else fakegpu/data/native_versions.json's; FAKEGPU_CUDA_VERSION overrides the CUDA version. */
#ifndef FG_DRIVER_H
#define FG_DRIVER_H

#include <stddef.h>

#include "fg_log.h"

/* Whether text has NVIDIA's form: fakegpu/driver.py's is_driver_version. */
FG_HIDDEN int fg_is_driver_version(const char *text);

/* The driver version string ("580.95.05"). */
FG_HIDDEN const char *fg_driver_version(char *buf, size_t len);
/* The CUDA version the driver supports, as cuDriverGetVersion answers (13000 for 13.0): FAKEGPU_CUDA_VERSION,
 * else the chosen driver branch's (550 -> 12040), else the default's. */
FG_HIDDEN int fg_cuda_driver_version(void);
/* The branch a driver version was built from ("r582_49" for 580.159.04), where a real driver was asked
 * (native_versions.json's driver_branches); NULL for any other. */
FG_HIDDEN const char *fg_driver_branch(const char *version);

#endif
