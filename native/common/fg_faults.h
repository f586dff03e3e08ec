/* The run's fault board (fakegpu/faults/board.py): faults with the wall-clock time they take effect, which the
 * launcher and `fakegpu fault inject` write and every reader judges alone against its clock. Mapped read-only
 * at the first look; a run without a board is looked for again every 100 ms, so a board created later (the
 * first `fault inject` of a run without a plan) is seen. The folder is given once, at the library's init, so
 * no query calls getenv. */
#ifndef FG_FAULTS_H
#define FG_FAULTS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fg_contract.h" /* generated from fakegpu/faults/board.py */
#include "fg_log.h"

typedef struct {
    uint64_t fire_ns; /* CLOCK_REALTIME */
    uint32_t kind, device, code, flags;
    uint64_t data;
} fg_fault_record;

typedef struct {
    char magic[8];
    _Atomic uint32_t count;
    uint32_t zero_;
    fg_fault_record rec[FG_FAULT_MAX_RECORDS];
} fg_fault_board;

_Static_assert(sizeof(fg_fault_record) == FG_FAULT_RECORD_SIZE, "record size differs from board.py");
_Static_assert(offsetof(fg_fault_board, count) == FG_FAULT_OFF_COUNT, "count offset differs from board.py");
_Static_assert(offsetof(fg_fault_board, rec) == FG_FAULT_OFF_RECORDS, "records offset differs from board.py");
_Static_assert(sizeof(fg_fault_board) == FG_FAULT_SIZE, "board size differs from board.py");

/* Where the board is: the run's state folder (fg_state_dir). Before the first fg_faults(); later calls are
 * ignored. */
FG_HIDDEN void fg_faults_init(const char *state_dir);
/* The board of this process's run, or NULL while it has none. */
FG_HIDDEN const fg_fault_board *fg_faults(void);
/* How many records are published (0 without a board); record i < this is complete. */
FG_HIDDEN unsigned fg_fault_count(const fg_fault_board *b);
FG_HIDDEN uint64_t fg_fault_now_ns(void);
/* This process allocated device memory on the board (its table index): faults waiting for this process's
 * count of allocations there fire when it reaches theirs. */
FG_HIDDEN void fg_fault_allocated(unsigned device);
/* How many of each memory Xid have fired on the device: what its ECC counters, retired pages and remapped rows
 * follow (native/nvml/memory.c). */
typedef struct {
    unsigned long long corrected; /* single-bit errors ECC corrected (FG_FAULT_KIND_CORRECTED_ECC records) */
    unsigned dbe;          /* Xid 48: double-bit ECC error */
    unsigned contained;    /* Xid 94 */
    unsigned uncontained;  /* Xid 95 */
    unsigned recorded;     /* Xid 63: a page retirement or row remapping was recorded */
    unsigned record_fails; /* Xid 64: recording it failed */
} fg_fault_ecc;
FG_HIDDEN void fg_fault_ecc_of(unsigned device, fg_fault_ecc *out);
/* The device's throttling by now (throttle records fired and not over): the clock-event reason bits they set and
 * the lowest SM clock they hold it to (0: none) given its boost clock; and per policy the time its clocks have
 * been held back in all (every fired record's, over or not; ns): power (power cap, power brake), thermal, sync
 * boost. */
typedef struct {
    unsigned long long reasons;
    unsigned mhz;
    uint64_t power_ns, thermal_ns, sync_ns;
} fg_fault_throttling;
FG_HIDDEN void fg_fault_throttle_of(unsigned device, unsigned boost_mhz, fg_fault_throttling *out);
/* Bytes held on the device (its table index) outside the run by now: fired memory-pressure records. */
FG_HIDDEN unsigned long long fg_fault_pressure(unsigned device);
/* This process, global rank `rank`, starts an NCCL operation (a collective, a send or a receive): NCCL faults
 * waiting for this process's Nth one fire, and the answer is what the operation meets now: FG_FAULT_NCCL_HANG or
 * FG_FAULT_NCCL_REMOTE_ERROR (the earliest fired NCCL fault of the rank not over yet), or 0. */
FG_HIDDEN unsigned fg_fault_collective(unsigned rank);
/* The device (its table index) is lost now: a fired record with FG_FAULT_FLAG_LOST names it. */
FG_HIDDEN int fg_fault_lost(unsigned device);

#endif
