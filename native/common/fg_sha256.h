/* SHA-256 (FIPS 180-4), only to derive device identities exactly as fakegpu/devices/device.py does. */
#ifndef FG_SHA256_H
#define FG_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "fg_log.h"

FG_HIDDEN void fg_sha256(const void *data, size_t len, uint8_t out[32]);

#endif
