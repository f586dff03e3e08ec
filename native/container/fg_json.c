#include "fg_json.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Python's json module recurses once per level and gives up near 1000; far below that, so a document we
 * accept is one it accepts too. */
#define MAX_DEPTH 200
#define MAX_NODES (1 << 20)

typedef struct {
    fg_json *j;
    size_t pos;
    char *err;
    size_t errlen;
} parser;

static int fail(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(parser *p, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "%s at byte %zu", msg, p->pos);
    return -1;
}

static void skip_ws(parser *p)
{
    const char *t = p->j->text;
    while (p->pos < p->j->len && (t[p->pos] == ' ' || t[p->pos] == '\t' || t[p->pos] == '\n' || t[p->pos] == '\r'))
        p->pos++;
}

static int new_node(parser *p, int type)
{
    fg_json *j = p->j;
    if (j->nnodes == j->cap) {
        if (j->cap >= MAX_NODES)
            return fail(p, "too many values");
        int cap = j->cap ? j->cap * 2 : 256;
        fg_jnode *n = realloc(j->nodes, (size_t)cap * sizeof *n);
        if (!n)
            return fail(p, "out of memory");
        j->nodes = n;
        j->cap = cap;
    }
    fg_jnode *n = &j->nodes[j->nnodes];
    memset(n, 0, sizeof *n);
    n->type = type;
    n->first_child = n->last_child = n->next = -1;
    n->start = p->pos;
    return j->nnodes++;
}

static int hex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *out, unsigned cp)
{
    if (cp < 0x80) {
        if (out)
            out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        if (out) {
            out[0] = (char)(0xC0 | cp >> 6);
            out[1] = (char)(0x80 | (cp & 0x3F));
        }
        return 2;
    }
    if (cp < 0x10000) {
        if (out) {
            out[0] = (char)(0xE0 | cp >> 12);
            out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
            out[2] = (char)(0x80 | (cp & 0x3F));
        }
        return 3;
    }
    if (out) {
        out[0] = (char)(0xF0 | cp >> 18);
        out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[3] = (char)(0x80 | (cp & 0x3F));
    }
    return 4;
}

/* Decode the string whose opening quote is at text[pos]; writes to out (when not NULL) and returns the decoded
 * length, or -1 on a grammar error. *end gets the offset after the closing quote; *has_nul whether a \u0000
 * was decoded. Raw bytes are copied as they are (the whole text was checked as UTF-8 first). */
static long decode(const char *text, size_t len, size_t pos, char *out, size_t *end, int *has_nul)
{
    size_t i = pos + 1, o = 0;
    *has_nul = 0;
    while (i < len) {
        unsigned char c = (unsigned char)text[i];
        if (c == '"') {
            *end = i + 1;
            return (long)o;
        }
        if (c < 0x20)
            return -1; /* a raw control character: Python's strict mode refuses it too */
        if (c != '\\') {
            if (out)
                out[o] = (char)c;
            o++;
            i++;
            continue;
        }
        if (i + 1 >= len)
            return -1;
        char e = text[i + 1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            if (out)
                out[o] = map[simple - "\"\\/bfnrt"];
            o++;
            i += 2;
            continue;
        }
        if (e != 'u' || i + 6 > len)
            return -1;
        unsigned cp;
        if (hex4(text + i + 2, &cp))
            return -1;
        i += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            unsigned lo;
            if (i + 6 > len || text[i] != '\\' || text[i + 1] != 'u' || hex4(text + i + 2, &lo) || lo < 0xDC00 ||
                lo > 0xDFFF)
                return -1; /* a lone surrogate cannot be UTF-8 */
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return -1;
        }
        if (cp == 0)
            *has_nul = 1;
        o += put_utf8(out ? out + o : NULL, cp);
    }
    return -1;
}

static int parse_value(parser *p, int depth);

static int parse_string(parser *p)
{
    int n = new_node(p, FG_JSTRING);
    if (n < 0)
        return -1;
    size_t end;
    int nul;
    if (decode(p->j->text, p->j->len, p->pos, NULL, &end, &nul) < 0)
        return fail(p, "bad string");
    p->pos = end;
    p->j->nodes[n].end = end;
    return n;
}

