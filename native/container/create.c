/* fakegpu-create: the container runtime's `create`, in C, for the common case; Python stays the reference.
 *
 * The sh front (hook/fakegpu_hook/front.py) execs this for `create` instead of starting Python. It does what
 * fakegpu_hook.runtime.prepare_create does with injection "runtime": read config.json, see whether the
 * container asks for devices, resolve them (native/common, the same C resolution libnvidia-ml uses) and take
 * NVIDIA_VISIBLE_DEVICES's selection from them (select.c), write the device table, make the mount targets and links in the container root (fg_root.c: never leaving it), splice
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "devtable.h"
#include "fg_devices.h"
#include "fg_root.h"
#include "fg_table.h"
#include "files.h"
#include "handover.h"
#include "plan.h"
#include "procfs.h"
#include "request.h"
#include "runc_args.h"
#include "select.h"
#include "splice.h"
#include "statedir.h"
#include "textbuf.h"

static double ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* inject.log: the lines runtime.py writes, so a log reads the same whichever path prepared the container. */
static void render_log(buf_t *log, const fg_plan *plan, const request *req, const char *seed, unsigned count,
                       const char *timing)
{
    char stamp[16];
    time_t now = time(NULL);
    struct tm tm;
    strftime(stamp, sizeof stamp, "%H:%M:%S ", localtime_r(&now, &tm));
    /* env.py's DeviceRequest.summary */
    bprintf(log, "%s%u devices from %s=", stamp, count, req->source);
    if (!strcmp(req->source, FG_DEVICES_VARIABLE)) {
        py_repr(log, req->spec);
    } else {
        py_repr(log, !req->visible ? FG_NVIDIA_ALL : *req->visible ? req->visible : FG_NVIDIA_NONE);
        bputs(log, " of the inventory ");
        py_repr(log, req->spec);
    }
    bputs(log, " seed=");
    py_repr(log, seed);
    if (strcmp(req->source, FG_DEVICES_VARIABLE)) {
        static const char *const names[] = {FG_DRIVER_CAPABILITIES};
        buf_t granted = {0};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (req->caps & capability_bit(names[i]))
                bprintf(&granted, "%s%s", granted.len ? "," : "", names[i]);
        bputs(log, " capabilities=");
        py_repr(log, granted.s ? granted.s : "");
        free(granted.s);
    }
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

/* A program of the native build's bin folder, as Python names it: os.path.join(os.path.dirname(lib.rstrip("/")),
 * "bin", name) (settings.resolved()'s nvidia-smi, runtime.procfs_binary). */
static void native_program(const char *lib, const char *name, char *out, size_t len)
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
    snprintf(out, len, "%.*s%sbin/%s", (int)keep, trimmed, sep ? "/" : "", name);
}

/* One line appended to inject.log, stamped as runtime.py's _note does. */
static void note(const char *log_path, const char *line)
{
    char stamp[16];
    time_t now = time(NULL);
    struct tm tm;
    strftime(stamp, sizeof stamp, "%H:%M:%S ", localtime_r(&now, &tm));
    int fd = open(log_path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        dprintf(fd, "%s%s\n", stamp, line);
        close(fd);
    }
}

/* Run runc with argv (its name first) and wait: its status as a shell gives it. */
static int spawn_runc(const char *low, char **argv)
{
    pid_t child = fork();
    if (child < 0)
        return 126;
    if (child == 0) {
        execv(low, argv);
        _exit(127);
    }
    int status;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR)
            return 126;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* runtime.py's create_with_procfs. runc refuses OCI mounts under /proc, so /proc/driver/nvidia cannot be in
 * config.json: runc creates the container (its init then waits for `start`; nothing of the image has run), and
 * the tree is attached to the container's mount namespace. Should that fail, the container is deleted again and
 * the create fails, leaving nothing behind. */
