/* The timeline log's writer (common/fgc_timeline.h has the format and why). One buffer per process under a lock:
 * a record costs a clock read, a copy and, for a name seen for the first time, an interning step; the file is
 * written by write(2) at synchronisations (where the program waits for the GPU anyway), when the buffer fills and
 * at exit, so a run that dies between two of those loses at most the buffer. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fgc_timeline.h"
#include "fgd.h"
#include "fgd_timeline.h"

#define BUFFER_BYTES (256 * 1024)
#define NAME_SLOTS 8192 /* distinct names kept by pointer; past it a name is written again at each use */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int state; /* 0: not looked at yet, 1: recording, -1: off (not wanted, failed, or after exit) */
static int fd = -1;
static _Atomic(fgc_tl_sink) sink; /* FakeGPU's CUPTI while it collects records (fgd_timeline_set_sink) */
static unsigned char buffer[BUFFER_BYTES];
static size_t used;
static unsigned long long kept, dropped, limit;
static struct {
    const char *name;
    uint32_t id;
} names[NAME_SLOTS];
static uint32_t next_name = 1;

static int env_int(const char *key)
{
    const char *v = getenv(key);
    char *end = NULL;
    long n = v && *v ? strtol(v, &end, 10) : -1;
    return end && !*end && n >= 0 && n < 1 << 30 ? (int)n : -1;
}

static void flush_locked(void)
{
    size_t done = 0;
    while (fd >= 0 && done < used) {
        ssize_t n = write(fd, buffer + done, used - done);
        if (n <= 0) {
            fg_debug("libcuda: the timeline log stopped: write failed");
            close(fd);
            fd = -1;
            atomic_store(&state, -1);
            break;
        }
        done += (size_t)n;
    }
    used = 0;
}

static void append_locked(const void *p, size_t n)
{
    if (used + n > sizeof buffer)
        flush_locked();
    if (n <= sizeof buffer) {
        memcpy(buffer + used, p, n);
        used += n;
    }
}

static void setup_locked(void)
{
    const char *dir = getenv("FAKEGPU_TIMELINE_DIR");
    int on = -1;
    if (dir && *dir) {
        char path[1100];
        snprintf(path, sizeof path, "%s/%d.fgtl", dir, (int)getpid());
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd >= 0) {
            fgc_tl_header h = {.pid = (int32_t)getpid(), .rank = env_int("RANK"), .world = env_int("WORLD_SIZE"),
                               .local_rank = env_int("LOCAL_RANK")};
            memcpy(h.magic, FGC_TL_MAGIC, sizeof h.magic);
            struct timespec rt;
            h.t0_monotonic_ns = fgd_now_ns();
            clock_gettime(CLOCK_REALTIME, &rt);
            h.t0_realtime_ns = (int64_t)rt.tv_sec * 1000000000LL + rt.tv_nsec;
            const char *max = getenv("FAKEGPU_TIMELINE_MAX_RECORDS");
            limit = max && *max ? strtoull(max, NULL, 10) : 2000000ULL;
            append_locked(&h, sizeof h);
            on = 1;
        } else {
            fg_warn("cannot write the timeline log %s: the run's timeline will lack this process", path);
        }
    }
    atomic_store(&state, on);
}

/* Whether records are wanted: by the log, or by a sink. */
int fgd_timeline_on(void)
{
    int s = atomic_load_explicit(&state, memory_order_relaxed);
    if (!s) {
        pthread_mutex_lock(&lock);
        if (!atomic_load(&state))
            setup_locked();
        pthread_mutex_unlock(&lock);
        s = atomic_load(&state);
    }
    return s > 0 || atomic_load_explicit(&sink, memory_order_relaxed) != NULL;
}

void fgd_timeline_set_sink(fgc_tl_sink s)
{
    fgd_timeline_on(); /* the log's state settled first: a sink alone must not open it */
    atomic_store(&sink, s);
}

