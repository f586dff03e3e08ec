/* Reading the fault board: one mapping per process, a count load per question when no fault is on it. */
#include "fg_faults.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>


#define FG_FAULT_RETRY_NS 100000000ULL /* how long "no board" is believed */

static char board_path[600];
static atomic_int have_path;
static _Atomic(const fg_fault_board *) mapped;
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
    int fd = open(board_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    void *p = mmap(NULL, sizeof(fg_fault_board), PROT_READ, MAP_SHARED, fd, 0);
    off_t size = lseek(fd, 0, SEEK_END);
    close(fd);
    if (p == MAP_FAILED)
        return NULL;
    /* A short file would fault on access past its end; a foreign one is not ours to read. */
    if (size < (off_t)sizeof(fg_fault_board) || memcmp(p, FG_FAULT_MAGIC, 8) != 0) {
        munmap(p, sizeof(fg_fault_board));
        return NULL;
    }
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