static int create_with_procfs(const char *low, const char *name, int ci, const char *pid_file,
                              const fg_devset *set, const char *driver, const char *cid, const char *host_dir,
                              const char *log_path)
{
    char **argv = calloc((size_t)fg_runc_argc + 4, sizeof *argv);
    if (!argv) {
        report_error("out of memory");
        return 1;
    }
    argv[0] = (char *)name;
    memcpy(argv + 1, fg_runc_argv, (size_t)fg_runc_argc * sizeof *argv);
    int code = spawn_runc(low, argv);
    if (code != 0)
        return code; /* runc has reported its own error */
    char text[32] = "";
    int fd = pid_file ? open(pid_file, O_RDONLY | O_CLOEXEC) : -1;
    ssize_t n = fd >= 0 ? read(fd, text, sizeof text - 1) : -1;
    if (fd >= 0)
        close(fd);
    text[n > 0 ? n : 0] = '\0';
    char *end;
    long pid = strtol(text, &end, 10);
    while (*end == ' ' || *end == '\n' || *end == '\t')
        end++;
    if (n <= 0 || *end || pid <= 0 || pid > INT_MAX) {
        note(log_path, "/proc/driver/nvidia: not mounted: runc was given no --pid-file that names the container");
        return 0;
    }
    char err[700];
    if (fg_procfs_into_process((pid_t)pid, set, driver, err, sizeof err) == 0) {
        note(log_path, "/proc/driver/nvidia: mounted over the container's /proc/driver (read-only tmpfs)");
        return 0;
    }
    /* runc's global options, then delete --force <id>. */
    argv[1 + ci] = "delete";
    argv[2 + ci] = "--force";
    argv[3 + ci] = (char *)cid;
    argv[4 + ci] = NULL;
    spawn_runc(low, argv);
    remove_tree(host_dir);
    report_error("cannot mount /proc/driver/nvidia into the container: %s", err);
    return 1;
}

/* This binary's own options, before "--"; the rest is runc's command line. */
static void own_options(int argc, char **argv, const char **python, const char **pycode, const char **native_default,
                        const char **catalog)
{
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--"); i++) {
        const char **slot = !strcmp(argv[i], "--python")           ? python
                            : !strcmp(argv[i], "--pycode")         ? pycode
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
    fg_runc_argv = argv + i + 1;
    fg_runc_argc = argc - i - 1;
}

int main(int argc, char **argv)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const char *python = NULL, *pycode = NULL, *native_default = "", *catalog = "";
    own_options(argc, argv, &python, &pycode, &native_default, &catalog);
    const char *dbg = getenv("FAKEGPU_DEBUG");
    fg_handover_init(python, pycode, dbg && *dbg && strcmp(dbg, "0"));

    int ci = find_command(fg_runc_argc, fg_runc_argv);
    if (ci < 0 || strcmp(fg_runc_argv[ci], "create"))
        fg_defer("not a create");
    int nargs = fg_runc_argc - ci - 1;
    char **args = fg_runc_argv + ci + 1;
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
    if (req.visible && fg_select_visible(&set, req.visible) != 0)
        fg_defer("an " FG_NVIDIA_DEVICES_VARIABLE " entry names no device"); /* Python lists the inventory */
    unsigned minors[FG_MAX_DEVICES];
    for (unsigned i = 0; i < set.count; i++)
        minors[i] = set.dev[i].minor_number;
    fg_table cat;
    if (fg_table_read(catalog, &cat, err, sizeof err) != FG_TABLE_OK)
        fg_defer("catalog: %s", err);
    buf_t table = {0};
    if (render_table(&table, &set, &cat, req.spec, seed, req.visible, req.driver) != 0)
        fg_defer("a profile missing from the catalog");
    char *low = which(s.low_level_runtime);
    if (!low)
        fg_defer("low-level runtime %s not found", s.low_level_runtime);
    const char *lib = *s.native_lib_dir ? s.native_lib_dir : native_default;
    char smi[PATH_MAX];
    if (*s.nvidia_smi)
        snprintf(smi, sizeof smi, "%s", s.nvidia_smi);
    else
        native_program(lib, "nvidia-smi", smi, sizeof smi);
    char host_dir[PATH_MAX], shared_dir[PATH_MAX], table_path[PATH_MAX], log_path[PATH_MAX], full_root[PATH_MAX];
    if (snprintf(host_dir, sizeof host_dir, "%s/%s", s.state_root, cid) >= (int)sizeof host_dir - 16 ||
        snprintf(shared_dir, sizeof shared_dir, "%s/state", host_dir) >= (int)sizeof shared_dir ||
        snprintf(table_path, sizeof table_path, "%s/" FG_DEVICE_TABLE_NAME, host_dir) >= (int)sizeof table_path ||
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
        fg_plan_make(&plan, &r, lib, smi, table_path, catalog, shared_dir, minors, set.count, req.caps,
                     req.driver, err, sizeof err) != 0 ||
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
    char procfs[PATH_MAX];
    native_program(lib, "fakegpu-procfs", procfs, sizeof procfs);
    if (access(procfs, X_OK) == 0) {
        const char *pid_file = NULL;
        for (int k = 0; k < nargs && !pid_file; k++)
            pid_file = option_value(nargs, args, k, "--pid-file");
        return create_with_procfs(low, s.low_level_runtime, ci, pid_file, &set, req.driver, cid, host_dir,
                                  log_path);
    }
    exec_runc(low, s.low_level_runtime);
    report_error("cannot exec %s: %s", low, strerror(errno));
    return 126;
}