/* The id of `name` (by address: kernel names and routine names live as long as the process), writing it first. */
static uint32_t name_id_locked(const char *name)
{
    if (!name)
        return 0;
    size_t h = ((uintptr_t)name >> 3) * 0x9e3779b97f4a7c15ULL >> 51; /* 13 bits: NAME_SLOTS */
    for (size_t i = 0; i < 16; i++) {
        size_t j = (h + i) & (NAME_SLOTS - 1);
        if (names[j].name == name)
            return names[j].id;
        if (!names[j].name) {
            names[j].name = name;
            names[j].id = next_name;
            break;
        }
    }
    uint32_t id = next_name++;
    size_t len = strlen(name);
    fgc_tl_record r = {.kind = FGC_TL_NAME, .a = id, .b = len};
    append_locked(&r, sizeof r);
    static const char zeros[8];
    for (size_t off = 0; off < len; off += BUFFER_BYTES / 2) /* a name longer than the buffer goes in pieces */
        append_locked(name + off, len - off < BUFFER_BYTES / 2 ? len - off : BUFFER_BYTES / 2);
    append_locked(zeros, (8 - len % 8) % 8);
    return id;
}

static long long cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The recorder's own time so far (reading the CPU clock, appending records): taken off every time it records, on
 * both clocks, so the host's timeline is the program's and not the program's plus its recording (about 2 us a
 * launch on this project's machines, as much as the launch itself). */
static atomic_llong overhead_ns;
/* What one recording step adds at most: measured on the wall clock, a step during which the process lost the CPU
 * would otherwise take that time off the CPU clock too and send it backwards. A step takes 1-2 us. */
#define MAX_STEP_NS 10000LL

static void overhead_add(long long ns)
{
    atomic_fetch_add_explicit(&overhead_ns, ns < MAX_STEP_NS ? ns : MAX_STEP_NS, memory_order_relaxed);
}

fgd_stamp fgd_timeline_stamp(void)
{
    fgd_stamp s = {0, 0};
    if (fgd_timeline_on()) {
        long long w0 = fgd_now_ns(), cpu = cpu_now(), w1 = fgd_now_ns();
        long long before = atomic_load_explicit(&overhead_ns, memory_order_relaxed);
        overhead_add(w1 - w0);
        s.wall = w0 - before;
        s.cpu = cpu - before;
    }
    return s;
}

static uint32_t since(long long then, long long now)
{
    long long d = now - then;
    return d <= 0 ? 0 : d > 0xffffffffLL ? 0xffffffffu : (uint32_t)d;
}

static __thread uint32_t thread_id;

/* t0 and cpu0 at the call's start (now when unset); the call's durations up to now. The process's CPU time is a
 * system call to read, a launch's own cost here: it is read once per record, and the call's CPU duration taken to
 * be its wall duration (a call is too short to lose the CPU often), unless the library measured it (cpu_dur set:
 * NCCL's, whose calls wait for their peers, partly asleep). */
void fgd_timeline_put(fgc_tl_record *r, const char *name)
{
    if (!fgd_timeline_on())
        return;
    long long entered = fgd_now_ns(), before = atomic_load_explicit(&overhead_ns, memory_order_relaxed);
    long long wall = entered - before;
    if (!r->t0)
        r->t0 = wall;
    if (!r->cpu0)
        r->cpu0 = cpu_now() - before;
    r->dur = since(r->t0, wall);
    if (!r->cpu_dur)
        r->cpu_dur = r->dur;
    if (r->device == FGC_TL_NO_DEVICE) {
        struct CUctx_st *c = fgd_current();
        r->device = (uint16_t)(c ? c->device : 0);
    }
    if (!thread_id)
        thread_id = (uint32_t)syscall(SYS_gettid);
    r->tid = thread_id;
    fgc_tl_sink k = atomic_load_explicit(&sink, memory_order_acquire);
    if (k)
        k(r, name);
    pthread_mutex_lock(&lock);
    if (atomic_load(&state) > 0) {
        if (kept >= limit) {
            dropped++;
        } else {
            kept++;
            if (name) {
                uint32_t id = name_id_locked(name);
                if (r->kind == FGC_TL_GEMM)
                    r->c = id;
                else
                    r->a = id;
            }
            append_locked(r, sizeof *r);
            if (r->kind == FGC_TL_SYNC)
                flush_locked(); /* the program waits for the GPU here anyway */
        }
    }
    pthread_mutex_unlock(&lock);
    overhead_add(fgd_now_ns() - entered);
}

