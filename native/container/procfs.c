#include "procfs.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/mount.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* glibc before 2.36 has no wrappers and older headers no numbers; these are the same on every architecture
 * since the syscall tables were unified (5.1). */
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_fsopen
#define SYS_fsopen 430
#endif
#ifndef SYS_fsconfig
#define SYS_fsconfig 431
#endif
#ifndef SYS_fsmount
#define SYS_fsmount 432
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif

/* A few KiB of text; a page per file and per folder for up to FG_MAX_DEVICES boards fits with room to spare. */
#define TMPFS_OPTS_SIZE "2m"
#define TMPFS_OPTS_INODES "1024"
#define TMPFS_OPTIONS "size=" TMPFS_OPTS_SIZE ",nr_inodes=" TMPFS_OPTS_INODES ",mode=0555"
#define DIR_FLAGS (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

#if defined(__x86_64__)
#define KERNEL_ARCH "x86_64"
#elif defined(__aarch64__)
#define KERNEL_ARCH "aarch64"
#else
#define KERNEL_ARCH "unknown"
#endif

static void oserr(char *err, size_t errlen, const char *what)
{
    snprintf(err, errlen, "%s: %s", what, strerror(errno));
}

/* snprintf that reports what it wrote, not what it would have, so a caller can append safely. */
static size_t appendf(char *buf, size_t len, size_t at, const char *fmt, ...)
{
    if (at >= len)
        return at;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + at, len - at, fmt, ap);
    va_end(ap);
    if (n < 0)
        return at;
    return (size_t)n >= len - at ? len - 1 : at + (size_t)n;
}

size_t fg_procfs_version_text(char *buf, size_t len, const char *driver)
{
    /* The proprietary module's banner: parsers take the word after "Module" or the first NNN.NN[.NN]; the
     * build stamp and compiler line are fixed (no module was built), shaped as gcc -v's last line, trailing
     * blank included. */
    return appendf(buf, len, 0,
                   "NVRM version: NVIDIA UNIX " KERNEL_ARCH " Kernel Module  %s  Tue Sep 23 09:55:41 UTC 2025\n"
                   "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n",
                   driver);
}

static int arch_is(const fg_device *d, const char *const *names)
{
    for (; *names; names++)
        if (!strcmp(d->architecture, *names))
            return 1;
    return 0;
}

size_t fg_procfs_information_text(char *buf, size_t len, const fg_device *d, const char *driver)
{
    static const char *const wide_dma[] = {"hopper", "blackwell", NULL}; /* 52-bit DMA, as H100s report */
    static const char *const no_gsp[] = {"maxwell", "pascal", "volta", NULL}; /* no GSP firmware line */
    char vbios[32];
    int dma_bits = arch_is(d, wide_dma) ? 52 : 47;
    /* No interrupt exists; a stable number per board in the range MSI vectors take on real hosts. */
    unsigned irq = 150 + 8 * d->minor_number;
    size_t at = 0;
    at = appendf(buf, len, at, "Model: \t\t %s\n", d->name);
    at = appendf(buf, len, at, "IRQ:   \t\t %u\n", irq);
    at = appendf(buf, len, at, "GPU UUID: \t %s\n", d->uuid);
    at = appendf(buf, len, at, "Video BIOS: \t %s\n", fg_vbios_version(d, 0, vbios, sizeof vbios));
    at = appendf(buf, len, at, "Bus Type: \t PCIe\n");
    at = appendf(buf, len, at, "DMA Size: \t %d bits\n", dma_bits);
    at = appendf(buf, len, at, "DMA Mask: \t 0x%llx\n", (1ULL << dma_bits) - 1);
    at = appendf(buf, len, at, "Bus Location: \t %04x:%02x:%02x.%x\n", d->pci_domain, d->pci_bus, d->pci_dev,
                 d->pci_function);
    at = appendf(buf, len, at, "Device Minor: \t %u\n", d->minor_number);
    if (!arch_is(d, no_gsp)) /* the driver prints the line only when the board runs GSP firmware */
        at = appendf(buf, len, at, "GPU Firmware: \t %s\n", driver);
    at = appendf(buf, len, at, "GPU Excluded:\t No\n");
    return at;
}

