/* config.json for fakegpu-create: read, shape-checked, spliced with the plan. */
#ifndef FG_SPLICE_H
#define FG_SPLICE_H

#include <stddef.h>

#include "fg_json.h"
#include "plan.h"
#include "request.h"
#include "textbuf.h"

/* config.json as read: the parsed text and the nodes the splice needs (-1: absent). */
typedef struct {
    char *text;
    size_t len;
    fg_json j;
    int env, mounts, linux_, devices;
    char **envs;
    int nenv;
    char *root_path;
} spec;

/* Parse config.json and its process.env; hands over to Python on anything it does not read as Python would. */
void read_spec(const char *path, spec *sp);
/* Everything config.json must look like for the splice (root.path, namespaces, mounts, devices). */
void check_shape(spec *sp);
/* config.json with the plan's mounts, device nodes and FAKEGPU_DEVICE_TABLE inserted. */
void splice_spec(const spec *sp, const fg_plan *plan, buf_t *out);

#endif
