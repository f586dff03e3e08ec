/* Host file operations of fakegpu-create, each as its Python counterpart behaves. */
#ifndef FG_FILES_H
#define FG_FILES_H

#include <stddef.h>

/* A regular file's whole content (NUL-terminated; 16 MiB at most); NULL on failure, *missing when ENOENT. */
char *read_file(const char *path, size_t *len, int *missing);
/* fakegpu/atomic_file.py's write_atomic; mode < 0 keeps the existing file's mode (0644 for a new one). */
int write_atomic(const char *path, const char *data, size_t len, int mode, char *err, size_t errlen);
/* shutil.rmtree(ignore_errors=True), never following a link out of the tree. */
void remove_tree(const char *path);
/* os.makedirs(exist_ok=True): 0, or -1 with errno. */
int makedirs(const char *path);
/* runtime.py's lookup of the low-level runtime: a path as given, else the first executable on PATH (malloc'd). */
char *which(const char *name);

#endif
