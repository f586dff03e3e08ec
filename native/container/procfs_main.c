/* fakegpu-procfs: FakeGPU's /proc/driver/nvidia (procfs.h) onto a container or a command.
 *
 *   fakegpu-procfs --pid PID --table TABLE [--driver VERSION]   the mount namespace of PID (a container whose
 *                                                               init waits to be started), devices from TABLE
 *   fakegpu-procfs [--driver VERSION] -- PROG [ARGS...]         PROG in a private mount namespace of its own,
 *                                                               devices from the environment (as every shim)
 *   fakegpu-procfs --render DIR [--table TABLE] [--driver VERSION]   the tree written into DIR (tests)
 *
 * The first fails with one `fakegpu-procfs: ...` line and status 1, leaving nothing mounted. The second never
 * stands in the way of PROG: whatever keeps the tree from being mounted (not root, no right to unshare), PROG
 * runs as it would have without it. FAKEGPU_PROCFS_CLASSIC=1 takes the mount(2) path the kernels without the
 * new mount API get (for the tests). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fg_devices.h"
#include "fg_driver.h"
#include "procfs.h"

#define PROG "fakegpu-procfs"

static fg_devset devs; /* 64 boards: too big for a stack frame worth keeping small */

static void usage(void)
{
    fprintf(stderr, "usage: " PROG " --pid PID --table TABLE [--driver VERSION]\n"
                    "       " PROG " [--driver VERSION] -- PROG [ARGS...]\n"
                    "       " PROG " --render DIR [--table TABLE] [--driver VERSION]\n");
    exit(2);
}

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(PROG ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* What a driver version may be: it is written into files a container reads, so digits and dots only. */
static int driver_ok(const char *v)
{
    size_t n = strlen(v);
    return n > 0 && n < 32 && strspn(v, "0123456789.") == n;
}

static int load_devices(const char *table, char *err, size_t errlen)
{
    if (table && setenv("FAKEGPU_DEVICE_TABLE", table, 1) != 0) {
        snprintf(err, errlen, "%s", strerror(errno));
        return -1;
    }
    return fg_devices_load(&devs, err, errlen) == FG_DEV_OK ? 0 : -1;
}

static int classic_forced(void)
{
    const char *v = getenv("FAKEGPU_PROCFS_CLASSIC");
    return v && !strcmp(v, "1");
}

__attribute__((noreturn)) static void exec_prog(char **argv)
{
    execvp(argv[0], argv);
    int e = errno;
    fprintf(stderr, PROG ": cannot execute %s: %s\n", argv[0], strerror(e));
    exit(e == ENOENT ? 127 : 126);
}

/* Mode 2, `fakegpu run` as root: every way out ends in PROG. */
__attribute__((noreturn)) static void mode_exec(char **argv, const char *driver)
{
    char err[512] = "";
    if (geteuid() != 0) {
        fg_debug("/proc/driver/nvidia not provided: not root");
        exec_prog(argv);
    }
    if (load_devices(NULL, err, sizeof err) != 0) {
        fg_debug("/proc/driver/nvidia not provided: %s", err);
        exec_prog(argv);
    }
    if (!driver_ok(driver)) {
        fg_debug("/proc/driver/nvidia not provided: driver version '%.40s' is not NNN.NN[.NN]", driver);
        exec_prog(argv);
    }
    if (unshare(CLONE_NEWNS) != 0) {
        fg_debug("/proc/driver/nvidia not provided: unshare: %s", strerror(errno));
        exec_prog(argv);
    }
    /* Before anything is mounted: with shared propagation a mount here would also appear on the host. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        fg_debug("/proc/driver/nvidia not provided: making the mount tree private: %s", strerror(errno));
        exec_prog(argv);
    }
    int mfd = -1, rc = classic_forced() ? FG_PROCFS_NO_API : fg_procfs_make(&devs, driver, &mfd, err, sizeof err);
    if (rc == FG_PROCFS_NO_API)
        rc = fg_procfs_classic("/proc/self/fd", &devs, driver, err, sizeof err);
    else if (rc == 0)
        rc = fg_procfs_attach(mfd, err, sizeof err);
    if (mfd >= 0)
        close(mfd);
    if (rc != 0)
        fg_debug("/proc/driver/nvidia not provided: %s", err);
    exec_prog(argv);
}

static pid_t parse_pid(const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v <= 0 || v > INT_MAX || s[0] == '+' || s[0] == ' ')
        die("--pid %.40s is not a process id", s);
    return (pid_t)v;
}

/* The child's part of mode 1: the only code that runs in the container's mount namespace, and it only opens
 * /proc/driver there and attaches the finished mount. Returns the error, or "" on success. */
static void attach_in(int nsfd, int rootfd, int hostproc, int mfd, const char *driver, char *err, size_t errlen)
{
    if (setns(nsfd, CLONE_NEWNS) != 0) {
        snprintf(err, errlen, "cannot enter the mount namespace: %s", strerror(errno));
        return;
    }
    /* setns leaves us at the namespace's root; the container's is the one its init sees (pivot_root or not). */
    if (fchdir(rootfd) != 0 || chroot(".") != 0) {
        snprintf(err, errlen, "cannot enter the container's root: %s", strerror(errno));
        return;
    }
    char inner[512] = "";
    int rc;
    if (mfd >= 0) {
        rc = fg_procfs_attach(mfd, inner, sizeof inner);
    } else {
        /* mount(2) takes paths; the container's /proc has no entry for us, so ours are named from the host's. */
        rc = fchdir(hostproc) == 0 ? fg_procfs_classic("self/fd", &devs, driver, inner, sizeof inner) : -1;
        if (rc != 0 && !inner[0])
            snprintf(inner, sizeof inner, "cannot enter the host's /proc: %s", strerror(errno));
    }
    if (rc != 0)
        snprintf(err, errlen, "%s", inner);
}

static void mode_pid(const char *pidstr, const char *table, const char *driver)
{
    pid_t pid = parse_pid(pidstr);
    char err[512] = "", path[64];
    if (load_devices(table, err, sizeof err) != 0)
        die("cannot load the device table %.300s: %s", table, err);
    if (!driver_ok(driver))
        die("driver version '%.40s' is not NNN.NN[.NN]", driver);
    snprintf(path, sizeof path, "/proc/%d/ns/mnt", (int)pid);
    int nsfd = open(path, O_RDONLY | O_CLOEXEC);
    if (nsfd < 0)
        die("process %d: %s", (int)pid, errno == ENOENT ? "no such process" : strerror(errno));
    struct stat theirs, ours;
    if (fstat(nsfd, &theirs) != 0 || stat("/proc/self/ns/mnt", &ours) != 0)
        die("process %d: cannot compare mount namespaces: %s", (int)pid, strerror(errno));
    /* Never the host's own /proc/driver: a pid that shares our namespace is not a container's. */
    if (theirs.st_dev == ours.st_dev && theirs.st_ino == ours.st_ino)
        die("process %d shares this mount namespace; refusing to mount over the host's /proc/driver", (int)pid);
    snprintf(path, sizeof path, "/proc/%d/root", (int)pid);
    int rootfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        die("process %d: cannot open its root: %s", (int)pid, strerror(errno));
    int hostproc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (hostproc < 0)
        die("cannot open /proc: %s", strerror(errno));

    /* Built here, in the host's namespace, before anything of the container is touched. */
    int mfd = -1, rc = classic_forced() ? FG_PROCFS_NO_API : fg_procfs_make(&devs, driver, &mfd, err, sizeof err);
    if (rc != 0 && rc != FG_PROCFS_NO_API)
        die("cannot build the tree: %s", err);

    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0)
        die("pipe: %s", strerror(errno));
    pid_t child = fork();
    if (child < 0)
        die("fork: %s", strerror(errno));
    if (child == 0) {
        close(pipefd[0]);
        char msg[600] = "";
        attach_in(nsfd, rootfd, hostproc, mfd, driver, msg, sizeof msg);
        if (msg[0]) {
            ssize_t w = write(pipefd[1], msg, strlen(msg));
            (void)w;
            _exit(1);
        }
        _exit(0);
    }
    close(pipefd[1]);
    char msg[600];
    size_t got = 0;
    for (;;) {
        ssize_t r = read(pipefd[0], msg + got, sizeof msg - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || (got += (size_t)r) == sizeof msg - 1)
            break;
    }
    msg[got] = '\0';
    int status;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR)
            die("waitpid: %s", strerror(errno));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("process %d: %s", (int)pid, got ? msg : "the attaching child failed");
}

