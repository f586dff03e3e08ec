/* config.json: read strictly, checked for the shape the splice needs (anything else goes to Python), and
 * rewritten by inserting text where Python's modifiers (AddMounts, AddDevices, SetEnv) append, so every byte
 * the container's own config.json held stays as it was. */
#include "splice.h"

#include <stdlib.h>
#include <string.h>

#include "files.h"

typedef struct {
    size_t at;
    buf_t text;
} insertion;

static int cmp_splice(const void *a, const void *b)
{
    size_t x = ((const insertion *)a)->at, y = ((const insertion *)b)->at;
    return x < y ? -1 : x > y;
}

static int type_of(const fg_json *j, int n) { return n < 0 ? -1 : j->nodes[n].type; }

/* Whether an array of objects has an element whose `field` is the string s. */
static int listed(const fg_json *j, int arr, const char *field, const char *s)
{
    if (arr < 0)
        return 0;
    for (int c = j->nodes[arr].first_child; c >= 0; c = j->nodes[c].next)
        if (fg_json_string_eq(j, fg_json_get(j, c, field), s))
            return 1;
    return 0;
}

void read_spec(const char *path, spec *sp)
{
    int missing;
    char err[256];
    memset(sp, 0, sizeof *sp);
    sp->text = read_file(path, &sp->len, &missing);
    if (!sp->text)
        fg_defer("cannot read %s", path);
    if (fg_json_parse(&sp->j, sp->text, sp->len, err, sizeof err) != 0)
        fg_defer("%s: %s", path, err);
    fg_json *j = &sp->j;
    if (j->nodes[0].type != FG_JOBJECT)
        fg_defer("config.json is not an object");
    int process = fg_json_get(j, 0, "process");
    if (process >= 0 && type_of(j, process) != FG_JOBJECT && type_of(j, process) != FG_JNULL)
        fg_defer("process is not an object");
    sp->env = fg_json_get(j, process, "env");
    if (sp->env >= 0 && type_of(j, sp->env) != FG_JNULL) {
        if (type_of(j, sp->env) != FG_JARRAY)
            fg_defer("process.env is not an array");
        sp->envs = calloc((size_t)j->nodes[sp->env].count + 1, sizeof *sp->envs);
        for (int c = j->nodes[sp->env].first_child; c >= 0; c = j->nodes[c].next)
            if (!(sp->envs[sp->nenv++] = fg_json_string(j, c)))
                fg_defer("process.env holds something other than a plain string");
    }
}

/* inject.py's runtime_mount, plus our own fixed destinations (a retried create): mounts that cover no folder
 * of ours. Any other goes to Python's check_covering_mounts. */
static int known_mount(const char *d)
{
    static const char *trees[] = {"/proc", "/sys", "/dev"};
    static const char *files[] = {"/etc/resolv.conf",         "/etc/hostname",
                                  "/etc/hosts",               FG_CONTAINER_DIR,
                                  FG_CONTAINER_DEVICE_TABLE,  FG_CONTAINER_CATALOG_TABLE,
                                  FG_CONTAINER_NVIDIA_SMI};
    if (strstr(d, "//") || strstr(d, "/./") || strstr(d, "/../") || (strlen(d) > 1 && d[strlen(d) - 1] == '/'))
        return 0; /* not in normal form: Python normalises it */
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (!strcmp(d, files[i]))
            return 1;
    for (size_t i = 0; i < sizeof trees / sizeof trees[0]; i++) {
        size_t n = strlen(trees[i]);
        if (!strncmp(d, trees[i], n) && (d[n] == '\0' || d[n] == '/'))
            return 1;
    }
    return 0;
}

/* Everything config.json must look like for the splice, checked before anything is changed. */
void check_shape(spec *sp)
{
    fg_json *j = &sp->j;
    sp->root_path = fg_json_string(j, fg_json_get(j, fg_json_get(j, 0, "root"), "path"));
    if (!sp->root_path || !*sp->root_path)
        fg_defer("no root.path");
    sp->linux_ = fg_json_get(j, 0, "linux");
    if (sp->linux_ >= 0 && type_of(j, sp->linux_) != FG_JOBJECT)
        fg_defer("linux is not an object");
    int namespaces = fg_json_get(j, sp->linux_, "namespaces");
    if (namespaces >= 0 && type_of(j, namespaces) != FG_JNULL) {
        if (type_of(j, namespaces) != FG_JARRAY)
            fg_defer("linux.namespaces is not an array");
        if (listed(j, namespaces, "type", "user"))
            fg_defer("a user namespace: the hook makes the nodes there");
    }
    sp->mounts = fg_json_get(j, 0, "mounts");
    if (sp->mounts >= 0 && type_of(j, sp->mounts) != FG_JARRAY)
        fg_defer("mounts is not an array");
    /* A mount of the container's own (a VOLUME, -v) may cover a folder we prepare: Python resolves it inside
     * the root and decides (inject.py's check_covering_mounts). Docker's and containerd's own are known. */
    for (int c = sp->mounts >= 0 ? j->nodes[sp->mounts].first_child : -1; c >= 0; c = j->nodes[c].next) {
        char *dest = fg_json_string(j, fg_json_get(j, c, "destination"));
        int known = dest && (known_mount(dest) || fg_plan_in_lib_dir(dest));
        free(dest);
        if (!known)
            fg_defer("a mount of the container's own");
    }
    sp->devices = fg_json_get(j, sp->linux_, "devices");
    if (sp->devices >= 0 && type_of(j, sp->devices) != FG_JARRAY)
        fg_defer("linux.devices is not an array");
}

