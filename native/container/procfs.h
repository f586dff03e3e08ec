/* The /proc/driver/nvidia tree NVIDIA's kernel module publishes (version, params, registry, gpus/<bus>/...),
 * rendered for FakeGPU's devices, and the read-only tmpfs that carries it onto a process's /proc/driver.
 * Tools that never load NVML read it: nvidia-container-cli, inventory and health-check scripts, anything that
 * takes the driver version from /proc/driver/nvidia/version.
 *
 * procfs cannot hold a new folder, and runc refuses OCI mounts under /proc, so the tree is a tmpfs mounted over
 * /proc/driver itself (what else the kernel keeps there, e.g. rtc, is hidden under it). The library part is
 * here, so the container runtime's C create can link it; fakegpu-procfs (procfs_main.c) is its command line. */
#ifndef FG_PROCFS_H
#define FG_PROCFS_H

#include <stddef.h>
#include <sys/types.h>

#include "fg_devices.h"

/* Write nvidia/ and everything under it into the folder dirfd names (a tmpfs root, or a plain folder for the
 * tests): folders end 0555, files 0444. 0, or -1 with err. */
int fg_procfs_write(int dirfd, const fg_devset *devs, const char *driver, char *err, size_t errlen);

/* The text of the tree's files, for fg_procfs_write and the tests; each returns the bytes written (the text
 * is cut, still terminated, when buf is too small). */
size_t fg_procfs_version_text(char *buf, size_t len, const char *driver);
size_t fg_procfs_information_text(char *buf, size_t len, const fg_device *d, const char *driver);
size_t fg_procfs_params_text(char *buf, size_t len);

/* A filled, read-only tmpfs as a detached mount (fsopen/fsmount): *mountfd to attach with fg_procfs_attach.
 * 0; -1 with err; FG_PROCFS_NO_API (err set) when the kernel lacks the new mount API, for fg_procfs_classic. */
#define FG_PROCFS_NO_API 1
int fg_procfs_make(const fg_devset *devs, const char *driver, int *mountfd, char *err, size_t errlen);

/* Attach a detached mount on /proc/driver of the calling process's mount namespace. /proc and then driver are
 * opened without following links and must both be procfs, so an image's symlink or a mount of its own there
 * can never redirect the mount elsewhere. 0, or -1 with err (nothing mounted). */
int fg_procfs_attach(int mountfd, char *err, size_t errlen);

/* The same in one step with mount(2), for kernels without fsopen: the same checks, the tmpfs filled through
 * the folder it covers and remounted read-only; undone (detached) on any failure. mount(2) takes paths, so
 * fd_dir names this process's descriptor folder from the current directory: "/proc/self/fd" in its own
 * namespaces; "self/fd" with the current directory in the host's /proc, where a container's /proc (another
 * pid namespace) has no entry for it. 0, or -1 with err. */
int fg_procfs_classic(const char *fd_dir, const fg_devset *devs, const char *driver, char *err, size_t errlen);

/* Whether FAKEGPU_PROCFS_CLASSIC=1 asks for the mount(2) path kernels without the new mount API take (tests). */
int fg_procfs_classic_forced(void);

/* The whole of mode 1: the tree built in this (the host's) namespace, then attached onto /proc/driver of the
 * mount namespace and root of process pid (a container's init waiting to be started) by a forked child, so no
 * step of ours but the attach runs inside the container's namespace. Refuses a pid that shares this mount
 * namespace. FAKEGPU_PROCFS_CLASSIC=1 takes the mount(2) path (tests). 0, or -1 with err (nothing mounted). */
int fg_procfs_into_process(pid_t pid, const fg_devset *devs, const char *driver, char *err, size_t errlen);

#endif
