/* SHA-256 (FIPS 180-4), only to derive device identities exactly as fakegpu/devices/device.py does. */
#ifndef FG_SHA256_H
#define FG_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "fg_log.h"

FG_HIDDEN void fg_sha256(const void *data, size_t len, uint8_t out[32]);

/* `prefix` and the first 16 bytes of digest `h` as NVML prints UUIDs (GPU-8-4-4-4-12): GPU and MIG UUIDs alike,
 * as fakegpu/devices/identity.py's uuid_text does. */
FG_HIDDEN void fg_uuid_text(const char *prefix, const uint8_t h[32], char *buf, size_t buflen);

#endif
