/* fakegpu-create: the container runtime's `create`, in C, for the common case; Python stays the reference.
 *
 * The sh front (hook/fakegpu_hook/front.py) execs this for `create` instead of starting Python. It does what
 * fakegpu_hook.runtime.prepare_create does with injection "runtime": read config.json, see whether the
 * container asks for devices, resolve them (native/common, the same C resolution libnvidia-ml uses), write the
 * device table, make the mount targets and links in the container root (fg_root.c: never leaving it), splice
 * the bind mounts, device nodes and FAKEGPU_DEVICE_TABLE into config.json, write inject.log, and exec runc.
 * A container that asks for nothing gets runc with its config.json untouched.
 *
 * Whatever it does not handle exactly as Python would, it hands over before touching anything: it execs the
 * Python runtime with the same arguments. That covers every bad request (the spec parser's messages, with
 * their suggestions, are Python's), injection "hook", user namespaces, config files or config.json shapes it
 * does not read the same way, and unusual strings. Failures after it has started changing things (the
 * container root) are its own: one `fakegpu-container-runtime: ...` line, the state folder removed,
 * config.json unchanged, as Python does. tests/hook/test_create_differential.py runs both on the same bundles.
 *
 * Usage (written by the front): fakegpu-create --python PY --pycode CODE --native-default DIR --catalog TBL
 *                               -- <runc's global options> create ... <id>
 * It runs in dockerd's environment, never the image's, and passes that environment on unchanged to runc. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fg_devices.h"
#include "fg_json.h"
#include "fg_root.h"
#include "fg_table.h"
#include "files.h"
#include "plan.h"
#include "request.h"
#include "statedir.h"
#include "textbuf.h"

/* ---- hand-over to the Python runtime --------------------------------------------------------------- */

static const char *g_python, *g_pycode;
static int g_argc;
static char **g_argv; /* the runtime's own arguments (after "--") */
static int g_debug;

/* Exec the Python runtime: the reference implementation decides. The reason goes to stderr only under
 * FAKEGPU_DEBUG: runc folds a runtime's stderr into docker's error, and Python may well succeed. */
void fg_defer(const char *fmt, ...)
{
    if (g_debug) {
        va_list ap;
        va_start(ap, fmt);
        fputs("fakegpu-create: handing over to Python: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
    if (!g_python || !g_pycode) {
        fprintf(stderr, "fakegpu-create: no Python runtime to hand over to\n");
        exit(1);
    }
    char **argv = calloc((size_t)g_argc + 6, sizeof *argv);
    if (!argv)
        exit(1);
    int n = 0;
    argv[n++] = (char *)g_python;
    argv[n++] = "-I";
    argv[n++] = "-S";
    argv[n++] = "-c";
    argv[n++] = (char *)g_pycode;
    for (int i = 0; i < g_argc; i++)
        argv[n++] = g_argv[i];
    argv[n] = NULL;
    execv(g_python, argv);
    fprintf(stderr, "fakegpu-create: cannot exec %s: %s\n", g_python, strerror(errno));
    exit(126);
}

/* ---- runc's arguments: the same rules as runtime.py's find_command / find_bundle / _log_path -------- */

static int global_with_value(const char *a)
{
    static const char *opts[] = {"root", "log", "log-format", "criu", "rootless", "cgroup-manager"};
    const char *name = a[1] == '-' ? a + 2 : a + 1;
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (!strcmp(name, opts[i]))
            return 1;
    return 0;
}

static int find_command(int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--"))
            return i + 1 < argc ? i + 1 : -1;
        if (a[0] == '-') {
            if (!strchr(a, '=') && global_with_value(a))
                i++;
            continue;
        }
        return i;
    }
    return -1;
}

static const char *option_value(int argc, char **argv, int i, const char *opt)
{
    size_t n = strlen(opt);
    if (!strcmp(argv[i], opt) && i + 1 < argc)
        return argv[i + 1];
    if (!strncmp(argv[i], opt, n) && argv[i][n] == '=')
        return argv[i] + n + 1;
    return NULL;
}

static void report_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report_error(const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "fakegpu-container-runtime: %s\n", msg);
    const char *path = NULL, *format = "text";
    for (int i = 0; i < g_argc; i++) {
        const char *v;
        if ((v = option_value(g_argc, g_argv, i, "--log")))
            path = v;
        if ((v = option_value(g_argc, g_argv, i, "--log-format")))
            format = v;
    }
    if (!path)
        return;
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    if (!strcmp(format, "json")) {
        /* containerd shows the last JSON error line it finds in runc's log. */
        char stamp[32];
        time_t now = time(NULL);
        struct tm tm;
        strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
        fputs("{\"level\": \"error\", \"msg\": \"fakegpu: ", f);
        for (const unsigned char *c = (const unsigned char *)msg; *c; c++) {
            if (*c == '"' || *c == '\\')
                fprintf(f, "\\%c", *c);
            else if (*c < 0x20)
                fprintf(f, "\\u%04x", *c);
            else
                fputc(*c, f);
        }
        fprintf(f, "\", \"time\": \"%s\"}\n", stamp);
    } else {
        fprintf(f, "fakegpu: %s\n", msg);
    }
    fclose(f);
}