static void mode_render(const char *dir, const char *table, const char *driver)
{
    char err[512] = "";
    if (load_devices(table, err, sizeof err) != 0)
        die("cannot load the devices: %s", err);
    if (!driver_ok(driver))
        die("driver version '%.40s' is not NNN.NN[.NN]", driver);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        die("%s: %s", dir, strerror(errno));
    if (fg_procfs_write(fd, &devs, driver, err, sizeof err) != 0)
        die("%s: %s", dir, err);
    close(fd);
}

int main(int argc, char **argv)
{
    const char *pid = NULL, *table = NULL, *render = NULL, *driver_arg = NULL;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--"))
            break;
        if (i + 1 >= argc)
            usage();
        if (!strcmp(a, "--pid"))
            pid = argv[++i];
        else if (!strcmp(a, "--table"))
            table = argv[++i];
        else if (!strcmp(a, "--render"))
            render = argv[++i];
        else if (!strcmp(a, "--driver"))
            driver_arg = argv[++i];
        else
            usage();
    }
    if (driver_arg && setenv("FAKEGPU_DRIVER_VERSION", driver_arg, 1) != 0)
        die("setenv: %s", strerror(errno));
    char driver[64];
    fg_driver_version(driver, sizeof driver);
    if (i < argc) { /* "--" */
        if (pid || table || render || i + 1 >= argc)
            usage();
        mode_exec(argv + i + 1, driver);
    }
    if (pid && table && !render)
        mode_pid(pid, table, driver);
    else if (render && !pid)
        mode_render(render, table, driver);
    else
        usage();
    return 0;
}
