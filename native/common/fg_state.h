/* Per-container shared state: which processes use which fake GPU and how much memory.
 *
 * One file per process, <pid>.proc, in $FAKEGPU_STATE_DIR, else /run/fakegpu when it exists, else
 * $TMPDIR/fakegpu-<uid>; its layout is fakegpu/shared_state.py's (the offsets arrive in fg_contract.h). The
 * writer maps its file and stores its usage there on every allocation and free; a reader maps the files and
 * loads the counters on every query, so usage is exact and immediate with nothing rewritten or flushed.
 * Readers delete the files of pids that no longer exist, so a killed process disappears as on a real host.
 * The CUDA shims and fakecuda write; NVML and nvidia-smi read. */
#ifndef FG_STATE_H
#define FG_STATE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "fg_contract.h" /* generated from fakegpu/shared_state.py */
#include "fg_devices.h"
#include "fg_log.h"

#define FG_STATE_MAX_PROCS 256

/* One process's file, as mapped. */
typedef struct {
    char magic[8];
    uint32_t pid;
    char type; /* 'C' or 'G' */
    char pad_[3];
    char name[FG_STATE_NAME_LEN];
    _Atomic uint64_t used[FG_MAX_DEVICES]; /* bytes per device; 0: the device is not this process's */
    _Atomic uint64_t busy[FG_MAX_DEVICES][FG_STATE_BUSY_SLOTS]; /* slot k busy: busy[dev][k % SLOTS] == k */
} fg_state_file;

_Static_assert(offsetof(fg_state_file, pid) == FG_STATE_OFF_PID, "pid offset differs from shared_state.py");
_Static_assert(offsetof(fg_state_file, type) == FG_STATE_OFF_TYPE, "type offset differs from shared_state.py");
_Static_assert(offsetof(fg_state_file, name) == FG_STATE_OFF_NAME, "name offset differs from shared_state.py");
_Static_assert(offsetof(fg_state_file, used) == FG_STATE_OFF_USED, "used offset differs from shared_state.py");
_Static_assert(FG_STATE_BUSY_SLOTS <= 64, "the reader keeps one bit per slot");
_Static_assert(offsetof(fg_state_file, busy) == FG_STATE_OFF_BUSY, "busy offset differs from shared_state.py");
_Static_assert(sizeof(fg_state_file) == FG_STATE_SIZE, "size differs from shared_state.py");

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

/* Writer: create this process's file, complete (a temp file renamed into place), mapped; NULL on failure. */
FG_HIDDEN fg_state_file *fg_state_create(const char *dir, unsigned pid, const char *name, char type);
/* Writer: unmap the file, and remove it when `remove` (a forked child unmaps its parent's without removing). */
FG_HIDDEN void fg_state_close(fg_state_file *f, const char *dir, int remove);

/* Writer: the device (a board index) is busy now: a kernel or a copy of this process. */
FG_HIDDEN void fg_state_mark_busy(fg_state_file *f, unsigned device);

/* Reader: the files' mappings, rescanned when the folder changed (its mtime) or every `ttl_ns` (to reap pids
 * that died without removing their file); the counters are loaded at every read. */
typedef struct {
    char dir[512];
    struct timespec dir_mtime;
    long long scanned_ns; /* CLOCK_MONOTONIC of the last scan; 0: never */
    unsigned n;
    const fg_state_file *files[FG_STATE_MAX_PROCS];
} fg_state_reader;

FG_HIDDEN void fg_state_reader_open(fg_state_reader *r, const char *dir);
/* Every live process's nonzero entries, pid then device order. Never fails: an absent or unreadable folder is
 * an empty state. */
FG_HIDDEN void fg_state_reader_read(fg_state_reader *r, long long ttl_ns, fg_snapshot *out);
/* How many of the last FG_STATE_BUSY_SLOTS slots (the current one included) some process kept the device busy
 * in, from the files the last read mapped. */
FG_HIDDEN unsigned fg_state_reader_busy_slots(const fg_state_reader *r, unsigned device);
/* The next read scans the folder again. */
FG_HIDDEN void fg_state_reader_invalidate(fg_state_reader *r);
FG_HIDDEN void fg_state_reader_close(fg_state_reader *r);

#endif