static int parse_number(parser *p)
{
    const char *t = p->j->text;
    size_t len = p->j->len, i = p->pos;
    int n = new_node(p, FG_JNUMBER);
    if (n < 0)
        return -1;
    if (i < len && t[i] == '-')
        i++;
    if (i < len && t[i] == '0')
        i++;
    else if (i < len && t[i] >= '1' && t[i] <= '9')
        while (i < len && t[i] >= '0' && t[i] <= '9')
            i++;
    else
        return fail(p, "bad number");
    if (i < len && t[i] == '.') {
        i++;
        if (i >= len || t[i] < '0' || t[i] > '9')
            return fail(p, "bad number");
        while (i < len && t[i] >= '0' && t[i] <= '9')
            i++;
    }
    if (i < len && (t[i] == 'e' || t[i] == 'E')) {
        i++;
        if (i < len && (t[i] == '+' || t[i] == '-'))
            i++;
        if (i >= len || t[i] < '0' || t[i] > '9')
            return fail(p, "bad number");
        while (i < len && t[i] >= '0' && t[i] <= '9')
            i++;
    }
    p->pos = i;
    p->j->nodes[n].end = i;
    return n;
}

static int keys_equal(const fg_json *j, size_t a, size_t b)
{
    size_t ea, eb;
    int na, nb;
    long la = decode(j->text, j->len, a, NULL, &ea, &na), lb = decode(j->text, j->len, b, NULL, &eb, &nb);
    if (la != lb)
        return 0;
    if (ea - a == eb - b && memcmp(j->text + a, j->text + b, ea - a) == 0)
        return 1;
    char *x = malloc((size_t)la + 1), *y = malloc((size_t)lb + 1);
    int eq = x && y;
    if (eq) {
        decode(j->text, j->len, a, x, &ea, &na);
        decode(j->text, j->len, b, y, &eb, &nb);
        eq = memcmp(x, y, (size_t)la) == 0;
    }
    free(x);
    free(y);
    return eq;
}

static void add_child(fg_json *j, int parent, int child)
{
    fg_jnode *pn = &j->nodes[parent];
    if (pn->last_child < 0)
        pn->first_child = child;
    else
        j->nodes[pn->last_child].next = child;
    pn->last_child = child;
    pn->count++;
}

static int parse_container(parser *p, int depth, int is_object)
{
    fg_json *j = p->j;
    int n = new_node(p, is_object ? FG_JOBJECT : FG_JARRAY);
    if (n < 0)
        return -1;
    p->pos++;
    skip_ws(p);
    char close = is_object ? '}' : ']';
    if (p->pos < j->len && j->text[p->pos] == close) {
        p->pos++;
        j->nodes[n].end = p->pos;
        return n;
    }
    for (;;) {
        size_t key = 0;
        if (is_object) {
            if (p->pos >= j->len || j->text[p->pos] != '"')
                return fail(p, "expected a key");
            key = p->pos;
            size_t end;
            int nul;
            if (decode(j->text, j->len, key, NULL, &end, &nul) < 0)
                return fail(p, "bad key");
            /* Python keeps the last of duplicate keys; rather than emulate that, refuse. */
            for (int c = j->nodes[n].first_child; c >= 0; c = j->nodes[c].next)
                if (keys_equal(j, j->nodes[c].key_start, key))
                    return fail(p, "duplicate key");
            p->pos = end;
            skip_ws(p);
            if (p->pos >= j->len || j->text[p->pos] != ':')
                return fail(p, "expected ':'");
            p->pos++;
            skip_ws(p);
        }
        int child = parse_value(p, depth + 1);
        if (child < 0)
            return -1;
        j->nodes[child].key_start = key;
        add_child(j, n, child);
        skip_ws(p);
        if (p->pos < j->len && j->text[p->pos] == ',') {
            p->pos++;
            skip_ws(p);
            continue;
        }
        if (p->pos < j->len && j->text[p->pos] == close) {
            p->pos++;
            j->nodes[n].end = p->pos;
            return n;
        }
        return fail(p, "expected ',' or '%c'", close);
    }
}

static int literal(parser *p, const char *word, int type)
{
    size_t n = strlen(word);
    if (p->pos + n > p->j->len || memcmp(p->j->text + p->pos, word, n) != 0)
        return fail(p, "unexpected character");
    int node = new_node(p, type);
    if (node < 0)
        return -1;
    p->pos += n;
    p->j->nodes[node].end = p->pos;
    return node;
}

