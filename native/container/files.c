#include "files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *read_file(const char *path, size_t *len, int *missing)
{
    *missing = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *missing = errno == ENOENT;
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (16 << 20)) {
        close(fd);
        return NULL;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (!buf || got != (size_t)st.st_size) {
        free(buf);
        return NULL;
    }
    buf[got] = '\0';
    *len = got;
    return buf;
}

/* write_atomic of fakegpu/atomic_file.py: a temporary beside the target (O_EXCL|O_NOFOLLOW), then rename. */
int write_atomic(const char *path, const char *data, size_t len, int mode, char *err, size_t errlen)
{
    if (mode < 0) {
        struct stat st;
        mode = stat(path, &st) == 0 ? (int)(st.st_mode & 07777) : 0644;
    }
    char tmp[PATH_MAX];
    const char *slash = strrchr(path, '/');
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        if (slash)
            snprintf(tmp, sizeof tmp, "%.*s/.%s.%d.%d.tmp", (int)(slash - path), path, slash + 1, (int)getpid(),
                     attempt);
        else
            snprintf(tmp, sizeof tmp, ".%s.%d.%d.tmp", path, (int)getpid(), attempt);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 && errno != EEXIST) {
            snprintf(err, errlen, "[Errno %d] %s: '%.300s'", errno, strerror(errno), tmp);
            return -1;
        }
    }
    if (fd < 0) {
        snprintf(err, errlen, "cannot make a temporary file beside %s", path);
        return -1;
    }
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, data + done, len - done);
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    int e = errno;
    /* fsync before the rename, as atomic_file.py: a crash leaves the old file or the new one, never a torn one. */
    if (done != len || fsync(fd) != 0 || fchmod(fd, (mode_t)mode) != 0 || close(fd) != 0 || rename(tmp, path) != 0) {
        e = errno ? errno : e;
        unlink(tmp);
        snprintf(err, errlen, "[Errno %d] %s: '%.300s'", e, strerror(e), tmp);
        return -1;
    }
    return 0;
}

/* shutil.rmtree(ignore_errors=True) of a folder we made, without following links out of it. */
static void remove_tree_at(int parent, const char *name)
{
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        unlinkat(parent, name, 0);
        return;
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            remove_tree_at(dirfd(d), e->d_name);
    closedir(d);
    unlinkat(parent, name, AT_REMOVEDIR);
}

void remove_tree(const char *path) { remove_tree_at(AT_FDCWD, path); }

int makedirs(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
        return -1;
    struct stat st;
    return stat(tmp, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

/* runtime.py's exec_low_level lookup: a path as given, else the first executable file on PATH. */
char *which(const char *name)
{
    struct stat st;
    if (strchr(name, '/')) /* a path: it must be there, runnable, before anything changes */
        return stat(name, &st) == 0 && S_ISREG(st.st_mode) && access(name, X_OK) == 0 ? strdup(name) : NULL;
    const char *path = getenv("PATH");
    if (!path)
        path = "/bin:/usr/bin"; /* os.defpath */
    char *copy = strdup(path);
    char *save = NULL;
    for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        char cand[PATH_MAX];
        snprintf(cand, sizeof cand, "%s/%s", d, name);
        if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0) {
            free(copy);
            return strdup(cand);
        }
    }
    free(copy);
    return NULL;
}