void fgd_timeline_kernel(CUstream s, const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, unsigned smem, fgd_stamp t0)
{
    if (!fgd_timeline_on())
        return;
    fgc_tl_record r = {.kind = FGC_TL_KERNEL, .device = FGC_TL_NO_DEVICE, .t0 = t0.wall, .cpu0 = t0.cpu,
                       .stream = (uint64_t)(uintptr_t)s, .b = gx | (uint64_t)gy << 32,
                       .c = (gz & 0xffff) | (uint64_t)(bx & 0xffff) << 16 | (uint64_t)(by & 0xffff) << 32 |
                            (uint64_t)(bz & 0xffff) << 48,
                       .d = smem};
    if (!fgd_default_stream(s))
        r.device = (uint16_t)s->device;
    fgd_timeline_put(&r, name ? name : "(unnamed kernel)");
}

void fgd_timeline_simple(int kind, int sub, CUstream s, unsigned long long a, unsigned long long b, fgd_stamp t0)
{
    if (!fgd_timeline_on())
        return;
    fgc_tl_record r = {.kind = (uint8_t)kind, .sub = (uint8_t)sub, .device = FGC_TL_NO_DEVICE, .t0 = t0.wall,
                       .cpu0 = t0.cpu, .stream = (uint64_t)(uintptr_t)s, .a = a, .b = b};
    if (!fgd_default_stream(s))
        r.device = (uint16_t)s->device;
    fgd_timeline_put(&r, NULL);
}

/* What the private table hands FakeGPU's libraries: their record, times and device filled in here when unset. */
void fgd_timeline_library(const fgc_tl_record *in, const char *name)
{
    if (!fgd_timeline_on() || !in)
        return;
    fgc_tl_record r = *in;
    long long before = atomic_load_explicit(&overhead_ns, memory_order_relaxed);
    if (r.t0) /* a library's own clock readings: onto the recorder-free clocks */
        r.t0 -= before;
    if (r.cpu0)
        r.cpu0 -= before;
    fgd_timeline_put(&r, name);
}

/* A forked child logs into a file of its own pid; the parent's buffered records are the parent's to write. */
static void after_fork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    if (fd >= 0)
        close(fd);
    fd = -1;
    used = 0;
    kept = dropped = 0;
    memset(names, 0, sizeof names);
    atomic_store(&overhead_ns, 0);
    next_name = 1;
    thread_id = 0; /* the forking thread is another thread of another process now */
    atomic_store(&sink, NULL); /* the profiler's buffers are the parent's */
    atomic_store(&state, 0);
}

__attribute__((constructor)) static void install_fork_handler(void) { pthread_atfork(NULL, NULL, after_fork_child); }

/* libcuda is finalised after the libraries that need it: their last records are in. */
__attribute__((destructor)) static void at_exit(void)
{
    pthread_mutex_lock(&lock);
    if (atomic_load(&state) > 0) {
        if (dropped) {
            fgc_tl_record r = {.kind = FGC_TL_TRUNCATED, .t0 = fgd_now_ns(), .a = dropped};
            append_locked(&r, sizeof r);
        }
        flush_locked();
        close(fd);
        fd = -1;
    }
    atomic_store(&state, -1);
    pthread_mutex_unlock(&lock);
}
