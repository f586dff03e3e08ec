/* The XML layout of `nvidia-smi -q -x`: one element a line, a tab per level, sections opened on their own line. */
#include <stdio.h>

#include "smi.h"

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
