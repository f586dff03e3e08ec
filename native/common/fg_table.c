#include "fg_table.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER_TAG "fakegpu-device-table"

const char *fg_record_get(const fg_record *r, const char *key)
{
    for (size_t i = 0; i < r->nfields; i++)
        if (strcmp(r->fields[i].key, key) == 0)
            return r->fields[i].value;
    return NULL;
}

void fg_table_free(fg_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->nrecords; i++)
        free(t->records[i].fields);
    free(t->header.fields);
    free(t->records);
    free(t->text);
    memset(t, 0, sizeof *t);
}

/* Split "tag\tk=v\tk=v" in place; returns the tag, or NULL with err set. */
static char *split_line(char *line, int number, fg_record *rec, char *err, size_t errlen)
{
    char *save = NULL;
    char *tag = strtok_r(line, "\t", &save);
    if (!tag)
        return NULL;
    rec->fields = calloc(FG_TABLE_MAX_FIELDS, sizeof *rec->fields);
    rec->nfields = 0;
    rec->line = number;
    if (!rec->fields) {
        fg_seterr(err, errlen, "out of memory");
        return NULL;
    }
    for (char *cell; (cell = strtok_r(NULL, "\t", &save));) {
        char *eq = strchr(cell, '=');
        if (!eq) {
            fg_seterr(err, errlen, "line %d: '%.40s' is not key=value", number, cell);
            return NULL;
        }
        if (rec->nfields == FG_TABLE_MAX_FIELDS) {
            fg_seterr(err, errlen, "line %d: more than %d fields", number, FG_TABLE_MAX_FIELDS);
            return NULL;
        }
        *eq = '\0';
        rec->fields[rec->nfields].key = cell;
        rec->fields[rec->nfields].value = eq + 1;
        rec->nfields++;
    }
    return tag;
}

static int parse_lines(fg_table *t, char *err, size_t errlen)
{
    size_t cap = 0;
    int number = 0, have_header = 0;
    char *next = t->text;
    while (next && *next) {
        char *line = next;
        char *nl = strchr(line, '\n');
        next = nl ? nl + 1 : NULL;
        if (nl)
            *nl = '\0';
        number++;
        size_t n = strlen(line);
        if (n && line[n - 1] == '\r')
            line[--n] = '\0';
        if (!n || line[0] == '#')
            continue;
        fg_record rec = {0};
        char *tag = split_line(line, number, &rec, err, errlen);
        if (!tag) {
            free(rec.fields);
            if (err && !*err)
                fg_seterr(err, errlen, "line %d is empty of fields", number);
            return -1;
        }
        if (strcmp(tag, HEADER_TAG) == 0) {
            free(t->header.fields);
            t->header = rec;
            have_header = 1;
            continue;
        }
        if (strcmp(tag, "device") != 0 && strcmp(tag, "profile") != 0) {
            free(rec.fields);
            fg_seterr(err, errlen, "line %d: unknown record '%.40s'", number, tag);
            return -1;
        }
        if (t->nrecords == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            fg_record *grown = realloc(t->records, ncap * sizeof *grown);
            if (!grown) {
                free(rec.fields);
                fg_seterr(err, errlen, "out of memory");
                return -1;
            }
            t->records = grown;
            cap = ncap;
        }
        t->records[t->nrecords++] = rec;
    }
    if (!have_header) {
        fg_seterr(err, errlen, "no '" HEADER_TAG "' header line");
        return -1;
    }
    const char *format = fg_record_get(&t->header, "format");
    if (!format || strcmp(format, "1") != 0) {
        fg_seterr(err, errlen, "table format %s, expected 1", format ? format : "(none)");
        return -1;
    }
    const char *kind = fg_record_get(&t->header, "kind");
    t->is_catalog = kind && strcmp(kind, "catalog") == 0;
    if (!t->is_catalog) {
        const char *count = fg_record_get(&t->header, "count");
        char *end = NULL;
        unsigned long c = count ? strtoul(count, &end, 10) : 0;
        if (!count || !*count || *end || c != t->nrecords) {
            fg_seterr(err, errlen, "header says count=%s but the table holds %zu devices", count ? count : "(none)",
                      t->nrecords);
            return -1;
        }
    }
    return 0;
}

int fg_table_parse(char *text, fg_table *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->text = text;
    if (err && errlen)
        err[0] = '\0';
    if (strlen(text) == 0) {
        fg_seterr(err, errlen, "the table is empty");
        return FG_TABLE_CORRUPT;
    }
    if (parse_lines(t, err, errlen) != 0) {
        fg_table_free(t);
        return FG_TABLE_CORRUPT;
    }
    return FG_TABLE_OK;
}

int fg_table_read(const char *path, fg_table *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fg_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return FG_TABLE_MISSING;
    }
    char *buf = malloc(FG_TABLE_MAX_BYTES + 1);
    if (!buf) {
        fclose(f);
        fg_seterr(err, errlen, "out of memory");
        return FG_TABLE_CORRUPT;
    }
    size_t n = fread(buf, 1, FG_TABLE_MAX_BYTES + 1, f);
    fclose(f);
    if (n > FG_TABLE_MAX_BYTES) {
        free(buf);
        fg_seterr(err, errlen, "%s is larger than %u bytes", path, FG_TABLE_MAX_BYTES);
        return FG_TABLE_CORRUPT;
    }
    buf[n] = '\0';
    if (memchr(buf, '\0', n)) {
        free(buf);
        fg_seterr(err, errlen, "%s holds NUL bytes: not a device table", path);
        return FG_TABLE_CORRUPT;
    }
    char inner[256];
    int rc = fg_table_parse(buf, t, inner, sizeof inner);
    if (rc != FG_TABLE_OK)
        fg_seterr(err, errlen, "%s: %s", path, inner);
    return rc;
}