/* ---- the device table: table.py's render_table from the catalog's records ---------------------------- */

static const fg_record *catalog_record(const fg_table *cat, const char *id)
{
    for (size_t i = 0; i < cat->nrecords; i++) {
        const char *rid = fg_record_get(&cat->records[i], "id");
        if (rid && !strcmp(rid, id))
            return &cat->records[i];
    }
    return NULL;
}

static int render_table(buf_t *b, const fg_devset *set, const fg_table *cat, const char *spec, const char *seed)
{
    bputs(b, "# FakeGPU device table (generated by fakegpu; do not edit)\n");
    bprintf(b, "fakegpu-device-table\tformat=1\tcount=%u\tspec=%s\tseed=%s\n", set->count, spec, seed);
    for (unsigned i = 0; i < set->count; i++) {
        const fg_device *d = &set->dev[i];
        const fg_record *r = catalog_record(cat, d->profile);
        if (!r)
            return -1;
        char v[4][24];
        snprintf(v[0], sizeof v[0], "%u", d->index);
        snprintf(v[1], sizeof v[1], "%u", d->pci_domain);
        snprintf(v[2], sizeof v[2], "%u", d->pci_bus);
        snprintf(v[3], sizeof v[3], "%u", d->minor_number);
        const char *keys[] = {"index", "uuid", "serial", "pci_bus_id", "pci.domain", "pci.bus", "minor_number",
                              "profile"};
        const char *vals[] = {v[0], d->uuid, d->serial, d->pci_bus_id, v[1], v[2], v[3], d->profile};
        bputs(b, "device");
        /* {**identity, **profile}: a profile key that names an identity field keeps the identity's place. */
        for (size_t k = 0; k < 8; k++) {
            const char *pv = fg_record_get(r, keys[k]);
            bprintf(b, "\t%s=%s", keys[k], pv ? pv : vals[k]);
        }
        for (size_t f = 0; f < r->nfields; f++) {
            const char *key = r->fields[f].key;
            int skip = !strcmp(key, "id") || !strcmp(key, "aliases");
            for (size_t k = 0; k < 8 && !skip; k++)
                skip = !strcmp(key, keys[k]);
            if (!skip)
                bprintf(b, "\t%s=%s", key, r->fields[f].value);
        }
        bputs(b, "\n");
    }
    return 0;
}

/* ---- config.json ----------------------------------------------------------------------------------- */

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

static double ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

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

