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
    _Atomic uint64_t busy[FG_MAX_DEVICES][FG_STATE_BUSY_SLOTS]; /* slot k's word at [dev][k % SLOTS]: see below */
    _Atomic uint8_t instance[FG_MAX_DEVICES]; /* the MIG GPU instance ID + 1 the memory is in; 0: whole board */
} fg_state_file;

_Static_assert(offsetof(fg_state_file, pid) == FG_STATE_OFF_PID, "pid offset differs from shared_state.py");
_Static_assert(offsetof(fg_state_file, type) == FG_STATE_OFF_TYPE, "type offset differs from shared_state.py");
_Static_assert(offsetof(fg_state_file, name) == FG_STATE_OFF_NAME, "name offset differs from shared_state.py");
_Static_assert(offsetof(fg_state_file, used) == FG_STATE_OFF_USED, "used offset differs from shared_state.py");
_Static_assert(FG_STATE_SLOT_US < (1 << FG_STATE_US_BITS), "a slot's microseconds fit their field");
_Static_assert(offsetof(fg_state_file, busy) == FG_STATE_OFF_BUSY, "busy offset differs from shared_state.py");
_Static_assert(offsetof(fg_state_file, instance) == FG_STATE_OFF_INSTANCE, "instance offset differs");
_Static_assert(sizeof(fg_state_file) == FG_STATE_SIZE, "size differs from shared_state.py");

typedef struct {
    unsigned pid;
    unsigned device;
    unsigned long long used_bytes;
    unsigned instance; /* its MIG GPU instance ID + 1 on that device; 0: the whole board */
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

/* Busy time (fakegpu/shared_state.py has the whole story): slot k of a device's ring is the word at
 * busy[device][k % FG_STATE_BUSY_SLOTS], packing k's low FG_STATE_SLOT_BITS bits with the microseconds of compute
 * work (bits 14-27) and of memory work (bits 0-13) this process did in it. */
FG_HIDDEN long long fg_monotonic_ns(void);
static inline uint64_t fg_state_slot_of(long long ns) { return (uint64_t)(ns / FG_STATE_SLOT_NS); }

/* A writer's memory of one device's work (the process's own, never shared). All zeros is a valid start. */
#define FG_BUSY_AHEAD_SLOTS ((int)(FG_STATE_BUSY_AHEAD_NS / FG_STATE_SLOT_NS) + 2)
typedef struct {
    long long end;      /* when the work reported so far ends (modeled: may be ahead of the clock) */
    int kind;           /* the last work's kind (FG_WORK_COMPUTE or FG_WORK_MEMORY) */
    long long carry[2]; /* nanoseconds short of a whole microsecond, per kind */
    struct {
        uint64_t k;
        uint32_t us[2];
    } ahead[FG_BUSY_AHEAD_SLOTS]; /* microseconds written into slots that were still to come, per kind */
    long long seen_at, seen_wait; /* when the writing thread's run-queue wait was last read, and what it was */
    int seen_tid;
} fg_busy_track;

/* Writer: work of `kind` was handed to the device (a board index) at t0 and kept the caller until t1 (a launch:
 * t1 == t0; a copy done here with memmove: its span), and needs `dur` ns of the device (at least t1 - t0). It
 * queues behind the work before it, at most FG_STATE_BUSY_AHEAD_NS ahead of t1; the gap since the device's
 * previous work counts as busy when it is under FG_STATE_BUSY_GAP_NS, or when the thread spent most of it waiting
 * for a CPU (fakegpu/shared_state.py). */
FG_HIDDEN void fg_state_work(fg_state_file *f, fg_busy_track *t, unsigned device, int kind, long long t0,
                             long long t1, long long dur);
/* Writer: the program waited for the device at `now` (a synchronisation): queued time after now is taken back. */
FG_HIDDEN void fg_state_synced(fg_state_file *f, fg_busy_track *t, unsigned device, long long now);

/* Reader: the files' mappings, rescanned when the folder changed (its mtime) or every `ttl_ns` (to reap pids
 * that died without removing their file); the counters are loaded at every read. */
typedef struct {
    char dir[512];
    struct timespec dir_mtime;
    long long scanned_ns; /* CLOCK_MONOTONIC of the last scan; 0: never */
    unsigned n;
    const fg_state_file *files[FG_STATE_MAX_PROCS];
    unsigned skip_pid; /* a file this reader never maps (its own process's, which it knows); 0: none */
} fg_state_reader;

FG_HIDDEN void fg_state_reader_open(fg_state_reader *r, const char *dir);
/* Every live process's nonzero entries, pid then device order. Never fails: an absent or unreadable folder is
 * an empty state. */
FG_HIDDEN void fg_state_reader_read(fg_state_reader *r, long long ttl_ns, fg_snapshot *out);
/* The busy microseconds of slots first .. first + n - 1 on the device, summed over the processes the last read
 * mapped (each at most FG_STATE_SLOT_US; slots outside the ring read as idle). */
FG_HIDDEN void fg_state_reader_busy(const fg_state_reader *r, unsigned device, uint64_t first, unsigned n,
                                    uint32_t *compute_us, uint32_t *memory_us);
/* The bytes every live process but `except_pid` holds on the device (a board index), with `instance` >= 0 only
 * those whose memory is in that MIG instance (its GPU instance ID + 1; 0: the whole board): the same mappings and
 * rescan rules as fg_state_reader_read, without copying the entries. With `refresh` 0 the folder is not looked at
 * (no system call): the processes the last refresh mapped, their counters as they are now. */
FG_HIDDEN unsigned long long fg_state_reader_used(fg_state_reader *r, long long ttl_ns, unsigned device, int instance,
                                                  unsigned except_pid, int refresh);
/* The next read scans the folder again. */
FG_HIDDEN void fg_state_reader_invalidate(fg_state_reader *r);
FG_HIDDEN void fg_state_reader_close(fg_state_reader *r);

#endif
