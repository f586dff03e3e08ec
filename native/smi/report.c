/* The -q report's two forms from one table of rows (smi.h, smi_report_row): XML elements (-q -x) and indented
 * "key : value" text (-q, narrowed by -d). Which rows a form shows, and how deep, is decided here once. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "smi.h"

/* Deep enough for the report's own nesting (five levels under <gpu>); a deeper table is a bug caught in tests. */
#define MAX_LEVELS 8

const char *smi_report_error(nvmlReturn_t rc) { return rc == NVML_ERROR_NOT_SUPPORTED ? "N/A" : nvmlErrorString(rc); }

static unsigned driver_now(void)
{
    int v[3] = {0, 0, 0};
    char s[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "";
    if (nvmlSystemGetDriverVersion(s, sizeof s) == NVML_SUCCESS)
        sscanf(s, "%d.%d.%d", &v[0], &v[1], &v[2]);
    return SMI_DRIVER(v[0], v[1], v[2]);
}

/* A row this driver prints for this board, in either form. */
static int present(nvmlDevice_t d, const smi_report_row *r, unsigned driver)
{
    return (!r->since || driver >= r->since) && (!r->when || r->when(d));
}

/* The rows after i that are nested under it. */
static size_t subtree_end(const smi_report_row *rows, size_t n, size_t i)
{
    size_t j = i + 1;
    while (j < n && rows[j].level > rows[i].level)
        j++;
    return j;
}

static void value_of(nvmlDevice_t d, const smi_report_row *r, char *v, size_t len, int text)
{
    nvmlReturn_t rc = r->value(d, r->arg, v, (unsigned)len);
    if (rc != NVML_SUCCESS)
        snprintf(v, len, "%s", smi_report_error(rc));
    else if (text && (r->flags & SMI_ROW_HEX)) {
        char hex[256];
        snprintf(hex, sizeof hex, "0x%s", v);
        snprintf(v, len, "%s", hex);
    }
}

void smi_report_xml(nvmlDevice_t d, const smi_report_row *rows, size_t n, int depth)
{
    unsigned driver = driver_now();
    const char *open[MAX_LEVELS];
    int top = 0;
    for (size_t i = 0; i < n;) {
        const smi_report_row *r = &rows[i];
        if (!r->tag || (r->flags & SMI_ROW_TEXT_ONLY) || !present(d, r, driver)) {
            i = subtree_end(rows, n, i);
            continue;
        }
        for (; top > r->level; top--)
            smi_xml_close(depth + top - 1, open[top - 1]);
        if (r->value) {
            char v[256] = "";
            value_of(d, r, v, sizeof v, 0);
            smi_xml_leaf(depth + top, r->tag, v);
        } else {
            smi_xml_open(depth + top, r->tag);
            if (r->tree) {
                r->tree(d, depth + top + 1);
                smi_xml_close(depth + top, r->tag);
            } else if (top < MAX_LEVELS) {
                open[top++] = r->tag;
            }
        }
        i++;
    }
    for (; top > 0; top--)
        smi_xml_close(depth + top - 1, open[top - 1]);
}

static int key_width(void) { return smi_driver_at_least(580, 0, 0) ? 55 : 42; }

static void vkv(int width, int depth, const char *key, const char *fmt, va_list ap)
{
    char k[128], v[512];
    snprintf(k, sizeof k, "%*s%s", depth * 4, "", key);
    vsnprintf(v, sizeof v, fmt, ap);
    printf("%-*s: %s\n", width, k, v);
}

void smi_text_kv(int depth, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vkv(key_width(), depth, key, fmt, ap);
    va_end(ap);
}

void smi_text_kv_at(int width, int depth, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vkv(width, depth, key, fmt, ap);
    va_end(ap);
}

void smi_text_section(int depth, const char *title) { printf("%*s%s\n", depth * 4, "", title); }

/* A top-level section the text report shows: every one the whole report holds, or those -d names. */
static int shown(const smi_report_row *r, unsigned mask)
{
    if (r->level > 0)
        return 1;
    return mask ? smi_display_shows(mask, r->tag ? r->tag : "") : !(r->flags & SMI_ROW_ON_REQUEST);
}

void smi_report_text(nvmlDevice_t d, const smi_report_row *rows, size_t n, unsigned mask)
{
    unsigned driver = driver_now();
    for (size_t i = 0; i < n;) {
        const smi_report_row *r = &rows[i];
        if (!r->label || !present(d, r, driver) || !shown(r, mask)) {
            i = subtree_end(rows, n, i);
            continue;
        }
        int depth = r->level + 1 + ((r->flags & SMI_ROW_DEEPER) ? 1 : 0);
        if (r->text) {
            r->text(d, r, depth);
        } else if (r->value) {
            char v[256] = "";
            value_of(d, r, v, sizeof v, 1);
            smi_text_kv(depth, r->label, "%s", v);
        } else {
            smi_text_section(depth, r->label);
        }
        i++;
    }
}
