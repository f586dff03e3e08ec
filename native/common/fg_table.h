/* Reader of the compiled device/catalog table (format 1, written by fakegpu/devices/table.py).
 * The whole file is read into one buffer and split in place, so records point into it. */
#ifndef FG_TABLE_H
#define FG_TABLE_H

#include <stddef.h>

#include "fg_log.h"

/* A table larger than this is not one we wrote; refusing it bounds memory on garbage input. */
#define FG_TABLE_MAX_BYTES (4u << 20)
#define FG_TABLE_MAX_FIELDS 256

typedef struct {
    const char *key;
    const char *value;
} fg_field;

typedef struct {
    fg_field *fields;
    size_t nfields;
    int line;
} fg_record;

typedef struct {
    char *text;
    fg_record header;
    fg_record *records;
    size_t nrecords;
    int is_catalog;
} fg_table;

enum { FG_TABLE_OK = 0, FG_TABLE_MISSING = 1, FG_TABLE_CORRUPT = 2 };

/* Parse the table at `path`; on failure returns FG_TABLE_MISSING/CORRUPT and a sentence in err. */
FG_HIDDEN int fg_table_read(const char *path, fg_table *t, char *err, size_t errlen);
/* Parse a table held in memory (text is taken over and freed by fg_table_free). */
FG_HIDDEN int fg_table_parse(char *text, fg_table *t, char *err, size_t errlen);
FG_HIDDEN void fg_table_free(fg_table *t);

/* The value of `key` in a record, or NULL. */
FG_HIDDEN const char *fg_record_get(const fg_record *r, const char *key);

#endif
