/* A strict JSON reader for the runtime's `create` fast path: config.json is parsed into nodes that keep
 * their byte offsets, so the caller can splice new members into the original text instead of rewriting it.
 *
 * Strict on purpose: anything Python's json module would read differently (NaN/Infinity, duplicate keys,
 * lone surrogates, a BOM, NUL inside a string, invalid UTF-8, deep nesting) is refused, and the caller then
 * hands the whole request to the Python runtime, which stays the reference. */
#ifndef FG_JSON_H
#define FG_JSON_H

#include <stddef.h>

enum { FG_JNULL, FG_JFALSE, FG_JTRUE, FG_JNUMBER, FG_JSTRING, FG_JARRAY, FG_JOBJECT };

typedef struct {
    int type;
    size_t start, end;   /* the value's bytes: text[start, end) */
    size_t key_start;    /* for an object member: offset of its key's opening quote */
    int first_child;     /* -1 when none; members of objects, elements of arrays */
    int last_child;
    int next;            /* next sibling, -1 at the end */
    int count;           /* children */
} fg_jnode;

typedef struct {
    const char *text;
    size_t len;
    fg_jnode *nodes;
    int nnodes, cap;
} fg_json;

/* 0 on success; -1 with a sentence in err. Node 0 is the top-level value. */
int fg_json_parse(fg_json *j, const char *text, size_t len, char *err, size_t errlen);
void fg_json_free(fg_json *j);

/* The member `key` of object node `obj` (-1 if absent or obj is not an object). */
int fg_json_get(const fg_json *j, int obj, const char *key);

/* The decoded value of a string node (malloc'd, NUL-terminated); NULL when the node is not a string or holds
 * a NUL. Parsing already rejected bad escapes. */
char *fg_json_string(const fg_json *j, int node);

/* The decoded key of an object member node (malloc'd), NULL if it holds a NUL. */
char *fg_json_key(const fg_json *j, int node);

/* Compare a string node's decoded value with s without allocating: 1 equal, 0 not (or not a string). */
int fg_json_string_eq(const fg_json *j, int node, const char *s);

#endif
