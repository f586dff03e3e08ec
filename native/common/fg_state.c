#include "fg_state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* A folder changed less than this before a scan may change again within the same mtime tick (the kernel stamps
 * with a coarse clock), so the next read scans again rather than trust an equal mtime. */
#define SETTLE_NS 20000000LL

const char *fg_state_dir(char *buf, size_t len)
{
    const char *env = getenv("FAKEGPU_STATE_DIR");
    struct stat st;
    if (env && *env)
        fg_strlcpy(buf, env, len);
    else if (stat(FG_CONTAINER_DIR, &st) == 0 && S_ISDIR(st.st_mode))
        fg_strlcpy(buf, FG_CONTAINER_DIR, len);
    else {
        const char *tmp = getenv("TMPDIR");
        snprintf(buf, len, "%s/fakegpu-%u", tmp && *tmp ? tmp : "/tmp", (unsigned)getuid());
    }
    return buf;
}

static int pid_alive(unsigned pid)
{
    /* EPERM means it exists but belongs to someone else: still alive. */
    return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

static long long clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

fg_state_file *fg_state_create(const char *dir, unsigned pid, const char *name, char type)
{
    char path[1024], tmp[1100];
    if (snprintf(path, sizeof path, "%s/%u" FG_STATE_SUFFIX, dir, pid) >= (int)sizeof path)
        return NULL;
    snprintf(tmp, sizeof tmp, "%s/.%u" FG_STATE_SUFFIX ".tmp", dir, pid);
    mkdir(dir, 0777);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return NULL;
    fg_state_file *f = NULL;
    if (ftruncate(fd, sizeof *f) == 0) {
        void *p = mmap(NULL, sizeof *f, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        f = p == MAP_FAILED ? NULL : p;
    }
    close(fd);
    if (f) {
        /* The new file's pages are zero: every counter starts at 0. */
        memcpy(f->magic, FG_STATE_MAGIC, sizeof f->magic);
        f->pid = pid;
        f->type = type == 'G' ? 'G' : 'C';
        size_t o = 0;
        for (const char *c = name ? name : ""; *c && o + 1 < sizeof f->name; c++)
            f->name[o++] = (*c == '\t' || *c == '\n' || *c == '\r') ? ' ' : *c;
        if (rename(tmp, path) == 0)
            return f;
        munmap(f, sizeof *f);
    }
    unlink(tmp);
    return NULL;
}

void fg_state_close(fg_state_file *f, const char *dir, int remove)
{
    if (!f)
        return;
    if (remove) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%u" FG_STATE_SUFFIX, dir, f->pid);
        unlink(path);
    }
    munmap(f, sizeof *f);
}

static void unmap_all(fg_state_reader *r)
{
    for (unsigned i = 0; i < r->n; i++)
        munmap((void *)r->files[i], sizeof *r->files[i]);
    r->n = 0;
}

void fg_state_reader_open(fg_state_reader *r, const char *dir)
{
    memset(r, 0, sizeof *r);
    fg_strlcpy(r->dir, dir, sizeof r->dir);
}

void fg_state_reader_invalidate(fg_state_reader *r) { r->scanned_ns = 0; }

void fg_state_reader_close(fg_state_reader *r)
{
    unmap_all(r);
    r->scanned_ns = 0;
}

/* A pid from "<pid>.proc" (temp: ".<pid>.proc.tmp"); 0 when the name is neither. */
static unsigned file_pid(const char *name, int *temp)
{
    *temp = name[0] == '.';
    const char *digits = name + *temp;
    char *end = NULL;
    unsigned long pid = strtoul(digits, &end, 10);
    if (end == digits || pid == 0 || pid > 0xffffffffUL)
        return 0;
    return strcmp(end, *temp ? FG_STATE_SUFFIX ".tmp" : FG_STATE_SUFFIX) == 0 ? (unsigned)pid : 0;
}

/* Where a reader asks the kernel to put its i-th mapping: well below the mmap area that device allocations
 * churn (native mode reserves and releases pages there at every cudaMalloc/cudaFree). A read-only file mapping
 * among those costs each later mmap/munmap a rebalance of the process's VMA tree: about 2.5 us more per
 * malloc/free pair with another process on the device (bench/bench_cuda.py's pair, measured here). Only a
 * hint: where it is taken (or beyond a smaller address space) the kernel places the mapping as usual. */
#define MAP_HINT_BASE 0x100000000000ULL
#define MAP_HINT_STRIDE (((unsigned long long)sizeof(fg_state_file) + 0xFFFFULL) & ~0xFFFFULL)

static const fg_state_file *map_file(int dirfd, const char *name, unsigned pid, unsigned slot)
{
    /* Never follow a link or block on a FIFO someone put here: only a regular file of the full size is mapped. */
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return NULL;
    struct stat st;
    const fg_state_file *f = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= (off_t)sizeof *f) {
        void *hint = (void *)(uintptr_t)(MAP_HINT_BASE + slot * MAP_HINT_STRIDE);
        void *p = mmap(hint, sizeof *f, PROT_READ, MAP_SHARED, fd, 0);
        f = p == MAP_FAILED ? NULL : p;
    }
    close(fd);
    if (f && (memcmp(f->magic, FG_STATE_MAGIC, sizeof f->magic) != 0 || f->pid != pid)) {
        munmap((void *)f, sizeof *f);
        f = NULL;
    }
    return f;
}

