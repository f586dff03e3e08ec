/* Per-container shared state: which processes use which fake GPU and how much memory.
 *
 * A folder ($FAKEGPU_STATE_DIR, else /run/fakegpu when it exists, else $TMPDIR/fakegpu-<uid>) holds one file
 * per process, <pid>.proc, replaced atomically (temp file + rename) whenever the process's usage changes:
 *
 *     # comment
 *     proc<TAB>pid=1234<TAB>device=0<TAB>used_bytes=1073741824<TAB>type=C<TAB>name=python3
 *
 * one line per device the process uses. type is C (compute) or G (graphics); name is what nvidia-smi shows
 * and holds no tab or newline. Readers skip files of pids that no longer exist and delete them, so a crashed
 * process leaves nothing behind for long. The CUDA shims and fakecuda write; NVML and nvidia-smi read. */
#ifndef FG_STATE_H
#define FG_STATE_H

#include <stddef.h>

#include "fg_log.h"

#define FG_STATE_MAX_PROCS 256
#define FG_STATE_NAME_LEN 64

typedef struct {
    unsigned pid;
    unsigned device;
    unsigned long long used_bytes;
    char type; /* 'C' or 'G' */
    char name[FG_STATE_NAME_LEN];
} fg_proc;

typedef struct {
    unsigned n;
    fg_proc procs[FG_STATE_MAX_PROCS];
} fg_snapshot;

/* The state folder this process uses. */
FG_HIDDEN const char *fg_state_dir(char *buf, size_t len);

/* Read every live process's entries (pid order); dead pids' files are removed. Never fails: an absent or
 * unreadable folder is an empty state. */
FG_HIDDEN void fg_state_read(const char *dir, fg_snapshot *out);

/* Publish this process's usage: entries with used_bytes 0 are left out; no entries removes the file. */
FG_HIDDEN int fg_state_publish(const char *dir, unsigned pid, const char *name, char type,
                               const unsigned long long *used_by_device, unsigned ndevices);

#endif