size_t fg_procfs_params_text(char *buf, size_t len)
{
    /* A 580 driver's parameters at their defaults, in its order (numbers first, then quoted strings), with what
     * the distributions' modprobe.d sets (video memory kept across suspend in /var/tmp). DeviceFileMode 438 is
     * 0666; nvidia-modprobe reads the device-file keys, so they stay in the first lines as on a real host. */
    static const char text[] = "ResmanDebugLevel: 4294967295\n"
                               "RmLogonRC: 1\n"
                               "ModifyDeviceFiles: 1\n"
                               "DeviceFileUID: 0\n"
                               "DeviceFileGID: 0\n"
                               "DeviceFileMode: 438\n"
                               "InitializeSystemMemoryAllocations: 1\n"
                               "UsePageAttributeTable: 4294967295\n"
                               "EnableMSI: 1\n"
                               "EnablePCIeGen3: 0\n"
                               "MemoryPoolSize: 0\n"
                               "KMallocHeapMaxSize: 0\n"
                               "VMallocHeapMaxSize: 0\n"
                               "IgnoreMMIOCheck: 0\n"
                               "EnableStreamMemOPs: 0\n"
                               "EnableUserNUMAManagement: 1\n"
                               "NvLinkDisable: 0\n"
                               "RmProfilingAdminOnly: 1\n"
                               "PreserveVideoMemoryAllocations: 1\n"
                               "EnableS0ixPowerManagement: 0\n"
                               "S0ixPowerManagementVideoMemoryThreshold: 256\n"
                               "DynamicPowerManagement: 3\n"
                               "DynamicPowerManagementVideoMemoryThreshold: 200\n"
                               "RegisterPCIDriver: 1\n"
                               "EnablePCIERelaxedOrderingMode: 0\n"
                               "EnableResizableBar: 0\n"
                               "EnableGpuFirmware: 18\n"
                               "EnableGpuFirmwareLogs: 2\n"
                               "RmNvlinkBandwidthLinkCount: 0\n"
                               "EnableDbgBreakpoint: 0\n"
                               "OpenRmEnableUnsupportedGpus: 1\n"
                               "DmaRemapPeerMmio: 1\n"
                               "ImexChannelCount: 2048\n"
                               "CreateImexChannel0: 0\n"
                               "GrdmaPciTopoCheckOverride: 0\n"
                               "CoherentGPUMemoryMode: \"\"\n"
                               "RegistryDwords: \"\"\n"
                               "RegistryDwordsPerDevice: \"\"\n"
                               "RmMsg: \"\"\n"
                               "GpuBlacklist: \"\"\n"
                               "TemporaryFilePath: \"/var/tmp\"\n"
                               "ExcludedGpus: \"\"\n";
    return appendf(buf, len, 0, "%s", text);
}

/* The registry as the driver shows it when nothing was written to it (top level and per GPU alike). */
static const char REGISTRY_TEXT[] = "Binary: \"\"\n";