static int by_pid(const void *a, const void *b)
{
    const fg_state_file *x = *(const fg_state_file *const *)a, *y = *(const fg_state_file *const *)b;
    return x->pid < y->pid ? -1 : x->pid > y->pid;
}

static void scan(fg_state_reader *r, const struct stat *dir_st)
{
    unmap_all(r);
    r->scanned_ns = clock_ns(CLOCK_MONOTONIC);
    r->dir_mtime = dir_st->st_mtim;
    long long mtime = (long long)dir_st->st_mtim.tv_sec * 1000000000LL + dir_st->st_mtim.tv_nsec;
    if (clock_ns(CLOCK_REALTIME) - mtime < SETTLE_NS)
        r->scanned_ns = 0; /* not settled: scan again next time */
    DIR *d = opendir(r->dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d)) && r->n < FG_STATE_MAX_PROCS;) {
        int temp;
        unsigned pid = file_pid(e->d_name, &temp);
        if (!pid)
            continue;
        if (!pid_alive(pid)) {
            /* The driver reaps a dead process's context: so do we (its file, or its half-made temp file). */
            if (unlinkat(dirfd(d), e->d_name, 0) == 0)
                fg_debug("dropped state of dead pid %u", pid);
            continue;
        }
        if (!temp && pid != r->skip_pid) {
            const fg_state_file *f = map_file(dirfd(d), e->d_name, pid, r->n);
            if (f)
                r->files[r->n++] = f;
        }
    }
    closedir(d);
    qsort(r->files, r->n, sizeof r->files[0], by_pid);
}

