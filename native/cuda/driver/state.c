/* Publishing this process's device memory to the shared state (common/fg_state: a mapped <pid>.proc file per
 * process, read by NVML and nvidia-smi).
 *
 * Every change is a store into the mapping, so another process's nvidia-smi sees an allocation the moment
 * cuMemAlloc returns, as on a real driver; the file is created at the first change (a process that only asks
 * for properties never appears) and removed at exit. The process report is driver/report.c. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fg_state.h"
#include "fgd.h"

/* The lock orders the stores: each computes its device's total inside it, so the last store is the latest. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fg_state_file *file;
static int unavailable; /* the folder could not take the file, or the process is exiting */
static char state_dir[512];

/* argv[0] as the process was started ("python3" for `python3 train.py`, a path if it was run by one): what real
 * NVML and nvidia-smi show for a process (a real H200, tests/data/gpu/h200/smi/holding_default.txt). */
static void process_name(char *name, size_t len)
{
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, name, len - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0 || !name[0]) {
        fg_strlcpy(name, "cuda-app", len);
        return;
    }
    name[n] = 0; /* the first NUL ends argv[0] */
}

static uint64_t device_total(unsigned i)
{
    return atomic_load(&fgd.mem[i].active) ? atomic_load(&fgd.mem[i].context) + atomic_load(&fgd.mem[i].used) : 0;
}

/* The state counts per board of the device table: the sum of this process's CUDA devices on it (CUDA_VISIBLE_DEVICES
 * renumbers; MIG slices share their board). */
static void publish(unsigned board)
{
    unsigned long long sum = 0;
    for (unsigned i = 0; i < fgd.devs.count; i++)
        if (fgd.board[i] == board)
            sum += device_total(i);
    if (board < FG_MAX_DEVICES)
        atomic_store_explicit(&file->used[board], sum, memory_order_relaxed);
}

void fgd_state_changed(int device)
{
    pthread_mutex_lock(&lock);
    if (!file && !unavailable) {
        char name[FG_STATE_NAME_LEN];
        fg_state_dir(state_dir, sizeof state_dir);
        process_name(name, sizeof name);
        file = fg_state_create(state_dir, (unsigned)getpid(), name, 'C');
        unavailable = !file;
        if (file)
            for (unsigned i = 0; i < fgd.devs.count; i++)
                publish(fgd.board[i]);
        else
            fg_debug("libcuda: could not publish to %s", state_dir);
    }
    if (file && device >= 0 && (unsigned)device < fgd.devs.count)
        publish(fgd.board[device]);
    pthread_mutex_unlock(&lock);
}

void fgd_busy(int device)
{
    if (device < 0 || (unsigned)device >= fgd.devs.count)
        return;
    /* Under the lock: at exit the mapping goes away under it. */
    pthread_mutex_lock(&lock);
    if (file)
        fg_state_mark_busy(file, fgd.board[device]);
    pthread_mutex_unlock(&lock);
}

/* A forked child is another process: it starts with no usage of its own, and must not write its parent's file
 * (the mapping is inherited). */
static void after_fork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    fg_state_close(file, state_dir, 0);
    file = NULL;
    unavailable = 0;
    for (unsigned i = 0; i < FG_MAX_DEVICES; i++) {
        atomic_store(&fgd.mem[i].used, 0);
        atomic_store(&fgd.mem[i].active, 0);
        if (i < fgd.devs.count) { /* its context, if it makes one, starts unloaded */
            atomic_store(&fgd.mem[i].parts, 0);
            atomic_store(&fgd.mem[i].context, fgd_context_bytes(fgd.devs.dev[i].cc_major));
        }
    }
}

__attribute__((constructor)) static void install_fork_handler(void) { pthread_atfork(NULL, NULL, after_fork_child); }

/* At exit the process leaves the shared state (its file is removed), like a process ending on a real GPU;
 * threads still allocating after this publish nothing. */
__attribute__((destructor)) static void at_exit(void)
{
    pthread_mutex_lock(&lock);
    fg_state_close(file, state_dir, 1);
    file = NULL;
    unavailable = 1;
    pthread_mutex_unlock(&lock);
}