/* config.json with the plan's mounts, device nodes and FAKEGPU_DEVICE_TABLE inserted where Python's modifiers
 * (AddMounts, AddDevices, SetEnv) append them; entries already there (a retried create) are not added again. */
void splice_spec(const spec *sp, const fg_plan *plan, buf_t *out)
{
    const fg_json *j = &sp->j;
    buf_t m = {0}, d = {0};
    int nm = 0, nd = 0;
    for (size_t k = 0; k < plan->ndirs + plan->nlib_dirs + plan->nfiles; k++) {
        const fg_pair *p = k < plan->ndirs                     ? &plan->dirs[k]
                           : k < plan->ndirs + plan->nlib_dirs ? &plan->lib_dirs[k - plan->ndirs]
                                                               : &plan->files[k - plan->ndirs - plan->nlib_dirs];
        if (listed(j, sp->mounts, "destination", p->b))
            continue;
        bputs(&m, nm++ ? ",{\"destination\":" : "{\"destination\":");
        json_str(&m, p->b);
        bputs(&m, ",\"type\":\"bind\",\"source\":");
        json_str(&m, p->a);
        bputs(&m, k < plan->ndirs ? ",\"options\":[\"bind\",\"rw\",\"nosuid\",\"nodev\",\"noexec\"]}"
                                  : ",\"options\":[\"bind\",\"ro\",\"nosuid\",\"nodev\"]}");
    }
    for (size_t k = 0; k < plan->nnodes; k++) {
        if (listed(j, sp->devices, "path", plan->nodes[k].path))
            continue;
        bputs(&d, nd++ ? ",{\"path\":" : "{\"path\":");
        json_str(&d, plan->nodes[k].path);
        bprintf(&d, ",\"type\":\"c\",\"major\":%d,\"minor\":%d,\"fileMode\":438,\"uid\":0,\"gid\":0}",
                plan->nodes[k].major, plan->nodes[k].minor);
    }
    /* At most one insertion per place: mounts, linux(.devices), env, and the top object's end for new keys. */
    insertion at[4];
    int n = 0;
    memset(at, 0, sizeof at);
    buf_t top = {0};
    int top_members = j->nodes[0].count;
    if (nm && sp->mounts >= 0) {
        at[n].at = j->nodes[sp->mounts].end - 1;
        bprintf(&at[n++].text, "%s%s", j->nodes[sp->mounts].count ? "," : "", m.s);
    } else if (nm) {
        bprintf(&top, "%s\"mounts\":[%s]", top_members++ ? "," : "", m.s);
    }
    if (nd && sp->devices >= 0) {
        at[n].at = j->nodes[sp->devices].end - 1;
        bprintf(&at[n++].text, "%s%s", j->nodes[sp->devices].count ? "," : "", d.s);
    } else if (nd && sp->linux_ >= 0) {
        at[n].at = j->nodes[sp->linux_].end - 1;
        bprintf(&at[n++].text, "%s\"devices\":[%s]", j->nodes[sp->linux_].count ? "," : "", d.s);
    } else if (nd) {
        bprintf(&top, "%s\"linux\":{\"devices\":[%s]}", top_members++ ? "," : "", d.s);
    }
    if (!env_lookup(sp->envs, sp->nenv, "FAKEGPU_DEVICE_TABLE")) {
        at[n].at = j->nodes[sp->env].end - 1;
        bprintf(&at[n++].text, "%s\"FAKEGPU_DEVICE_TABLE=" FG_CONTAINER_DEVICE_TABLE "\"",
                j->nodes[sp->env].count ? "," : "");
    }
    if (top.len) {
        at[n].at = j->nodes[0].end - 1;
        at[n++].text = top;
    }
    qsort(at, (size_t)n, sizeof at[0], cmp_splice);
    size_t from = 0;
    for (int k = 0; k < n; k++) {
        bput(out, sp->text + from, at[k].at - from);
        bput(out, at[k].text.s, at[k].text.len);
        from = at[k].at;
    }
    bput(out, sp->text + from, sp->len - from);
}
