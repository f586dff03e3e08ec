#include "fgc_env.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_int accounting = -1; /* -1: not read yet */

int fgc_memory_accounting(void)
{
    int v = atomic_load_explicit(&accounting, memory_order_relaxed);
    if (v >= 0)
        return v;
    const char *s = getenv("FAKEGPU_MEMORY");
    v = s && strcmp(s, "accounting") == 0;
    if (s && *s && !v && strcmp(s, "full") != 0)
        fg_warn("FAKEGPU_MEMORY=%s is not a memory mode (full|accounting): keeping the bytes (full)", s);
    atomic_store(&accounting, v);
    return v;
}