static int put_file(int dirfd, const char *name, const char *text, size_t n, char *err, size_t errlen)
{
    int fd = openat(dirfd, name, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0444);
    if (fd < 0) {
        oserr(err, errlen, name);
        return -1;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, text + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            oserr(err, errlen, name);
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    /* The mode survives any umask the caller has. */
    if (fchmod(fd, 0444) != 0 || close(fd) != 0) {
        oserr(err, errlen, name);
        return -1;
    }
    return 0;
}

/* Folders are made writable for the owner and closed to 0555 once filled, so rendering into a plain folder
 * works without CAP_DAC_OVERRIDE too. */
static int open_new_dir(int dirfd, const char *name, char *err, size_t errlen)
{
    if (mkdirat(dirfd, name, 0755) != 0) {
        oserr(err, errlen, name);
        return -1;
    }
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        oserr(err, errlen, name);
    return fd;
}

static int seal_dir(int fd, const char *name, char *err, size_t errlen)
{
    int rc = fchmod(fd, 0555);
    if (rc != 0)
        oserr(err, errlen, name);
    close(fd);
    return rc;
}

static int write_gpu(int gpus, const fg_device *d, const char *driver, char *err, size_t errlen)
{
    char bus[32], text[1024];
    /* The driver names the folder with a 4-digit domain in lower case, not NVML's 8-digit upper-case id. */
    snprintf(bus, sizeof bus, "%04x:%02x:%02x.%x", d->pci_domain, d->pci_bus, d->pci_dev, d->pci_function);
    int fd = open_new_dir(gpus, bus, err, errlen);
    if (fd < 0)
        return -1;
    size_t n = fg_procfs_information_text(text, sizeof text, d, driver);
    if (put_file(fd, "information", text, n, err, errlen) ||
        put_file(fd, "registry", REGISTRY_TEXT, sizeof REGISTRY_TEXT - 1, err, errlen)) {
        close(fd);
        return -1;
    }
    return seal_dir(fd, bus, err, errlen);
}

int fg_procfs_write(int dirfd, const fg_devset *devs, const char *driver, char *err, size_t errlen)
{
    char text[4096];
    int top = open_new_dir(dirfd, "nvidia", err, errlen);
    if (top < 0)
        return -1;
    int rc = -1, gpus = -1;
    size_t n = fg_procfs_version_text(text, sizeof text, driver);
    if (put_file(top, "version", text, n, err, errlen))
        goto out;
    n = fg_procfs_params_text(text, sizeof text);
    if (put_file(top, "params", text, n, err, errlen) ||
        put_file(top, "registry", REGISTRY_TEXT, sizeof REGISTRY_TEXT - 1, err, errlen))
        goto out;
    /* Empty, as on a host whose driver has nothing to warn about and no patches applied. */
    static const char *const empty[] = {"warnings", "patches"};
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++) {
        int fd = open_new_dir(top, empty[i], err, errlen);
        if (fd < 0 || seal_dir(fd, empty[i], err, errlen))
            goto out;
    }
    gpus = open_new_dir(top, "gpus", err, errlen);
    if (gpus < 0)
        goto out;
    for (unsigned i = 0; i < devs->count; i++)
        if (write_gpu(gpus, &devs->dev[i], driver, err, errlen))
            goto out;
    rc = seal_dir(gpus, "gpus", err, errlen);
    gpus = -1;
    if (rc == 0)
        rc = seal_dir(top, "nvidia", err, errlen);
    top = -1;
out:
    if (gpus >= 0)
        close(gpus);
    if (top >= 0)
        close(top);
    return rc;
}

int fg_procfs_make(const fg_devset *devs, const char *driver, int *mountfd, char *err, size_t errlen)
{
    *mountfd = -1;
    int fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
    if (fs < 0) {
        int e = errno;
        oserr(err, errlen, "fsopen tmpfs");
        return e == ENOSYS ? FG_PROCFS_NO_API : -1;
    }
    /* "source" names it in mountinfo as mount(8) would, not "none". */
    static const char *const opts[][2] = {
        {"source", "tmpfs"}, {"size", TMPFS_OPTS_SIZE}, {"nr_inodes", TMPFS_OPTS_INODES}, {"mode", "0555"}};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, opts[i][0], opts[i][1], 0) != 0) {
            oserr(err, errlen, "fsconfig tmpfs");
            close(fs);
            return -1;
        }
    if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) != 0) {
        oserr(err, errlen, "fsconfig tmpfs create");
        close(fs);
        return -1;
    }
    int mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                           MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_NOSYMFOLLOW);
    close(fs);
    if (mnt < 0) {
        oserr(err, errlen, "fsmount tmpfs");
        return -1;
    }
    /* Filled while detached (no one else can see it yet), then read-only for good: the container gets a
     * finished tree and cannot change it, root inside included (remounting needs CAP_SYS_ADMIN there). */
    if (fg_procfs_write(mnt, devs, driver, err, errlen) != 0) {
        close(mnt);
        return -1;
    }
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY};
    if (syscall(SYS_mount_setattr, mnt, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
        oserr(err, errlen, "mount_setattr read-only");
        close(mnt);
        return -1;
    }
    *mountfd = mnt;
    return 0;
}

