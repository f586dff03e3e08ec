/* The timeline log: every piece of stream-ordered work a process hands its fake GPUs, in the order it was handed
 * over, for `fakegpu run --timeline` (fakegpu/perf/timeline_log.py reads it, timeline.py prices it and writes a
 * Kineto trace). libcuda owns the log (driver/timeline.c); FakeGPU's cuBLAS, NCCL and runtime add what only they
 * know (a GEMM's shape and dtypes, a collective's bytes and group, a launch the driver never sees) through the
 * private export table (fgc_private.h).
 *
 * With FAKEGPU_TIMELINE_DIR set, a process appends to <dir>/<pid>.fgtl: a 64-byte header, then 72-byte records,
 * each name (a kernel's, a cuBLAS routine's) as a NAME record followed by its bytes padded to 8, written once.
 * Records are buffered and written at synchronisations, when the buffer fills and at exit; past
 * FAKEGPU_TIMELINE_MAX_RECORDS (default 2,000,000: 128 MB) nothing more is kept and a TRUNCATED record, written at
 * exit, says how many were dropped. Little endian, as the hosts this runs on are. */
#ifndef FGC_TIMELINE_H
#define FGC_TIMELINE_H

#include <stdint.h>

#define FGC_TL_MAGIC "FGTL\001\0\0\0"

enum {
    FGC_TL_KERNEL = 1,  /* a = name id, b = gx | gy << 32, c = gz | bx << 16 | by << 32 | bz << 48, d = shared mem */
    FGC_TL_MEMCPY,      /* sub = FGC_TL_HTOD..., a = bytes, b = 1 when stream-ordered (async) */
    FGC_TL_MEMSET,      /* a = bytes, b = 1 when stream-ordered */
    FGC_TL_SYNC,        /* sub = FGC_TL_SYNC_*, a = the event (SYNC_EVENT) */
    FGC_TL_EVENT_RECORD, /* a = the event */
    FGC_TL_STREAM_WAIT, /* a = the event the stream waits for */
    FGC_TL_STREAM_CREATE, /* stream = the new stream, a = its flags, b = its priority */
    FGC_TL_GEMM,        /* before its stand-in's launch: a = m | n << 32, b = k | batch << 32, c = name id of the
                           routine, d = A's cudaDataType | compute type << 16 | FGC_TL_GEMM_* flags << 48 */
    FGC_TL_COLL,        /* sub = the collective (coll.c's fgn_coll order), a = bytes, b = element count,
                           c = nranks | rank << 32, d = ncclDataType_t | ncclRedOp_t << 16 | communicator
                           tag << 32 (equal on every rank of the communicator, never 0) */
    FGC_TL_NAME,        /* a = id, b = length; the name's bytes follow, padded to 8 */
    FGC_TL_TRUNCATED,   /* a = records dropped past the limit */
};

enum { FGC_TL_HTOD = 1, FGC_TL_DTOH, FGC_TL_DTOD, FGC_TL_HTOH };
enum { FGC_TL_SYNC_DEVICE = 1, FGC_TL_SYNC_STREAM, FGC_TL_SYNC_EVENT };
enum { FGC_TL_GEMM_TF32 = 1, FGC_TL_GEMM_BATCHED = 2, FGC_TL_GEMM_CAPTURED = 4 };
#define FGC_TL_NO_DEVICE 0xffff /* a library's record: the driver fills in the current context's device */

/* Each call is timed on two clocks: the wall clock, and the process's CPU time, which leaves out the time the
 * host was not running the program (other processes on a loaded machine), for a host timeline that does not
 * depend on what else this machine was doing. */
typedef struct {
    uint8_t kind, sub;
    uint16_t device;
    uint32_t tid;
    int64_t t0;            /* CLOCK_MONOTONIC ns at the call's start (0 from a library: the driver's now) */
    int64_t cpu0;          /* CLOCK_PROCESS_CPUTIME_ID ns at the call's start (0 likewise) */
    uint32_t dur, cpu_dur; /* ns the call took on each clock (filled in by the driver, the CPU one taken to be the
                            * wall one; NCCL measures its own: its calls wait for the peers) */
    uint64_t stream;       /* the stream handle (0: the legacy default stream, 2: the per-thread default stream) */
    uint64_t a, b, c, d;
} fgc_tl_record;

typedef struct {
    char magic[8];
    int32_t pid, rank, world, local_rank; /* $RANK, $WORLD_SIZE, $LOCAL_RANK; -1 when unset */
    int64_t t0_monotonic_ns, t0_realtime_ns; /* one instant on both clocks: the trace's absolute base */
    char reserved[24];
} fgc_tl_header;

/* Who else sees each record as it is made, with its name (FakeGPU's CUPTI, while a profiler collects activity
 * records): called on the calling thread, the record's times and device filled in, before the log's own copy. */
typedef void (*fgc_tl_sink)(const fgc_tl_record *r, const char *name);

_Static_assert(sizeof(fgc_tl_record) == 72, "timeline_log.py reads 72-byte records");
_Static_assert(sizeof(fgc_tl_header) == 64, "timeline_log.py reads a 64-byte header");

#endif
