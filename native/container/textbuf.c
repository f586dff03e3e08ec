#include "textbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bput(buf_t *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            fprintf(stderr, "fakegpu-create: out of memory\n");
            exit(1);
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void bputs(buf_t *b, const char *s) { bput(b, s, strlen(s)); }

void bprintf(buf_t *b, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (n < (int)sizeof tmp) {
        bput(b, tmp, (size_t)n);
        return;
    }
    /* A long line (a long spec in the table's header): formatted again into room of its size. */
    char *big = malloc((size_t)n + 1);
    if (!big) {
        fprintf(stderr, "fakegpu-create: out of memory\n");
        exit(1);
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    bput(b, big, (size_t)n);
    free(big);
}

void json_str(buf_t *b, const char *s)
{
    bputs(b, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char e[3] = {'\\', (char)*c, 0};
            bputs(b, e);
        } else if (*c < 0x20) {
            bprintf(b, "\\u%04x", *c);
        } else {
            bput(b, (const char *)c, 1);
        }
    }
    bputs(b, "\"");
}

void py_repr(buf_t *b, const char *s)
{
    char q = strchr(s, '\'') && !strchr(s, '"') ? '"' : '\'';
    bput(b, &q, 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '\\' || *c == (unsigned char)q)
            bprintf(b, "\\%c", *c);
        else if (*c == '\t')
            bputs(b, "\\t");
        else if (*c == '\n')
            bputs(b, "\\n");
        else if (*c == '\r')
            bputs(b, "\\r");
        else if (*c < 0x20 || *c == 0x7f)
            bprintf(b, "\\x%02x", *c);
        else
            bput(b, (const char *)c, 1);
    }
    bput(b, &q, 1);
}
