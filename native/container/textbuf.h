/* A growing text buffer for fakegpu-create's outputs (config.json insertions, the device table, inject.log),
 * with the two quotings they need: JSON strings and Python's repr(). Out of memory exits: the process is
 * short-lived and has changed nothing it could leave half done when it builds text. */
#ifndef FG_TEXTBUF_H
#define FG_TEXTBUF_H

#include <stddef.h>

typedef struct {
    char *s;
    size_t len, cap;
} buf_t;

void bput(buf_t *b, const char *s, size_t n);
void bputs(buf_t *b, const char *s);
void bprintf(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a JSON string literal (quotes, backslashes and control characters escaped). */
void json_str(buf_t *b, const char *s);
/* repr() of an ASCII str, as Python writes it in inject.log. */
void py_repr(buf_t *b, const char *s);

#endif
