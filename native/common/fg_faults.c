/* Reading the fault board: one mapping per process, a count load per question when no fault is on it. */
#include "fg_faults.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fg_devices.h"

#define FG_FAULT_RETRY_NS 100000000ULL /* how long "no board" is believed */

static char board_path[600];
static atomic_int have_path;
static _Atomic(const fg_fault_board *) mapped;
static atomic_int writable; /* the mapping may store fire times (an allocation-triggered fault firing) */
static _Atomic unsigned long long allocations[FG_MAX_DEVICES]; /* this process's, per board */
static _Atomic unsigned long long operations;                   /* this process's NCCL operations */
static _Atomic uint64_t looked_ns; /* CLOCK_MONOTONIC of the last failed look */

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t fg_fault_now_ns(void) { return clock_ns(CLOCK_REALTIME); }

void fg_faults_init(const char *state_dir)
{
    int expected = 0;
    static atomic_int claimed;
    if (!atomic_compare_exchange_strong(&claimed, &expected, 1))
        return;
    snprintf(board_path, sizeof board_path, "%s/%s", state_dir, FG_FAULT_FILE);
    atomic_store_explicit(&have_path, 1, memory_order_release);
}

static const fg_fault_board *map_board(void)
{
    if (!atomic_load_explicit(&have_path, memory_order_acquire))
        return NULL;
    /* Read-write where allowed, so this process can fire an allocation-triggered fault; read-only otherwise.
     * Never through a link, and never blocking on a FIFO put in its place. */
    const int flags = O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
    int rw = 1, fd = open(board_path, O_RDWR | flags);
    if (fd < 0) {
        rw = 0;
        fd = open(board_path, O_RDONLY | flags);
    }
    if (fd < 0)
        return NULL;
    struct stat st;
    /* A short file would fault on access past its end; a foreign one is not ours to read. */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(fg_fault_board)) {
        close(fd);
        return NULL;
    }
    void *p = mmap(NULL, sizeof(fg_fault_board), rw ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return NULL;
    if (memcmp(p, FG_FAULT_MAGIC, 8) != 0) {
        munmap(p, sizeof(fg_fault_board));
        return NULL;
    }
    atomic_store(&writable, rw);
    return p;
}

const fg_fault_board *fg_faults(void)
{
    const fg_fault_board *b = atomic_load_explicit(&mapped, memory_order_acquire);
    if (b)
        return b;
    uint64_t now = clock_ns(CLOCK_MONOTONIC), last = atomic_load_explicit(&looked_ns, memory_order_relaxed);
    if (last && now - last < FG_FAULT_RETRY_NS)
        return NULL;
    atomic_store_explicit(&looked_ns, now, memory_order_relaxed);
    const fg_fault_board *fresh = map_board();
    if (!fresh)
        return NULL;
    const fg_fault_board *expected = NULL;
    if (!atomic_compare_exchange_strong(&mapped, &expected, fresh)) {
        munmap((void *)fresh, sizeof(fg_fault_board)); /* another thread mapped it first */
        return expected;
    }
    return fresh;
}

unsigned fg_fault_count(const fg_fault_board *b)
{
    if (!b)
        return 0;
    unsigned n = atomic_load_explicit(&((fg_fault_board *)b)->count, memory_order_acquire);
    return n < FG_FAULT_MAX_RECORDS ? n : FG_FAULT_MAX_RECORDS;
}

int fg_fault_lost(unsigned device)
{
    const fg_fault_board *b = fg_faults();
    unsigned n = fg_fault_count(b);
    if (!n)
        return 0;
    uint64_t now = fg_fault_now_ns();
    for (unsigned i = 0; i < n; i++)
        if (b->rec[i].device == device && (b->rec[i].flags & FG_FAULT_FLAG_LOST) && b->rec[i].fire_ns <= now)
            return 1;
    return 0;
}

/* A record's length once fired (data's high 32 bits, ms; fakegpu/faults/board.py), 0: until the run ends. */
static uint64_t lasts_ns(const fg_fault_record *r) { return (r->data >> 32) * 1000000ULL; }

static int active(const fg_fault_record *r, uint64_t now)
{
    uint64_t len = lasts_ns(r);
    return r->fire_ns <= now && (!len || now - r->fire_ns < len);
}

