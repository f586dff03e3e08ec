#include "fg_root.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_LINKS 40 /* the kernel's own limit on symlinks followed in one lookup; rootfs.py uses it too */
#define MAX_STACK 512
#define DIR_FLAGS (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

/* "[Errno 2] No such file or directory: 'name'": worded as Python's OSError, so both runtimes say the same. */
static void oserr(char *err, size_t errlen, int e, const char *name)
{
    snprintf(err, errlen, "[Errno %d] %s: '%s'", e, strerror(e), name);
}

int fg_root_open(fg_root *r, const char *path, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->use_openat2 = 1;
    snprintf(r->path, sizeof r->path, "%s", path);
    r->fd = open(path, DIR_FLAGS);
    if (r->fd < 0) {
        oserr(err, errlen, errno, path);
        return -1;
    }
    return 0;
}

void fg_root_close(fg_root *r)
{
    for (int i = 0; i < r->ncache; i++) {
        free(r->cache[i].key);
        close(r->cache[i].fd);
    }
    r->ncache = 0;
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
}

/* path.strip('/') into buf */
static void strip_slashes(const char *path, char *buf, size_t len)
{
    while (*path == '/')
        path++;
    snprintf(buf, len, "%s", path);
    size_t n = strlen(buf);
    while (n && buf[n - 1] == '/')
        buf[--n] = '\0';
}

/* The component walk of rootfs.py's Root._walk. `joined` is the path as given, for messages. */
static int walk(fg_root *r, const char *joined, int create, int *missing, char *err, size_t errlen)
{
    int stack[MAX_STACK];
    int depth = 0, links = 0, made = 0, result = -1;
    /* Components still to visit, as one '/'-separated string; a link's target is put in front of it. */
    size_t cap = strlen(joined) + 2;
    char *pending = malloc(cap);
    if (!pending) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(pending, cap, "%s", joined);
    size_t at = 0;
    stack[depth++] = dup(r->fd);
    if (stack[0] < 0) {
        oserr(err, errlen, errno, r->path);
        free(pending);
        return -1;
    }
    for (;;) {
        while (pending[at] == '/')
            at++;
        if (!pending[at])
            break;
        size_t n = strcspn(pending + at, "/");
        char name[256];
        if (n >= sizeof name) {
            oserr(err, errlen, ENAMETOOLONG, pending + at);
            goto out;
        }
        memcpy(name, pending + at, n);
        name[n] = '\0';
        at += n;
        if (!strcmp(name, "."))
            continue;
        if (!strcmp(name, "..")) {
            if (depth > 1)
                close(stack[--depth]);
            continue;
        }
        int here = stack[depth - 1];
        int fd = openat(here, name, DIR_FLAGS);
        if (fd >= 0) {
            if (depth == MAX_STACK) {
                close(fd);
                snprintf(err, errlen, "%s in the container root is nested too deeply", joined);
                goto out;
            }
            stack[depth++] = fd;
            continue;
        }
        int e = errno;
        if (e == ENOENT) {
            if (!create) {
                if (missing)
                    *missing = 1;
                oserr(err, errlen, ENOENT, name);
                goto out;
            }
            if (++made > MAX_STACK) { /* folders removed as fast as they are made: someone is racing us */
                snprintf(err, errlen, "%s in the container root keeps changing", joined);
                goto out;
            }
            if (mkdirat(here, name, 0755) != 0 && errno != EEXIST) {
                oserr(err, errlen, errno, name);
                goto out;
            }
            at -= n; /* look at the name again: now a folder (or whatever won a race, examined as usual) */
            continue;
        }
        if (e != ENOTDIR && e != ELOOP) {
            oserr(err, errlen, e, name);
            goto out;
        }
        struct stat st;
        if (fstatat(here, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            oserr(err, errlen, errno, name);
            goto out;
        }
        if (!S_ISLNK(st.st_mode)) {
            if (missing)
                *missing = 1; /* rootfs.py's exists() treats this as absent, as it does a missing name */
            snprintf(err, errlen, "%s in the container root is not a directory", joined);
            goto out;
        }
        if (++links > MAX_LINKS) {
            snprintf(err, errlen, "too many symlinks under %s resolving %s", r->path, joined);
            goto out;
        }
        char target[4096];
        ssize_t tl = readlinkat(here, name, target, sizeof target - 1);
        if (tl < 0) {
            oserr(err, errlen, errno, name);
            goto out;
        }
        target[tl] = '\0';
        if (target[0] == '/')
            while (depth > 1)
                close(stack[--depth]);
        size_t rest = strlen(pending + at);
        char *next = malloc((size_t)tl + 1 + rest + 1);
        if (!next) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }
        memcpy(next, target, (size_t)tl);
        next[tl] = '/';
        memcpy(next + tl + 1, pending + at, rest + 1);
        free(pending);
        pending = next;
        at = 0;
    }
    result = dup(stack[depth - 1]);
    if (result < 0)
        oserr(err, errlen, errno, joined);
out:
    while (depth)
        close(stack[--depth]);
    free(pending);
    return result;
}

