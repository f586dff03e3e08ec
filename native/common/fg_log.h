/* Diagnostics for the native shims: silent unless FAKEGPU_DEBUG asks, because clients parse our stderr. */
#ifndef FG_LOG_H
#define FG_LOG_H

#include <stddef.h>

#define FG_HIDDEN __attribute__((visibility("hidden")))

/* True when FAKEGPU_DEBUG is set to anything but "" or "0". */
FG_HIDDEN int fg_debug_enabled(void);

/* "fakegpu: ..." on stderr when debugging is on. */
FG_HIDDEN void fg_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Always printed: for policies the user chose (FAKEGPU_UNSUPPORTED=warn). */
FG_HIDDEN void fg_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* snprintf into a fixed error buffer; never overflows, always terminates. */
FG_HIDDEN void fg_seterr(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Copy a C string into a fixed buffer, truncating; returns 0 if it fit, -1 if it was cut. */
FG_HIDDEN int fg_strlcpy(char *dst, const char *src, size_t len);

#endif