void fg_fault_throttle_of(unsigned device, unsigned boost_mhz, fg_fault_throttling *out)
{
    memset(out, 0, sizeof *out);
    const fg_fault_board *b = fg_faults();
    unsigned n = fg_fault_count(b);
    if (!n)
        return;
    uint64_t now = fg_fault_now_ns();
    for (unsigned i = 0; i < n; i++) {
        const fg_fault_record *r = &b->rec[i];
        if (r->device != device || r->kind != FG_FAULT_KIND_THROTTLE || r->fire_ns > now)
            continue;
        unsigned bits = r->code & 0xFF, value = r->code >> 8;
        uint64_t held = now - r->fire_ns, len = lasts_ns(r);
        if (len && held > len)
            held = len;
        if (bits & 0x84) /* SW power cap, HW power brake */
            out->power_ns += held;
        if (bits & 0x60) /* SW thermal, HW thermal */
            out->thermal_ns += held;
        if (bits & 0x10) /* sync boost */
            out->sync_ns += held;
        if (!active(r, now))
            continue;
        /* fakegpu/faults/board.py's throttle_mhz: a share of the boost clock in 15 MHz steps, at most the boost */
        unsigned mhz = (r->flags & FG_FAULT_FLAG_CLOCK_PERCENT)
                           ? boost_mhz * value / 100 / FG_FAULT_CLOCK_STEP_MHZ * FG_FAULT_CLOCK_STEP_MHZ
                           : value;
        if (boost_mhz && mhz > boost_mhz)
            mhz = boost_mhz;
        if (!mhz)
            mhz = 1;
        if (!out->mhz || mhz < out->mhz)
            out->mhz = mhz;
        out->reasons |= bits;
    }
}

unsigned long long fg_fault_pressure(unsigned device)
{
    const fg_fault_board *b = fg_faults();
    unsigned n = fg_fault_count(b);
    unsigned long long held = 0;
    if (!n)
        return 0;
    uint64_t now = fg_fault_now_ns();
    for (unsigned i = 0; i < n; i++)
        if (b->rec[i].device == device && b->rec[i].kind == FG_FAULT_KIND_MEMORY_PRESSURE && active(&b->rec[i], now))
            held += (unsigned long long)b->rec[i].code << 20;
    return held;
}

/* A forked child is another process: its count of allocations starts at 0, as its memory does. */
static void after_fork_child(void)
{
    for (unsigned i = 0; i < FG_MAX_DEVICES; i++)
        atomic_store(&allocations[i], 0);
    atomic_store(&operations, 0);
}

__attribute__((constructor)) static void install_fork_handler(void) { pthread_atfork(NULL, NULL, after_fork_child); }

void fg_fault_allocated(unsigned device)
{
    if (device >= FG_MAX_DEVICES)
        return;
    unsigned long long n = atomic_fetch_add(&allocations[device], 1) + 1;
    const fg_fault_board *b = fg_faults();
    unsigned count = fg_fault_count(b);
    if (!count || !atomic_load(&writable))
        return;
    for (unsigned i = 0; i < count; i++) {
        fg_fault_record *r = (fg_fault_record *)&b->rec[i];
        if (r->device != device || (r->flags & FG_FAULT_FLAG_RANK) || !(r->flags & FG_FAULT_FLAG_AFTER_ALLOCATIONS) ||
            n < (r->data & 0xFFFFFFFFULL))
            continue;
        /* Once: the first process to reach the count stamps the time; later ones find it stamped. */
        uint64_t never = FG_FAULT_NEVER;
        __atomic_compare_exchange_n(&r->fire_ns, &never, fg_fault_now_ns(), 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    }
}

void fg_fault_ecc_of(unsigned device, fg_fault_ecc *out)
{
    memset(out, 0, sizeof *out);
    const fg_fault_board *b = fg_faults();
    unsigned n = fg_fault_count(b);
    if (!n)
        return;
    uint64_t now = fg_fault_now_ns();
    for (unsigned i = 0; i < n; i++) {
        const fg_fault_record *r = &b->rec[i];
        if (r->device != device || r->fire_ns > now)
            continue;
        if (r->kind == FG_FAULT_KIND_CORRECTED_ECC) {
            out->corrected += r->code;
            continue;
        }
        if (r->kind != FG_FAULT_KIND_XID)
            continue;
        switch (r->code) {
        case 48: out->dbe++; break;
        case 94: out->contained++; break;
        case 95: out->uncontained++; break;
        case 63: out->recorded++; break;
        case 64: out->record_fails++; break;
        default: break;
        }
    }
}

unsigned fg_fault_collective(unsigned rank)
{
    unsigned long long n = atomic_fetch_add(&operations, 1) + 1;
    const fg_fault_board *b = fg_faults();
    unsigned count = fg_fault_count(b);
    if (!count)
        return 0;
    int rw = atomic_load(&writable);
    uint64_t first = FG_FAULT_NEVER;
    unsigned code = 0;
    for (unsigned i = 0; i < count; i++) {
        fg_fault_record *r = (fg_fault_record *)&b->rec[i];
        if (r->kind != FG_FAULT_KIND_NCCL || !(r->flags & FG_FAULT_FLAG_RANK) || r->device != rank)
            continue;
        if (rw && (r->flags & FG_FAULT_FLAG_AFTER_COLLECTIVES) && n >= (r->data & 0xFFFFFFFFULL)) {
            uint64_t never = FG_FAULT_NEVER;
            __atomic_compare_exchange_n(&r->fire_ns, &never, fg_fault_now_ns(), 0, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED);
        }
        uint64_t at = __atomic_load_n(&r->fire_ns, __ATOMIC_ACQUIRE);
        if (active(r, fg_fault_now_ns()) && at < first) {
            first = at;
            code = r->code;
        }
    }
    return code;
}