static void read_spec(const char *path, spec *sp)
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
    static const char *files[] = {"/etc/resolv.conf", "/etc/hostname", "/etc/hosts", CONTAINER_DIR,
                                  CONTAINER_DIR "/devices.tbl", CONTAINER_DIR "/catalog.tbl", "/usr/bin/nvidia-smi"};
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
static void check_shape(spec *sp)
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
static void splice_spec(const spec *sp, const fg_plan *plan, buf_t *out)
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
        bprintf(&at[n++].text, "%s\"FAKEGPU_DEVICE_TABLE=/run/fakegpu/devices.tbl\"",
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

/* inject.log: the lines runtime.py writes, so a log reads the same whichever path prepared the container. */
static void render_log(buf_t *log, const fg_plan *plan, const request *req, const char *seed, unsigned count,
                       const char *timing)
{
    char stamp[16];
    time_t now = time(NULL);
    struct tm tm;
    strftime(stamp, sizeof stamp, "%H:%M:%S ", localtime_r(&now, &tm));
    bprintf(log, "%s%u devices from %s=", stamp, count, req->source);
    py_repr(log, req->spec);
    bputs(log, " seed=");
    py_repr(log, seed);
    bputs(log, "\n");
    for (size_t k = 0; k < plan->nnotes; k++)
        bprintf(log, "%s%s\n", stamp, plan->notes[k]);
    bprintf(log, "%slibraries go to %s\n", stamp, plan->lib_dir);
    for (size_t k = 0; k < plan->ndirs; k++)
        bprintf(log, "%smount %s -> %s\n", stamp, plan->dirs[k].a, plan->dirs[k].b);
    for (size_t k = 0; k < plan->nfiles; k++)
        bprintf(log, "%smount %s -> %s\n", stamp, plan->files[k].a, plan->files[k].b);
    for (size_t k = 0; k < plan->nlinks; k++)
        bprintf(log, "%slink %s -> %s\n", stamp, plan->links[k].a, plan->links[k].b);
    bprintf(log, "%sdevice nodes: %zu under /dev (made by runc)\n", stamp, plan->nnodes);
    bprintf(log, "%s%s\n", stamp, timing);
}

/* settings.resolved()'s nvidia-smi: os.path.join(os.path.dirname(lib.rstrip("/")), "bin", "nvidia-smi"). */
static void default_smi(const char *lib, char *smi, size_t len)
{
    char trimmed[PATH_MAX];
    snprintf(trimmed, sizeof trimmed, "%s", lib);
    size_t n = strlen(trimmed);
    while (n && trimmed[n - 1] == '/')
        trimmed[--n] = '\0';
    char *slash = strrchr(trimmed, '/');
    size_t head = slash ? (size_t)(slash - trimmed) + 1 : 0;
    size_t keep = head;
    while (keep > 1 && trimmed[keep - 1] == '/')
        keep--;
    if (keep == 1 && trimmed[0] == '/')
        keep = head; /* all slashes: dirname keeps them */
    int sep = keep && trimmed[keep - 1] != '/';
    snprintf(smi, len, "%.*s%sbin/nvidia-smi", (int)keep, trimmed, sep ? "/" : "");
}

static void exec_runc(const char *low, const char *name)
{
    char **argv = calloc((size_t)g_argc + 2, sizeof *argv);
    if (argv) {
        argv[0] = (char *)name;
        memcpy(argv + 1, g_argv, (size_t)g_argc * sizeof *argv);
        execv(low, argv);
    }
}

/* This binary's own options, before "--"; the rest is runc's command line. */
static void own_options(int argc, char **argv, const char **native_default, const char **catalog)
{
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--"); i++) {
        const char **slot = !strcmp(argv[i], "--python")           ? &g_python
                            : !strcmp(argv[i], "--pycode")         ? &g_pycode
                            : !strcmp(argv[i], "--native-default") ? native_default
                            : !strcmp(argv[i], "--catalog")        ? catalog
                                                                   : NULL;
        if (!slot || i + 1 >= argc)
            break;
        *slot = argv[++i];
    }
    if (i >= argc || strcmp(argv[i], "--")) {
        fprintf(stderr, "fakegpu-create: usage: fakegpu-create --python PY --pycode CODE --native-default DIR "
                        "--catalog TBL -- RUNC-ARGS...\n");
        exit(2);
    }
    g_argv = argv + i + 1;
    g_argc = argc - i - 1;
}