static int is_fs(int fd, long magic)
{
    struct statfs sf;
    return fstatfs(fd, &sf) == 0 && (long)sf.f_type == magic;
}

/* /proc and /proc/driver of the calling process's root, each opened without following a link and checked to
 * be procfs: a link, a bind mount or a file system of the image's own at either name is refused. */
static int open_proc_driver(int *procfd, char *err, size_t errlen)
{
    *procfd = -1;
    int root = open("/", DIR_FLAGS);
    if (root < 0) {
        oserr(err, errlen, "open /");
        return -1;
    }
    int proc = openat(root, "proc", DIR_FLAGS);
    close(root);
    if (proc < 0) {
        oserr(err, errlen, "open /proc");
        return -1;
    }
    if (!is_fs(proc, PROC_SUPER_MAGIC)) {
        snprintf(err, errlen, "/proc is not procfs");
        close(proc);
        return -1;
    }
    int drv = openat(proc, "driver", DIR_FLAGS);
    if (drv < 0) {
        oserr(err, errlen, "open /proc/driver");
        close(proc);
        return -1;
    }
    if (!is_fs(drv, PROC_SUPER_MAGIC)) {
        snprintf(err, errlen, "/proc/driver is not procfs (a mount or an image's own file system is there)");
        close(drv);
        close(proc);
        return -1;
    }
    *procfd = proc;
    return drv;
}

int fg_procfs_attach(int mountfd, char *err, size_t errlen)
{
    int proc;
    int drv = open_proc_driver(&proc, err, errlen);
    if (drv < 0)
        return -1;
    int rc = (int)syscall(SYS_move_mount, mountfd, "", drv, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
    if (rc != 0)
        oserr(err, errlen, "move_mount onto /proc/driver");
    close(drv);
    close(proc);
    return rc ? -1 : 0;
}

int fg_procfs_classic(const char *fd_dir, const fg_devset *devs, const char *driver, char *err, size_t errlen)
{
    int proc;
    int drv = open_proc_driver(&proc, err, errlen);
    if (drv < 0)
        return -1;
    /* mount(2) takes a path: the descriptor's magic link names exactly the folder checked above. */
    char target[256];
    snprintf(target, sizeof target, "%s/%d", fd_dir, drv);
    int rc = -1;
    if (mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, TMPFS_OPTIONS) != 0) {
        oserr(err, errlen, "mount tmpfs on /proc/driver");
        goto out;
    }
    /* Looked up again, the name now crosses into the new mount. */
    int top = openat(proc, "driver", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (top < 0) {
        oserr(err, errlen, "open the new /proc/driver");
    } else {
        snprintf(target, sizeof target, "%s/%d", fd_dir, top);
        const unsigned long ro = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
        if (!is_fs(top, TMPFS_MAGIC)) {
            snprintf(err, errlen, "/proc/driver is not the tmpfs just mounted");
        } else if (fg_procfs_write(top, devs, driver, err, errlen) == 0) {
            if (mount(NULL, target, NULL, ro, NULL) == 0)
                rc = 0;
            else
                oserr(err, errlen, "remount /proc/driver read-only");
        }
    }
    /* Nothing half-made stays behind; the tmpfs goes with its last reference. */
    if (rc != 0)
        umount2(top >= 0 ? target : "/proc/driver", MNT_DETACH);
    if (top >= 0)
        close(top);
out:
    close(drv);
    close(proc);
    return rc;
}

/* The child's part of fg_procfs_into_process: the only code that runs in the container's mount namespace, and
 * it only opens /proc/driver there and attaches the finished mount. Leaves the error in err, or "". */
static void attach_in(int nsfd, int rootfd, int hostproc, int mfd, const fg_devset *devs, const char *driver,
                      char *err, size_t errlen)
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
        rc = fchdir(hostproc) == 0 ? fg_procfs_classic("self/fd", devs, driver, inner, sizeof inner) : -1;
        if (rc != 0 && !inner[0])
            snprintf(inner, sizeof inner, "cannot enter the host's /proc: %s", strerror(errno));
    }
    if (rc != 0)
        snprintf(err, errlen, "%s", inner);
}

