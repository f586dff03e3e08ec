#include "fg_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fg_debug_enabled(void)
{
    const char *v = getenv("FAKEGPU_DEBUG");
    return v && *v && strcmp(v, "0") != 0;
}

static void vlog(const char *fmt, va_list ap)
{
    /* One fprintf per message so lines from concurrent threads do not interleave mid-line. */
    char line[1024];
    vsnprintf(line, sizeof line, fmt, ap);
    fprintf(stderr, "fakegpu: %s\n", line);
}

void fg_debug(const char *fmt, ...)
{
    if (!fg_debug_enabled())
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(fmt, ap);
    va_end(ap);
}

void fg_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(fmt, ap);
    va_end(ap);
}

void fg_seterr(char *err, size_t len, const char *fmt, ...)
{
    if (!err || !len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

int fg_strlcpy(char *dst, const char *src, size_t len)
{
    if (!len)
        return -1;
    size_t n = strlen(src);
    if (n >= len) {
        memcpy(dst, src, len - 1);
        dst[len - 1] = '\0';
        return -1;
    }
    memcpy(dst, src, n + 1);
    return 0;
}