int main(int argc, char **argv)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const char *native_default = "", *catalog = "";
    own_options(argc, argv, &native_default, &catalog);
    const char *dbg = getenv("FAKEGPU_DEBUG");
    g_debug = dbg && *dbg && strcmp(dbg, "0");

    int ci = find_command(g_argc, g_argv);
    if (ci < 0 || strcmp(g_argv[ci], "create"))
        fg_defer("not a create");
    int nargs = g_argc - ci - 1;
    char **args = g_argv + ci + 1;
    char bundle[PATH_MAX] = "";
    for (int k = 0; k < nargs && !bundle[0]; k++) {
        const char *v = option_value(nargs, args, k, "--bundle");
        if (!v)
            v = option_value(nargs, args, k, "-b");
        if (v)
            snprintf(bundle, sizeof bundle, "%s", v);
    }
    if (!bundle[0] && !getcwd(bundle, sizeof bundle))
        fg_defer("no bundle");
    const char *cid = nargs ? args[nargs - 1] : "";
    if (!*cid || cid[0] == '-' || strchr(cid, '/') || !strcmp(cid, ".") || !strcmp(cid, ".."))
        fg_defer("no usable container id"); /* Python adds the hook then */

    settings s;
    load_settings(&s);
    char config_path[PATH_MAX];
    if (snprintf(config_path, sizeof config_path, "%s/config.json", bundle) >= (int)sizeof config_path)
        fg_defer("bundle path too long");
    spec sp;
    read_spec(config_path, &sp);
    request req = {0};
    if (!device_request(sp.envs, sp.nenv, &s, &req)) {
        /* Nothing asked: runc with config.json as it was, byte for byte. */
        char *low = which(s.low_level_runtime);
        if (low)
            exec_runc(low, s.low_level_runtime);
        fg_defer("cannot exec the low-level runtime %s", s.low_level_runtime); /* Python words the error */
    }
    check_shape(&sp);
    const char *seed = req.seed ? req.seed : "0";
    if (strlen(req.spec) > FG_MAX_SPEC_LENGTH || strlen(seed) > FG_MAX_SEED_LENGTH)
        fg_defer("a value past its length limit"); /* Python words the error, bounded */
    if (strpbrk(req.spec, "\t\n") || strpbrk(seed, "\t\n") || !is_ascii(seed))
        fg_defer("a tab, newline or non-ASCII character in the spec or seed");
    if (!is_ascii(s.state_root) || !is_ascii(s.native_lib_dir) || !is_ascii(s.nvidia_smi) ||
        !is_ascii(sp.root_path))
        fg_defer("non-ASCII paths");
    double t_request = ms_since(&t0);

    char err[1024];
    static fg_devset set;
    if (fg_devices_from_spec(req.spec, seed, catalog, &set, err, sizeof err) != FG_DEV_OK)
        fg_defer("the spec: %s", err); /* Python's parser words the error, with its suggestions */
    fg_table cat;
    if (fg_table_read(catalog, &cat, err, sizeof err) != FG_TABLE_OK)
        fg_defer("catalog: %s", err);
    buf_t table = {0};
    if (render_table(&table, &set, &cat, req.spec, seed) != 0)
        fg_defer("a profile missing from the catalog");
    char *low = which(s.low_level_runtime);
    if (!low)
        fg_defer("low-level runtime %s not found", s.low_level_runtime);
    const char *lib = *s.native_lib_dir ? s.native_lib_dir : native_default;
    char smi[PATH_MAX];
    if (*s.nvidia_smi)
        snprintf(smi, sizeof smi, "%s", s.nvidia_smi);
    else
        default_smi(lib, smi, sizeof smi);
    char host_dir[PATH_MAX], shared_dir[PATH_MAX], table_path[PATH_MAX], log_path[PATH_MAX], full_root[PATH_MAX];
    if (snprintf(host_dir, sizeof host_dir, "%s/%s", s.state_root, cid) >= (int)sizeof host_dir - 16 ||
        snprintf(shared_dir, sizeof shared_dir, "%s/state", host_dir) >= (int)sizeof shared_dir ||
        snprintf(table_path, sizeof table_path, "%s/devices.tbl", host_dir) >= (int)sizeof table_path ||
        snprintf(log_path, sizeof log_path, "%s/inject.log", host_dir) >= (int)sizeof log_path ||
        snprintf(full_root, sizeof full_root, "%s%s%s", sp.root_path[0] == '/' ? "" : bundle,
                 sp.root_path[0] == '/' ? "" : "/", sp.root_path) >= (int)sizeof full_root)
        fg_defer("a path too long");
    double t_devices = ms_since(&t0);

    /* From here on things change: the state folder, then the container root. */
    if (fg_make_container_dir(s.state_root, host_dir, err, sizeof err) != 0) {
        report_error("%s", err);
        return 1;
    }
    if (write_atomic(table_path, table.s, table.len, 0644, err, sizeof err) != 0) {
        remove_tree(host_dir);
        report_error("cannot write the device table: %s", err);
        return 1;
    }
    fg_root r;
    fg_plan plan;
    fg_plan_init(&plan);
    int opened = fg_root_open(&r, full_root, err, sizeof err);
    /* Tests run every case through the component walk too, as on a kernel without openat2. */
    const char *no2 = getenv("FAKEGPU_NO_OPENAT2");
    if (no2 && *no2)
        r.use_openat2 = 0;
    if (opened != 0 ||
        fg_plan_make(&plan, &r, lib, smi, table_path, catalog, shared_dir, set.count, err, sizeof err) != 0 ||
        fg_plan_prepare(&plan, &r, err, sizeof err) != 0) {
        remove_tree(host_dir);
        report_error("cannot prepare the container root: %s", err);
        return 1;
    }
    fg_root_close(&r);
    double t_root = ms_since(&t0);

    buf_t out = {0}, log = {0};
    splice_spec(&sp, &plan, &out);
    /* Where the time goes, cumulative: config.json and the request read, the table resolved and rendered, the
     * table written and the root prepared (each create there is a round trip to the image's storage). */
    char timing[160];
    snprintf(timing, sizeof timing, "prepared in %.1f ms by fakegpu-create (C): request %.1f, devices %.1f, root %.1f",
             ms_since(&t0), t_request, t_devices, t_root);
    render_log(&log, &plan, &req, seed, set.count, timing);
    /* Host only (host_dir is root's alone): it names host paths no container should learn. */
    int lf = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (lf >= 0) {
        if (write(lf, log.s, log.len) < 0) { /* the log is diagnostics only */
        }
        close(lf);
    }
    if (write_atomic(config_path, out.s, out.len, -1, err, sizeof err) != 0) {
        remove_tree(host_dir);
        report_error("%s", err);
        return 1;
    }
    exec_runc(low, s.low_level_runtime);
    report_error("cannot exec %s: %s", low, strerror(errno));
    return 126;
}