/* Whether the folder openat2 found lies MAX_STACK or more levels below the root: the walk (and rootfs.py) keep
 * one descriptor per level and refuse such paths, so a resolution must not succeed here where they fail. */
static int too_deep(const fg_root *r, int fd)
{
    char proc[32], root[4096], found[4096];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", r->fd);
    ssize_t rn = readlink(proc, root, sizeof root - 1);
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    ssize_t fn = readlink(proc, found, sizeof found - 1);
    if (rn < 0 || fn < 0 || fn == (ssize_t)sizeof found - 1)
        return 1; /* unknown or longer than a path: let the walk decide */
    int levels = 0;
    for (ssize_t i = rn; i < fn; i++)
        levels += found[i] == '/';
    return levels >= MAX_STACK;
}

static int try_openat2(fg_root *r, const char *joined)
{
    if (!r->use_openat2)
        return -1;
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(SYS_openat2, r->fd, *joined ? joined : ".", &how, sizeof how);
    if (fd < 0 && (errno == ENOSYS || errno == EPERM)) /* an old kernel, or a seccomp filter that refuses it */
        r->use_openat2 = 0;
    if (fd >= 0 && too_deep(r, fd)) {
        close(fd);
        return -1; /* the walk refuses it, worded as rootfs.py does */
    }
    return fd;
}

int fg_root_open_dir(fg_root *r, const char *path, int create, int *missing, char *err, size_t errlen)
{
    char joined[4096];
    strip_slashes(path, joined, sizeof joined);
    char key[4097];
    snprintf(key, sizeof key, "/%s", joined);
    for (int i = 0; i < r->ncache; i++)
        if (!strcmp(r->cache[i].key, key))
            return dup(r->cache[i].fd);
    if (missing)
        *missing = 0;
    /* openat2 resolves an existing folder in one call, in the root's own terms; whatever it refuses (a missing
     * folder to create, a file in the way, a loop) is redone by the walk, which is the reference. */
    int fd = try_openat2(r, joined);
    if (fd < 0)
        fd = walk(r, joined, create, missing, err, errlen);
    if (fd < 0)
        return -1;
    if (r->ncache < FG_ROOT_CACHE) {
        char *k = strdup(key);
        int cached = k ? dup(fd) : -1;
        if (cached >= 0) {
            r->cache[r->ncache].key = k;
            r->cache[r->ncache].fd = cached;
            r->ncache++;
        } else {
            free(k);
        }
    }
    return fd;
}

/* os.path.split: head without trailing slashes (unless all slashes), tail after the last slash. */
static void split(const char *path, char *head, size_t hlen, const char **tail)
{
    const char *slash = strrchr(path, '/');
    *tail = slash ? slash + 1 : path;
    size_t n = slash ? (size_t)(slash - path + 1) : 0;
    size_t keep = n;
    while (keep > 1 && path[keep - 1] == '/')
        keep--;
    int all_slashes = 1;
    for (size_t i = 0; i < n; i++)
        all_slashes &= path[i] == '/';
    if (all_slashes)
        keep = n;
    snprintf(head, hlen, "%.*s", (int)keep, path);
}

int fg_root_exists(fg_root *r, const char *path)
{
    char trimmed[4096], head[4096], err[512];
    snprintf(trimmed, sizeof trimmed, "%s", path);
    size_t n = strlen(trimmed);
    while (n && trimmed[n - 1] == '/')
        trimmed[--n] = '\0';
    const char *name;
    split(trimmed, head, sizeof head, &name);
    int fd = fg_root_open_dir(r, head, 0, NULL, err, sizeof err);
    if (fd < 0)
        return 0;
    struct stat st;
    int found = fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
    close(fd);
    return found;
}

