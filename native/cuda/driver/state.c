/* Publishing this process's device memory to the shared state (common/fg_state: one <pid>.proc file per
 * process, read by NVML and nvidia-smi).
 *
 * A caching allocator calls cuMemAlloc in bursts; rewriting the file on every call would cost more than the
 * allocation. So a change is published at once when the last write is older than FAKEGPU_STATE_TTL_MS
 * (default 50 ms, the staleness NVML already tolerates), else by a helper thread at the end of that window.
 * The process report is driver/report.c. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fg_state.h"
#include "fgd.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static long long last_ns;
static int dirty, flusher_running, published_any;
static char state_dir[512], proc_name[FG_STATE_NAME_LEN];

static void process_name(void)
{
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, proc_name, sizeof proc_name - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0) {
        strcpy(proc_name, "cuda-app");
        return;
    }
    proc_name[n] = 0;
    for (ssize_t i = 0; i < n - 1; i++) /* argv separators become spaces, as nvidia-smi prints them */
        if (proc_name[i] == 0 || proc_name[i] == '\t' || proc_name[i] == '\n')
            proc_name[i] = ' ';
}

static long long ttl_ns(void)
{
    const char *v = getenv("FAKEGPU_STATE_TTL_MS");
    long ms = v && *v ? atol(v) : 50;
    return (ms < 0 ? 0 : ms) * 1000000LL;
}

/* Caller holds lock. */
static void publish_locked(void)
{
    unsigned long long used[FG_MAX_DEVICES] = {0};
    for (unsigned i = 0; i < fgd.devs.count; i++)
        if (atomic_load(&fgd.mem[i].active))
            used[i] = fgd.mem[i].context + atomic_load(&fgd.mem[i].used);
    if (!state_dir[0]) {
        fg_state_dir(state_dir, sizeof state_dir);
        process_name();
    }
    if (fg_state_publish(state_dir, (unsigned)getpid(), proc_name, 'C', used, fgd.devs.count) != 0)
        fg_debug("libcuda: could not publish to %s", state_dir);
    published_any = 1;
    dirty = 0;
    last_ns = fgd_now_ns();
}

static void *flusher(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    while (dirty) {
        long long due = last_ns + ttl_ns(), now = fgd_now_ns();
        if (now < due) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            long long t = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec + (due - now);
            ts.tv_sec = t / 1000000000LL;
            ts.tv_nsec = t % 1000000000LL;
            pthread_cond_timedwait(&wake, &lock, &ts);
            continue;
        }
        publish_locked();
    }
    flusher_running = 0;
    pthread_mutex_unlock(&lock);
    return NULL;
}

void fgd_state_changed(void)
{
    pthread_mutex_lock(&lock);
    if (fgd_now_ns() - last_ns >= ttl_ns()) {
        publish_locked();
    } else if (!dirty) {
        dirty = 1;
        if (!flusher_running) {
            pthread_t t;
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            flusher_running = pthread_create(&t, &attr, flusher, NULL) == 0;
            pthread_attr_destroy(&attr);
            if (!flusher_running)
                publish_locked();
        }
    }
    pthread_mutex_unlock(&lock);
}

/* A forked child is another process: it starts with no usage of its own and no helper thread. */
static void after_fork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    pthread_cond_init(&wake, NULL);
    dirty = flusher_running = published_any = 0;
    last_ns = 0;
    state_dir[0] = 0;
    for (unsigned i = 0; i < FG_MAX_DEVICES; i++) {
        atomic_store(&fgd.mem[i].used, 0);
        atomic_store(&fgd.mem[i].active, 0);
    }
}

__attribute__((constructor)) static void install_fork_handler(void) { pthread_atfork(NULL, NULL, after_fork_child); }

/* At exit the process leaves the shared state (its file is removed), like a process ending on a real GPU. */
__attribute__((destructor)) static void at_exit(void)
{
    pthread_mutex_lock(&lock);
    if (published_any && state_dir[0]) {
        unsigned long long none[1] = {0};
        fg_state_publish(state_dir, (unsigned)getpid(), proc_name, 'C', none, 1);
    }
    dirty = 0;
    pthread_mutex_unlock(&lock);
}
