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

static int load_devices(const char *table, char *err, size_t errlen)
{
    if (table && setenv("FAKEGPU_DEVICE_TABLE", table, 1) != 0) {
        snprintf(err, errlen, "%s", strerror(errno));
        return -1;
    }
    return fg_devices_load(&devs, err, errlen) == FG_DEV_OK ? 0 : -1;
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
    if (!fg_is_driver_version(driver)) {
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
    int mfd = -1, rc = fg_procfs_classic_forced() ? FG_PROCFS_NO_API : fg_procfs_make(&devs, driver, &mfd, err, sizeof err);
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

static void mode_pid(const char *pidstr, const char *table, const char *driver)
{
    pid_t pid = parse_pid(pidstr);
    char err[600] = "";
    if (load_devices(table, err, sizeof err) != 0)
        die("cannot load the device table %.300s: %s", table, err);
    if (!fg_is_driver_version(driver))
        die("driver version '%.40s' is not NNN.NN[.NN]", driver);
    if (fg_procfs_into_process(pid, &devs, driver, err, sizeof err) != 0)
        die("%s", err);
}

static void mode_render(const char *dir, const char *table, const char *driver)
{
    char err[512] = "";
    if (load_devices(table, err, sizeof err) != 0)
        die("cannot load the devices: %s", err);
    if (!fg_is_driver_version(driver))
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