/* An image's symlink at a target name is its own, not a path to follow: remove it. 1: nothing there (now),
 * 0: something real there (st filled), -1: error. */
static int clear_link(int dirfd, const char *name, struct stat *st, char *err, size_t errlen)
{
    if (fstatat(dirfd, name, st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT)
            return 1;
        oserr(err, errlen, errno, name);
        return -1;
    }
    if (S_ISLNK(st->st_mode)) {
        if (unlinkat(dirfd, name, 0) != 0) {
            oserr(err, errlen, errno, name);
            return -1;
        }
        return 1;
    }
    return 0;
}

int fg_root_file_target(fg_root *r, const char *path, char *err, size_t errlen)
{
    char head[4096];
    const char *name;
    split(path, head, sizeof head, &name);
    int dirfd = fg_root_open_dir(r, head, 1, NULL, err, errlen);
    if (dirfd < 0)
        return -1;
    const int flags = O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC;
    int rc = -1;
    int fd = openat(dirfd, name, flags, 0644);
    if (fd < 0 && errno == EEXIST) {
        struct stat st;
        int c = clear_link(dirfd, name, &st, err, errlen);
        if (c < 0)
            goto out;
        if (c == 0) {
            if (!S_ISREG(st.st_mode)) {
                snprintf(err, errlen, "%s in the container is not a regular file", path);
                goto out;
            }
            rc = 0;
            goto out;
        }
        fd = openat(dirfd, name, flags, 0644);
    }
    if (fd < 0) {
        oserr(err, errlen, errno, name);
        goto out;
    }
    close(fd);
    rc = 0;
out:
    close(dirfd);
    return rc;
}

int fg_root_symlink(fg_root *r, const char *path, const char *target, char *err, size_t errlen)
{
    char head[4096];
    const char *name;
    split(path, head, sizeof head, &name);
    int dirfd = fg_root_open_dir(r, head, 1, NULL, err, errlen);
    if (dirfd < 0)
        return -1;
    int rc = -1;
    if (symlinkat(target, dirfd, name) == 0) {
        rc = 0;
        goto out;
    }
    if (errno != EEXIST) {
        oserr(err, errlen, errno, name);
        goto out;
    }
    struct stat st;
    int c = clear_link(dirfd, name, &st, err, errlen);
    if (c < 0)
        goto out;
    if (c == 0) {
        /* The image's own file under a library name we serve (a real driver library's copy, useless without
         * the driver, or a FIFO a loader would block on): ours replaces it. A folder is not replaced silently. */
        if (S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "%s in the container is a directory where FakeGPU links a library", path);
            goto out;
        }
        if (unlinkat(dirfd, name, 0) != 0) {
            oserr(err, errlen, errno, name);
            goto out;
        }
    }
    if (symlinkat(target, dirfd, name) != 0) {
        oserr(err, errlen, errno, name);
        goto out;
    }
    rc = 0;
out:
    close(dirfd);
    return rc;
}

int fg_root_dir_target(fg_root *r, const char *path, char *err, size_t errlen)
{
    char trimmed[4096], head[4096], key[4097];
    snprintf(trimmed, sizeof trimmed, "%s", path);
    size_t n = strlen(trimmed);
    while (n > 1 && trimmed[n - 1] == '/')
        trimmed[--n] = '\0';
    const char *name;
    split(trimmed, head, sizeof head, &name);
    int dirfd = fg_root_open_dir(r, head, 1, NULL, err, errlen);
    if (dirfd < 0)
        return -1;
    int rc = -1;
    struct stat st;
    int c = clear_link(dirfd, name, &st, err, errlen);
    if (c < 0)
        goto out;
    if (c == 1) {
        /* The link (if there was one) is gone: a descriptor cached under this path named its target. */
        strip_slashes(trimmed, key + 1, sizeof key - 1);
        key[0] = '/';
        for (int i = 0; i < r->ncache; i++)
            if (!strcmp(r->cache[i].key, key)) {
                free(r->cache[i].key);
                close(r->cache[i].fd);
                r->cache[i] = r->cache[--r->ncache];
                break;
            }
        if (mkdirat(dirfd, name, 0755) != 0 && errno != EEXIST) {
            oserr(err, errlen, errno, name);
            goto out;
        }
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            oserr(err, errlen, errno, name);
            goto out;
        }
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s in the container is not a directory", path);
        goto out;
    }
    rc = 0;
out:
    close(dirfd);
    return rc;
}
