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

#include "fg_faults.h"
#include "fg_state.h"
#include "fgc_image.h"
#include "fgd.h"

/* The lock orders the stores: each computes its device's total inside it, so the last store is the latest. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fg_state_file *file;
static int unavailable; /* the folder could not take the file, or the process is exiting */
static char state_dir[512];
static fg_busy_track tracks[FG_MAX_DEVICES]; /* per board: this process's last work there */

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
 * renumbers; MIG slices share their board), and the MIG instance it is in when the device is a slice. */
static void publish(unsigned board)
{
    unsigned long long sum = 0;
    unsigned instance = 0;
    for (unsigned i = 0; i < fgd.devs.count; i++)
        if (fgd.board[i] == board) {
            sum += device_total(i);
            if (fgd.devs.dev[i].mig_slice && device_total(i))
                instance = (unsigned)fgd.devs.dev[i].mig_slice;
        }
    if (board < FG_MAX_DEVICES) {
        atomic_store_explicit(&file->instance[board], (uint8_t)instance, memory_order_relaxed);
        atomic_store_explicit(&file->used[board], sum, memory_order_relaxed);
    }
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

void fgd_work(int device, int compute, long long t0, long long t1, long long dur)
{
    if (device < 0 || (unsigned)device >= fgd.devs.count)
        return;
    unsigned board = fgd.board[device];
    /* Under the lock: at exit the mapping goes away under it, and the board's track is one writer's. */
    pthread_mutex_lock(&lock);
    if (file && board < FG_MAX_DEVICES)
        fg_state_work(file, &tracks[board], board, compute ? FG_WORK_COMPUTE : FG_WORK_MEMORY, t0, t1, dur);
    pthread_mutex_unlock(&lock);
}

void fgd_synced(int device)
{
    if (device < 0 || (unsigned)device >= fgd.devs.count)
        return;
    unsigned board = fgd.board[device];
    long long now = fgd_now_ns();
    pthread_mutex_lock(&lock);
    if (file && board < FG_MAX_DEVICES)
        fg_state_synced(file, &tracks[board], board, now);
    pthread_mutex_unlock(&lock);
}

/* The other processes' files, mapped once and rescanned when the folder changes (a process starts using a GPU or
 * goes) or every READ_TTL_NS (NVML's default FAKEGPU_STATE_TTL_MS), which is also how soon a killed process's
 * memory is given back to the others. */
#define READ_TTL_NS 50000000LL
/* How often an allocation looks at the folder at all (a stat): a process that starts using the GPU is seen within
 * this; what the processes already seen hold is read at every call. It keeps a cudaMalloc/cudaFree pair free of
 * system calls but once a millisecond (bench/bench_cuda.py). */
#define LOOK_NS 1000000LL
static pthread_mutex_t reader_lock = PTHREAD_MUTEX_INITIALIZER;
static fg_state_reader reader;
static int reader_open;
static long long looked_ns;
static unsigned self_pid;

unsigned long long fgd_others_used(int device)
{
    /* A MIG instance has memory of its own: it is charged only what the processes in the same instance hold. */
    if (device < 0 || (unsigned)device >= fgd.devs.count)
        return 0;
    int instance = fgd.devs.dev[device].mig_slice ? fgd.devs.dev[device].mig_slice : -1;
    pthread_mutex_lock(&reader_lock);
    if (!reader_open) {
        char dir[512];
        fg_state_reader_open(&reader, fg_state_dir(dir, sizeof dir));
        reader_open = 1;
        self_pid = reader.skip_pid = (unsigned)getpid();
    }
    long long now = fg_monotonic_ns();
    int look = !looked_ns || now - looked_ns >= LOOK_NS;
    if (look)
        looked_ns = now;
    unsigned long long used = fg_state_reader_used(&reader, READ_TTL_NS, fgd.board[device], instance, self_pid, look);
    pthread_mutex_unlock(&reader_lock);
    if (instance > 0)
        return used; /* a fault plan's pressure takes the board's memory, not a slice's */
    return used + fg_fault_pressure(fgd.board[device]); /* memory a fault plan has taken outside the run */
}

/* FakeGPU's cuBLAS sizes its stand-in's grid to the GEMM: a block per FGC_STANDIN_BLOCK_FLOPS (common/fgc_image.h).
 * The time is that many FLOPs at the board's achieved GEMM rate; any other kernel's is unknown: FG_STATE_KERNEL_NS. */
void fgd_launch_busy(int device, const char *kernel, unsigned long long blocks)
{
    long long now = fgd_now_ns(), dur = FG_STATE_KERNEL_NS;
    int compute = fgc_standin_compute(kernel);
    if (compute && strncmp(kernel, "cublas", 6) == 0 && device >= 0 && (unsigned)device < fgd.devs.count) {
        double tflops = fgd.devs.dev[device].load.gemm_tflops;
        if (tflops > 0)
            dur = (long long)((double)blocks * FGC_STANDIN_BLOCK_FLOPS / (tflops * 1e3)); /* TFLOPS = 1e3 FLOP/ns */
    }
    if (device >= 0 && (unsigned)device < fgd.devs.count) { /* a throttled GPU takes boost/clock times as long */
        fg_fault_throttling t;
        unsigned boost = fgd.devs.dev[device].clock_boost_mhz;
        fg_fault_throttle_of(fgd.board[device], boost, &t);
        if (t.mhz && t.mhz < boost)
            dur = dur * (long long)boost / (long long)t.mhz;
    }
    fgd_work(device, compute, now, now, dur);
}

/* A device-to-device copy reads and writes its bytes at the board's achieved copy rate (GB/s = bytes/ns). */
long long fgd_copy_ns(int device, unsigned long long bytes)
{
    if (device < 0 || (unsigned)device >= fgd.devs.count || fgd.devs.dev[device].load.copy_gb_s <= 0)
        return 0;
    return (long long)(2.0 * (double)bytes / fgd.devs.dev[device].load.copy_gb_s);
}

/* A forked child is another process: it starts with no usage of its own, and must not write its parent's file
 * (the mapping is inherited). */
static void after_fork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    pthread_mutex_init(&reader_lock, NULL); /* the reader's mappings are inherited and stay valid */
    self_pid = (unsigned)getpid();
    looked_ns = 0;
    fg_state_reader_invalidate(&reader); /* its parent's file is another process's now */
    reader.skip_pid = self_pid;
    fg_state_close(file, state_dir, 0);
    file = NULL;
    unavailable = 0;
    memset(tracks, 0, sizeof tracks);
    for (unsigned i = 0; i < FG_MAX_DEVICES; i++) {
        atomic_store(&fgd.mem[i].used, 0);
        atomic_store(&fgd.mem[i].active, 0);
        if (i < fgd.devs.count) { /* its context, if it makes one, starts unloaded */
            atomic_store(&fgd.mem[i].parts, 0);
            atomic_store(&fgd.mem[i].context, fgd_context_bytes(&fgd.devs.dev[i]));
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
