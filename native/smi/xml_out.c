/* The XML layout of `nvidia-smi -q -x`: one element a line, a tab per level, sections opened on their own line. */
#include <stdio.h>

#include "smi.h"

/* Deep enough for the report's own nesting (five levels under <gpu>); a deeper table is a bug caught in tests. */
#define MAX_LEVELS 8

static void indent(int depth)
{
    for (int i = 0; i < depth; i++)
        putchar('\t');
}

void smi_xml_escaped(const char *text)
{
    for (const char *c = text; *c; c++) {
        switch (*c) {
        case '&': fputs("&amp;", stdout); break;
        case '<': fputs("&lt;", stdout); break;
        case '>': fputs("&gt;", stdout); break;
        case '"': fputs("&quot;", stdout); break;
        case '\'': fputs("&apos;", stdout); break;
        default: putchar(*c);
        }
    }
}

void smi_xml_open(int depth, const char *tag)
{
    indent(depth);
    printf("<%s>\n", tag);
}

void smi_xml_close(int depth, const char *tag)
{
    indent(depth);
    printf("</%s>\n", tag);
}

void smi_xml_leaf(int depth, const char *tag, const char *text)
{
    indent(depth);
    printf("<%s>", tag);
    smi_xml_escaped(text);
    printf("</%s>\n", tag);
}

void smi_xml_text(int depth, const char *text)
{
    indent(depth);
    smi_xml_escaped(text);
    putchar('\n');
}

static void write_row(nvmlDevice_t d, const smi_xml_row *row, int depth)
{
    if (row->value) {
        char v[256] = "";
        if (row->value(d, row->arg, v, sizeof v) != NVML_SUCCESS)
            snprintf(v, sizeof v, "N/A");
        smi_xml_leaf(depth, row->tag, v);
    } else {
        smi_xml_open(depth, row->tag);
        if (row->tree) {
            row->tree(d, depth + 1);
            smi_xml_close(depth, row->tag);
        }
    }
}

void smi_xml_rows(nvmlDevice_t d, const smi_xml_row *rows, size_t n, int depth)
{
    const char *open[MAX_LEVELS];
    int top = 0;
    for (size_t i = 0; i < n; i++) {
        for (; top > rows[i].level; top--)
            smi_xml_close(depth + top - 1, open[top - 1]);
        write_row(d, &rows[i], depth + top);
        if (!rows[i].value && !rows[i].tree && top < MAX_LEVELS)
            open[top++] = rows[i].tag;
    }
    for (; top > 0; top--)
        smi_xml_close(depth + top - 1, open[top - 1]);
}