static int parse_value(parser *p, int depth)
{
    if (depth > MAX_DEPTH)
        return fail(p, "nested too deeply");
    if (p->pos >= p->j->len)
        return fail(p, "unexpected end");
    switch (p->j->text[p->pos]) {
    case '{':
        return parse_container(p, depth, 1);
    case '[':
        return parse_container(p, depth, 0);
    case '"':
        return parse_string(p);
    case 't':
        return literal(p, "true", FG_JTRUE);
    case 'f':
        return literal(p, "false", FG_JFALSE);
    case 'n':
        return literal(p, "null", FG_JNULL);
    default:
        return parse_number(p);
    }
}

/* Python reads config.json as UTF-8 and fails on anything else. */
static int valid_utf8(const unsigned char *s, size_t len, size_t *bad)
{
    for (size_t i = 0; i < len;) {
        unsigned char c = s[i];
        size_t n;
        unsigned cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 2;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            n = 3;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            n = 4;
            cp = c & 0x07;
        } else {
            *bad = i;
            return 0;
        }
        if (i + n > len) {
            *bad = i;
            return 0;
        }
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) {
                *bad = i;
                return 0;
            }
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF)) {
            *bad = i;
            return 0;
        }
        i += n;
    }
    return 1;
}

int fg_json_parse(fg_json *j, const char *text, size_t len, char *err, size_t errlen)
{
    memset(j, 0, sizeof *j);
    j->text = text;
    j->len = len;
    parser p = {j, 0, err, errlen};
    size_t bad;
    if (!valid_utf8((const unsigned char *)text, len, &bad)) {
        snprintf(err, errlen, "not UTF-8 at byte %zu", bad);
        return -1;
    }
    if (memchr(text, '\0', len)) {
        snprintf(err, errlen, "a NUL byte in the text");
        return -1;
    }
    skip_ws(&p);
    if (parse_value(&p, 0) < 0)
        return -1;
    skip_ws(&p);
    if (p.pos != len)
        return fail(&p, "extra data");
    return 0;
}

void fg_json_free(fg_json *j)
{
    free(j->nodes);
    j->nodes = NULL;
    j->nnodes = j->cap = 0;
}

static int key_is(const fg_json *j, size_t key, const char *s)
{
    size_t end, n = strlen(s);
    int nul;
    long l = decode(j->text, j->len, key, NULL, &end, &nul);
    if (l != (long)n)
        return 0;
    if (end - key - 2 == n) /* no escapes: compare the raw bytes */
        return memcmp(j->text + key + 1, s, n) == 0;
    char *buf = malloc(n + 1);
    if (!buf)
        return 0;
    decode(j->text, j->len, key, buf, &end, &nul);
    int eq = memcmp(buf, s, n) == 0;
    free(buf);
    return eq;
}

int fg_json_get(const fg_json *j, int obj, const char *key)
{
    if (obj < 0 || j->nodes[obj].type != FG_JOBJECT)
        return -1;
    for (int c = j->nodes[obj].first_child; c >= 0; c = j->nodes[c].next)
        if (key_is(j, j->nodes[c].key_start, key))
            return c;
    return -1;
}

static char *decode_alloc(const fg_json *j, size_t at)
{
    size_t end;
    int nul;
    long l = decode(j->text, j->len, at, NULL, &end, &nul);
    if (l < 0 || nul)
        return NULL;
    char *out = malloc((size_t)l + 1);
    if (!out)
        return NULL;
    decode(j->text, j->len, at, out, &end, &nul);
    out[l] = '\0';
    return out;
}

char *fg_json_string(const fg_json *j, int node)
{
    if (node < 0 || j->nodes[node].type != FG_JSTRING)
        return NULL;
    return decode_alloc(j, j->nodes[node].start);
}

char *fg_json_key(const fg_json *j, int node)
{
    if (node < 0 || j->text[j->nodes[node].key_start] != '"')
        return NULL;
    return decode_alloc(j, j->nodes[node].key_start);
}

int fg_json_string_eq(const fg_json *j, int node, const char *s)
{
    if (node < 0 || j->nodes[node].type != FG_JSTRING)
        return 0;
    return key_is(j, j->nodes[node].start, s);
}
