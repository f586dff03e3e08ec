#include "statedir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "files.h"

#define REQUIRED (ST_NOSUID | ST_NODEV | ST_NOEXEC)

static int safe(const char *path)
{
    struct statvfs v;
    return statvfs(path, &v) == 0 && (v.f_flag & REQUIRED) == REQUIRED;
}

/* os.path.ismount: a different device than the parent's, or the same inode as the parent's (the root). */
static int mount_point(const char *path)
{
    char parent[4096];
    struct stat a, b;
    if (snprintf(parent, sizeof parent, "%s/..", path) >= (int)sizeof parent || lstat(path, &a) || lstat(parent, &b))
        return 0;
    return a.st_dev != b.st_dev || a.st_ino == b.st_ino;
}

static void advice(char *out, size_t len, const char *path)
{
    snprintf(out, len, "mount one there yourself (mount -t tmpfs -o nosuid,nodev,noexec,mode=0700 tmpfs %s) or set "
             "state_root to a folder on such a filesystem", path);
}

static int mount_tmpfs(const char *path, char *err, size_t errlen)
{
    char parent[4096], how[4600];
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    if (slash == parent)
        parent[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        snprintf(parent, sizeof parent, ".");
    /* The same lock as statedir.py's: a second create must not stack a tmpfs over the first one's. */
    int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) {
        snprintf(err, errlen, "[Errno %d] %s: '%s'", errno, strerror(errno), parent);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    int rc = -1;
    advice(how, sizeof how, path);
    if (safe(path)) {
        rc = 0;
    } else if (mount_point(path)) {
        snprintf(err, errlen, "state root %s is a mount without nosuid,nodev,noexec: whatever a container writes "
                 "there could be run or opened as a device on the host; %s", path, how);
    } else if (mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700") != 0) {
        snprintf(err, errlen, "state root %s is not on a nosuid,nodev,noexec filesystem and mounting a tmpfs there "
                 "failed (%s); %s", path, strerror(errno), how);
    } else if (!safe(path)) {
        snprintf(err, errlen, "state root %s: the tmpfs mounted there lacks nosuid,nodev,noexec", path);
    } else {
        rc = 0;
    }
    close(fd); /* releases the lock */
    return rc;
}

int fg_secure_state_root(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (makedirs(path) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "[Errno %d] %s: '%s'", errno, strerror(errno), path);
        return -1;
    }
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "state root %s is not a folder", path);
        return -1;
    }
    if (!safe(path) && mount_tmpfs(path, err, errlen) != 0)
        return -1;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "[Errno %d] %s: '%s'", errno, strerror(errno), path);
        return -1;
    }
    if (st.st_uid != geteuid()) {
        snprintf(err, errlen, "state root %s belongs to uid %u, not to the runtime's user", path, (unsigned)st.st_uid);
        return -1;
    }
    if ((st.st_mode & 077) && chmod(path, 0700) != 0) {
        snprintf(err, errlen, "[Errno %d] %s: '%s'", errno, strerror(errno), path);
        return -1;
    }
    return 0;
}

int fg_make_container_dir(const char *state_root, const char *host_dir, char *err, size_t errlen)
{
    char shared[4096];
    if (fg_secure_state_root(state_root, err, errlen) != 0)
        return -1;
    if (snprintf(shared, sizeof shared, "%s/state", host_dir) >= (int)sizeof shared) {
        snprintf(err, errlen, "%s: a path too long", host_dir);
        return -1;
    }
    if (mkdir(host_dir, 0700) != 0 && errno != EEXIST)
        goto fail;
    if (chmod(host_dir, 0700) != 0)
        goto fail;
    if (mkdir(shared, 0755) != 0 && errno != EEXIST)
        goto fail;
    if (chmod(shared, 01777) != 0) /* processes of any user in the container record their state here */
        goto fail;
    return 0;
fail:
    snprintf(err, errlen, "[Errno %d] %s: '%s'", errno, strerror(errno), host_dir);
    return -1;
}