/* The mappings as the folder stands: rescanned when it changed or the ttl ran out; 0 when there is no folder. */
static int refresh(fg_state_reader *r, long long ttl_ns)
{
    struct stat st;
    if (stat(r->dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        unmap_all(r);
        return 0;
    }
    if (!r->scanned_ns || clock_ns(CLOCK_MONOTONIC) - r->scanned_ns >= ttl_ns ||
        st.st_mtim.tv_sec != r->dir_mtime.tv_sec || st.st_mtim.tv_nsec != r->dir_mtime.tv_nsec)
        scan(r, &st);
    return 1;
}

unsigned long long fg_state_reader_used(fg_state_reader *r, long long ttl_ns, unsigned device, int instance,
                                        unsigned except_pid, int again)
{
    unsigned long long sum = 0;
    if (device >= FG_MAX_DEVICES || (again && !refresh(r, ttl_ns)))
        return 0;
    for (unsigned i = 0; i < r->n; i++)
        if (r->files[i]->pid != except_pid &&
            (instance < 0 || atomic_load_explicit(&r->files[i]->instance[device], memory_order_relaxed) == instance))
            sum += atomic_load_explicit(&r->files[i]->used[device], memory_order_relaxed);
    return sum;
}

void fg_state_reader_read(fg_state_reader *r, long long ttl_ns, fg_snapshot *out)
{
    out->n = 0;
    if (!refresh(r, ttl_ns))
        return;
    for (unsigned i = 0; i < r->n; i++) {
        const fg_state_file *f = r->files[i];
        for (unsigned dev = 0; dev < FG_MAX_DEVICES && out->n < FG_STATE_MAX_PROCS; dev++) {
            uint64_t used = atomic_load_explicit(&f->used[dev], memory_order_relaxed);
            if (!used)
                continue;
            fg_proc *p = &out->procs[out->n++];
            p->pid = f->pid;
            p->device = dev;
            p->used_bytes = used;
            p->instance = atomic_load_explicit(&f->instance[dev], memory_order_relaxed);
            p->type = f->type == 'G' ? 'G' : 'C';
            memcpy(p->name, f->name, sizeof p->name);
            p->name[sizeof p->name - 1] = '\0';
        }
    }
}

long long fg_monotonic_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

#define SLOT_MASK ((1ULL << FG_STATE_SLOT_BITS) - 1)
#define US_MASK ((1ULL << FG_STATE_US_BITS) - 1)

/* Add `us` (negative: take back) to slot k's count of `kind`, within 0 .. FG_STATE_SLOT_US. */
static void add_busy(fg_state_file *f, unsigned device, uint64_t k, int kind, long long us)
{
    _Atomic uint64_t *slot = &f->busy[device][k % FG_STATE_BUSY_SLOTS];
    uint64_t w = atomic_load_explicit(slot, memory_order_relaxed);
    long long n[2] = {0, 0};
    if (w >> (2 * FG_STATE_US_BITS) == (k & SLOT_MASK)) { /* else a stale word: the slot starts empty */
        n[FG_WORK_COMPUTE] = (long long)((w >> FG_STATE_US_BITS) & US_MASK);
        n[FG_WORK_MEMORY] = (long long)(w & US_MASK);
    }
    n[kind] += us;
    n[kind] = n[kind] < 0 ? 0 : n[kind] > FG_STATE_SLOT_US ? FG_STATE_SLOT_US : n[kind];
    atomic_store_explicit(slot,
                          (k & SLOT_MASK) << (2 * FG_STATE_US_BITS) | (uint64_t)n[FG_WORK_COMPUTE] << FG_STATE_US_BITS |
                              (uint64_t)n[FG_WORK_MEMORY],
                          memory_order_relaxed);
}

/* [a, b) was busy with `kind`: each slot it overlaps gets its share in whole microseconds, the remainder carried to
 * the next share so that many short intervals add up exactly. What lands in slots from now's on is remembered, for
 * a synchronisation to take back. */
static void accrue(fg_state_file *f, fg_busy_track *t, unsigned device, int kind, long long a, long long b,
                   long long now)
{
    uint64_t last = fg_state_slot_of(b - 1), k = fg_state_slot_of(a), current = fg_state_slot_of(now);
    if (last - k >= FG_STATE_BUSY_SLOTS)
        k = last - FG_STATE_BUSY_SLOTS + 1;
    for (; k <= last; k++) {
        long long lo = (long long)k * FG_STATE_SLOT_NS, hi = lo + FG_STATE_SLOT_NS;
        long long ns = (b < hi ? b : hi) - (a > lo ? a : lo) + t->carry[kind];
        t->carry[kind] = ns % 1000;
        if (ns < 1000)
            continue;
        add_busy(f, device, k, kind, ns / 1000);
        if (k >= current) {
            int i = (int)(k % FG_BUSY_AHEAD_SLOTS);
            if (t->ahead[i].k != k)
                t->ahead[i].k = k, t->ahead[i].us[0] = t->ahead[i].us[1] = 0;
            t->ahead[i].us[kind] += (uint32_t)(ns / 1000);
        }
    }
}

/* How long the calling thread has waited on a run queue, runnable but without a CPU (Linux's schedstat); -1 when
 * the kernel does not say. */
static long long run_delay_ns(void)
{
    char buf[96];
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    unsigned long long on_cpu, waited;
    return sscanf(buf, "%llu %llu", &on_cpu, &waited) == 2 ? (long long)waited : -1;
}

#define SEEN_EVERY_NS 1000000LL /* how often a busy writer reads its thread's wait: at most 1000 reads a second */

/* Remember the thread's run-queue wait at `now` (at most every SEEN_EVERY_NS unless `force`). Returns whether the
 * thread spent at least half the time since the previous reading (or since the device's work ended, if later)
 * waiting for a CPU: a pause the host's load made, not the program. */
static int observe(fg_busy_track *t, long long now, int force)
{
    if (!force && now - t->seen_at < SEEN_EVERY_NS)
        return 0;
    int tid = (int)syscall(SYS_gettid);
    long long wait = run_delay_ns(), since = t->seen_at > t->end ? t->seen_at : t->end;
    int starved = wait >= 0 && tid == t->seen_tid && t->seen_at > 0 && now > since &&
                  wait - t->seen_wait >= (now - since) / 2;
    t->seen_at = now, t->seen_wait = wait, t->seen_tid = tid;
    return starved;
}

void fg_state_work(fg_state_file *f, fg_busy_track *t, unsigned device, int kind, long long t0, long long t1,
                   long long dur)
{
    if (!f || !t || device >= FG_MAX_DEVICES || (kind != FG_WORK_COMPUTE && kind != FG_WORK_MEMORY))
        return;
    if (t0 > t1)
        t0 = t1;
    /* The gap since the device's work ended was busy when the launch stream kept it fed, or when the program was
     * kept from launching by a loaded host rather than by its own pause: a GPU would have gone on with its queue. */
    if (t0 > t->end && (t0 - t->end < FG_STATE_BUSY_GAP_NS || observe(t, t0, 1)))
        accrue(f, t, device, t->kind, t->end, t0, t1);
    observe(t, t1, 0);
    long long start = t0 > t->end ? t0 : t->end;
    long long stop = start + (dur > t1 - t0 ? dur : t1 - t0);
    if (stop > t1 + FG_STATE_BUSY_AHEAD_NS) /* saturated: the program outruns the device; the surplus is dropped */
        stop = t1 + FG_STATE_BUSY_AHEAD_NS;
    if (stop > start)
        accrue(f, t, device, kind, start, stop, t1);
    if (stop > t->end)
        t->end = stop;
    t->kind = kind;
}

void fg_state_synced(fg_state_file *f, fg_busy_track *t, unsigned device, long long now)
{
    if (!f || !t || device >= FG_MAX_DEVICES)
        return;
    observe(t, now, 0);
    if (t->end <= now)
        return;
    uint64_t first = fg_state_slot_of(now), last = fg_state_slot_of(t->end - 1);
    for (uint64_t k = first; k <= last; k++) {
        int i = (int)(k % FG_BUSY_AHEAD_SLOTS);
        if (t->ahead[i].k != k)
            continue; /* nothing was written there ahead */
        uint32_t *us = t->ahead[i].us;
        long long back[2] = {us[0], us[1]};
        if (k == first) { /* only the part after now, split as the slot's queued time was */
            long long hi = (long long)(k + 1) * FG_STATE_SLOT_NS;
            long long part = ((t->end < hi ? t->end : hi) - now) / 1000, total = back[0] + back[1];
            if (part > total)
                part = total;
            back[FG_WORK_COMPUTE] = total ? part * back[FG_WORK_COMPUTE] / total : 0;
            back[FG_WORK_MEMORY] = part - back[FG_WORK_COMPUTE];
            us[FG_WORK_COMPUTE] -= (uint32_t)back[FG_WORK_COMPUTE];
            us[FG_WORK_MEMORY] -= (uint32_t)back[FG_WORK_MEMORY];
        } else {
            t->ahead[i].k = 0;
        }
        add_busy(f, device, k, FG_WORK_COMPUTE, -back[FG_WORK_COMPUTE]);
        add_busy(f, device, k, FG_WORK_MEMORY, -back[FG_WORK_MEMORY]);
    }
    t->end = now;
}

void fg_state_reader_busy(const fg_state_reader *r, unsigned device, uint64_t first, unsigned n,
                          uint32_t *compute_us, uint32_t *memory_us)
{
    memset(compute_us, 0, n * sizeof *compute_us);
    memset(memory_us, 0, n * sizeof *memory_us);
    if (device >= FG_MAX_DEVICES)
        return;
    for (unsigned i = 0; i < r->n; i++) {
        const _Atomic uint64_t *ring = r->files[i]->busy[device];
        for (unsigned j = 0; j < n; j++) {
            uint64_t k = first + j;
            uint64_t w = atomic_load_explicit(&ring[k % FG_STATE_BUSY_SLOTS], memory_order_relaxed);
            if (w >> (2 * FG_STATE_US_BITS) != (k & SLOT_MASK))
                continue;
            compute_us[j] += (uint32_t)((w >> FG_STATE_US_BITS) & US_MASK);
            memory_us[j] += (uint32_t)(w & US_MASK);
        }
    }
}