int fg_procfs_classic_forced(void)
{
    const char *v = getenv("FAKEGPU_PROCFS_CLASSIC");
    return v && !strcmp(v, "1");
}

int fg_procfs_into_process(pid_t pid, const fg_devset *devs, const char *driver, char *err, size_t errlen)
{
    char path[64];
    int nsfd = -1, rootfd = -1, hostproc = -1, mfd = -1, pipefd[2] = {-1, -1}, rc = -1;
    snprintf(path, sizeof path, "/proc/%d/ns/mnt", (int)pid);
    if ((nsfd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        snprintf(err, errlen, "process %d: %s", (int)pid, errno == ENOENT ? "no such process" : strerror(errno));
        goto out;
    }
    struct stat theirs, ours;
    if (fstat(nsfd, &theirs) != 0 || stat("/proc/self/ns/mnt", &ours) != 0) {
        snprintf(err, errlen, "process %d: cannot compare mount namespaces: %s", (int)pid, strerror(errno));
        goto out;
    }
    /* Never the host's own /proc/driver: a pid that shares our namespace is not a container's. */
    if (theirs.st_dev == ours.st_dev && theirs.st_ino == ours.st_ino) {
        snprintf(err, errlen, "process %d shares this mount namespace; refusing to mount over the host's "
                              "/proc/driver", (int)pid);
        goto out;
    }
    snprintf(path, sizeof path, "/proc/%d/root", (int)pid);
    if ((rootfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
        snprintf(err, errlen, "process %d: cannot open its root: %s", (int)pid, strerror(errno));
        goto out;
    }
    if ((hostproc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
        snprintf(err, errlen, "cannot open /proc: %s", strerror(errno));
        goto out;
    }
    /* Built here, in the host's namespace, before anything of the container is touched. */
    char inner[512] = "";
    int made = fg_procfs_classic_forced() ? FG_PROCFS_NO_API : fg_procfs_make(devs, driver, &mfd, inner, sizeof inner);
    if (made != 0 && made != FG_PROCFS_NO_API) {
        snprintf(err, errlen, "cannot build the tree: %s", inner);
        goto out;
    }
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        goto out;
    }
    pid_t child = fork();
    if (child < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        goto out;
    }
    if (child == 0) {
        close(pipefd[0]);
        char msg[600] = "";
        attach_in(nsfd, rootfd, hostproc, mfd, devs, driver, msg, sizeof msg);
        if (msg[0]) {
            ssize_t w = write(pipefd[1], msg, strlen(msg));
            (void)w;
            _exit(1);
        }
        _exit(0);
    }
    close(pipefd[1]);
    pipefd[1] = -1;
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
        if (errno != EINTR) {
            snprintf(err, errlen, "waitpid: %s", strerror(errno));
            goto out;
        }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        snprintf(err, errlen, "process %d: %s", (int)pid, got ? msg : "the attaching child failed");
    else
        rc = 0;
out:
    for (int *fd = (int[]){nsfd, rootfd, hostproc, mfd, pipefd[0], pipefd[1]}, k = 0; k < 6; k++)
        if (fd[k] >= 0)
            close(fd[k]);
    return rc;
}
