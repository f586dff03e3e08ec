/* The last CUDA activity of this process, for `fakegpu run --timeout`: when a run is ended for taking too long,
 * the launcher names what the program last did with CUDA (a kernel launch, a copy, a synchronize), which tells
 * a loop that never ends (its stop condition read from kernel output) from a program that stopped calling CUDA.
 *
 * With FAKEGPU_ACTIVITY_DIR set (the launcher sets it for --timeout), the process maps <dir>/<pid>.activity, one
 * 512-byte page shared with the file, and each recorded call writes into it: nothing is written to the file by a
 * system call, nothing needs the process to cooperate when it is killed, and a call costs a clock read and, when
 * the name changed, a short copy. Layout (little endian; fakegpu/launcher.py reads it):
 *   magic "FGACT1\0\0", u64 sequence number, i64 CLOCK_MONOTONIC ns, u64 bytes, char api[48], char detail[432]. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fgd_module.h"

typedef struct {
    char magic[8];
    uint64_t seq;
    int64_t t_ns;
    uint64_t bytes;
    char api[48];
    char detail[432];
} page_t;

_Static_assert(sizeof(page_t) == 512, "the launcher reads 512 bytes");

static page_t *page;
static atomic_int state; /* 0: not looked at yet, 1: recording, -1: not wanted or not possible */
static atomic_flag busy = ATOMIC_FLAG_INIT;
static const char *last_api, *last_detail;

static void setup(void)
{
    const char *dir = getenv("FAKEGPU_ACTIVITY_DIR");
    int on = -1;
    if (dir && *dir) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%d.activity", dir, (int)getpid());
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0 && ftruncate(fd, sizeof(page_t)) == 0) {
            void *p = mmap(NULL, sizeof(page_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (p != MAP_FAILED) {
                page = p;
                memcpy(page->magic, "FGACT1\0\0", 8);
                on = 1;
            }
        }
        if (fd >= 0)
            close(fd);
        if (on < 0)
            fg_debug("libcuda: cannot record CUDA activity in %s", path);
    }
    atomic_store(&state, on);
}

void fgd_activity(const char *api, const char *detail, unsigned long long bytes)
{
    int s = atomic_load_explicit(&state, memory_order_relaxed);
    if (s < 0)
        return;
    if (atomic_flag_test_and_set_explicit(&busy, memory_order_acquire))
        return; /* another thread is recording: its call stands for this moment */
    if (!s)
        setup();
    if (page) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        page->t_ns = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
        page->bytes = bytes;
        if (api != last_api) {
            snprintf(page->api, sizeof page->api, "%s", api);
            last_api = api;
        }
        if (detail != last_detail) {
            snprintf(page->detail, sizeof page->detail, "%s", detail ? detail : "");
            last_detail = detail;
        }
        page->seq++;
    }
    atomic_flag_clear_explicit(&busy, memory_order_release);
}

/* A forked child records into a file of its own pid, not into its parent's page. */
static void after_fork_child(void)
{
    if (page)
        munmap(page, sizeof(page_t));
    page = NULL;
    last_api = last_detail = NULL;
    atomic_flag_clear(&busy);
    atomic_store(&state, 0);
}

__attribute__((constructor)) static void install_fork_handler(void) { pthread_atfork(NULL, NULL, after_fork_child); }
