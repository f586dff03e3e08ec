/* The one not-supported path: every generated stub returns through fg_unsupported(), which counts the hit
 * and applies FAKEGPU_UNSUPPORTED (allow: count only; warn: one line per function; error: abort, for CI that
 * must notice). Counts are written to $FAKEGPU_REPORT_DIR/nvml-<pid>.json at exit for the process report. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fg_nvml.h"

enum { POLICY_UNSET = 0, POLICY_ALLOW, POLICY_WARN, POLICY_ERROR };

static atomic_uint hits[FG_STUB_COUNT];
static atomic_int policy;

static int read_policy(void)
{
    const char *strict = getenv("FAKEGPU_STRICT");
    const char *v = getenv("FAKEGPU_UNSUPPORTED");
    int p = POLICY_ALLOW;
    if (strict && *strict && strcmp(strict, "0") != 0)
        p = POLICY_ERROR;
    else if (v && strcmp(v, "warn") == 0)
        p = POLICY_WARN;
    else if (v && strcmp(v, "error") == 0)
        p = POLICY_ERROR;
    else if (fg_debug_enabled())
        p = POLICY_WARN;
    atomic_store(&policy, p);
    return p;
}

nvmlReturn_t fg_unsupported(unsigned stub_index)
{
    if (stub_index >= FG_STUB_COUNT)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned before = atomic_fetch_add_explicit(&hits[stub_index], 1, memory_order_relaxed);
    int p = atomic_load_explicit(&policy, memory_order_relaxed);
    if (p == POLICY_UNSET)
        p = read_policy();
    if (p == POLICY_ERROR) {
        fg_warn("%s is not supported by FakeGPU's NVML (FAKEGPU_UNSUPPORTED=error): aborting",
                fg_stub_names[stub_index]);
        abort();
    }
    if (p == POLICY_WARN && before == 0)
        fg_warn("%s is not supported by FakeGPU's NVML: returning NVML_ERROR_NOT_SUPPORTED",
                fg_stub_names[stub_index]);
    return NVML_ERROR_NOT_SUPPORTED;
}

__attribute__((destructor)) static void write_report(void)
{
    const char *dir = getenv("FAKEGPU_REPORT_DIR");
    if (!dir || !*dir)
        return;
    unsigned any = 0;
    for (unsigned i = 0; i < FG_STUB_COUNT; i++)
        any += atomic_load(&hits[i]);
    if (!any)
        return;
    char path[1024], tmp[1100];
    snprintf(path, sizeof path, "%s/nvml-%d.json", dir, (int)getpid());
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    /* fakegpu/reports/schemas/nvml-process.schema.json */
    fprintf(f, "{\"schema\": \"fakegpu.nvml-process/v1\", \"library\": \"nvml\", \"mode\": \"native\", "
               "\"pid\": %d, \"unsupported\": {", (int)getpid());
    const char *sep = "";
    for (unsigned i = 0; i < FG_STUB_COUNT; i++) {
        unsigned n = atomic_load(&hits[i]);
        if (n) {
            fprintf(f, "%s\"%s\": %u", sep, fg_stub_names[i], n);
            sep = ", ";
        }
    }
    fprintf(f, "}}\n");
    if (fclose(f) == 0)
        rename(tmp, path);
    else
        unlink(tmp);
}
