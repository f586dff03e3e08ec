/* Paths inside a container root, resolved without ever leaving it: the C twin of hook/fakegpu_hook/rootfs.py
 * (Root with cache_dirs), used by the runtime's `create` fast path to make mount targets and links before runc
 * runs. A symlink is followed the way the container would see it (an absolute target restarts at the
 * container root, '..' stops there), never onto the host (CVE-2024-0132 class). Lookups of existing folders
 * go through openat2(RESOLVE_IN_ROOT) when the kernel has it; folders to create, and any lookup openat2
 * refuses, take the component-by-component O_NOFOLLOW walk, which also words the errors as rootfs.py does. */
#ifndef FG_ROOT_H
#define FG_ROOT_H

#include <stddef.h>

#define FG_ROOT_CACHE 32

typedef struct {
    int fd;
    char path[4096];
    int use_openat2; /* 1 while the kernel answers openat2 */
    struct {
        char *key;
        int fd;
    } cache[FG_ROOT_CACHE];
    int ncache;
} fg_root;

/* 0, or -1 with err set (the root folder cannot be opened). */
int fg_root_open(fg_root *r, const char *path, char *err, size_t errlen);
void fg_root_close(fg_root *r);

/* An O_PATH descriptor of the folder at `path` inside the root (caller closes), creating missing folders
 * (mode 0755) when `create`; -1 with err. *missing is set when it failed only because something is absent. */
int fg_root_open_dir(fg_root *r, const char *path, int create, int *missing, char *err, size_t errlen);

/* Whether anything (a link included, not followed) has this path inside the root. */
int fg_root_exists(fg_root *r, const char *path);

/* A regular file at path (created empty, 0644 less umask), an image's symlink there replaced. */
int fg_root_file_target(fg_root *r, const char *path, char *err, size_t errlen);

/* A symlink path -> target; whatever the image has there is replaced, but a folder, which is refused. */
int fg_root_symlink(fg_root *r, const char *path, const char *target, char *err, size_t errlen);

/* A folder at path for a mount (rootfs.py's dir_target): an image's symlink there is replaced by a folder,
 * never followed; anything else that is not a folder is refused. 0, or -1 with err. */
int fg_root_dir_target(fg_root *r, const char *path, char *err, size_t errlen);

#endif
