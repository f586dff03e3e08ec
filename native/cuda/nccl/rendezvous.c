/* The shared segment through which the ranks of one host exchange collective data.
 *
 * A file in /dev/shm named after the communicator's unique id: the id is made by rank 0's ncclGetUniqueId and
 * handed to the others by the program (torch.distributed through its store), exactly as NVIDIA's NCCL uses it,
 * so no extra coordination is needed. Every rank creates-or-opens it at the same size (a fresh file reads as
 * zeros, which is the initial state), publishes its pid, and once all have joined the name is unlinked: the
 * mappings live on and nothing is left behind. Layout: one cache line per rank (pid, posted and consumed round
 * counters), then one data slot of `chunk` bytes per rank.
 *
 * Waiting is a spin with growing sleeps; a wait ends when the peers answer, when a peer process no longer exists,
 * or at FAKEGPU_NCCL_TIMEOUT_S (joining: FAKEGPU_NCCL_JOIN_TIMEOUT_S). Then the communicator becomes rank-local,
 * so a collective never hangs. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fgn.h"

typedef struct {
    atomic_int pid;
    atomic_int hung; /* the rank hangs in a collective (fgn_hang) */
    atomic_ullong posted, consumed;
    char pad1[40];
} fgn_peer; /* 64 bytes: one cache line each */

struct fgn_seg {
    fgn_peer peer[1]; /* nranks of them, then the slots */
};

#define HDR_BYTES(n) (((size_t)(n) * sizeof(fgn_peer) + 4095) / 4096 * 4096)

static double env_seconds(const char *name, double dflt)
{
    const char *v = getenv(name);
    return v && *v ? atof(v) : dflt;
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void seg_path(const struct ncclComm *c, char *out, size_t size)
{
    static const char hex[] = "0123456789abcdef";
    char key[2 * FGN_KEY + 1];
    for (int i = 0; i < FGN_KEY; i++) {
        key[2 * i] = hex[c->key[i] >> 4];
        key[2 * i + 1] = hex[c->key[i] & 15];
    }
    key[2 * FGN_KEY] = 0;
    struct stat st;
    const char *dir = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0
                          ? "/dev/shm"
                          : (getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    snprintf(out, size, "%s/fakegpu-nccl-%u-%s-%d", dir, (unsigned)getuid(), key, c->nranks);
}

void fgn_go_local(struct ncclComm *c, const char *why)
{
    if (!c->local) {
        c->local = 1;
        atomic_fetch_add(&fgn_degraded, 1);
        if (c->nranks > 1)
            fg_warn("nccl: rank %d of %d: %s; collectives of this communicator are rank-local from now on", c->rank,
                    c->nranks, why);
    }
}

/* Wait until every peer's counter (posted or consumed) reaches t. 0, or -1 after fgn_go_local() or when a peer hangs
 * (c->peer_hung: the communicator stays, and the caller's device hangs). */
static int wait_all(struct ncclComm *c, size_t field, unsigned long long t, double timeout_s)
{
    long long start = now_ns(), last_check = start;
    long long deadline = start + (long long)(timeout_s * 1e9);
    unsigned sleep_ns = 0;
    for (int r = 0; r < c->nranks; r++) {
        fgn_peer *p = &c->seg->peer[r];
        atomic_ullong *ctr = (atomic_ullong *)((char *)p + field);
        while (atomic_load_explicit(ctr, memory_order_acquire) < t) {
            if (atomic_load_explicit(&p->hung, memory_order_relaxed)) {
                c->peer_hung = 1;
                return -1;
            }
            long long now = now_ns();
            if (now > deadline) {
                fgn_go_local(c, "peers did not reach the collective in time (FAKEGPU_NCCL_TIMEOUT_S)");
                return -1;
            }
            if (now - last_check > 100000000LL) { /* every 100 ms: is the peer still alive? */
                last_check = now;
                int pid = atomic_load(&p->pid);
                if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
                    fgn_go_local(c, "a peer process exited");
                    return -1;
                }
            }
            if (sleep_ns < 1000) {
                sleep_ns += 50; /* spin briefly: the peer is usually a few microseconds behind */
                sched_yield();
            } else {
                struct timespec ts = {0, sleep_ns};
                nanosleep(&ts, NULL);
                if (sleep_ns < 1000000)
                    sleep_ns *= 2;
            }
        }
    }
    return 0;
}

void fgn_join(struct ncclComm *c, const unsigned char *id)
{
    c->local = 0;
    if (c->nranks == 1) {
        c->local = 1; /* alone: the rank-local answer is the right answer */
        return;
    }
    const char *ex = getenv("FAKEGPU_NCCL_EXCHANGE");
    if (ex && strcmp(ex, "0") == 0) {
        fgn_go_local(c, "FAKEGPU_NCCL_EXCHANGE=0");
        return;
    }
    if (fgn_socket_transport()) {
        fgn_net_join(c, id);
        return;
    }
    const char *ch = getenv("FAKEGPU_NCCL_CHUNK");
    c->chunk = ch && atol(ch) >= 4096 ? (size_t)atol(ch) / 64 * 64 : 4u << 20;
    c->seg_bytes = HDR_BYTES(c->nranks) + c->chunk * (size_t)c->nranks;
    char path[512];
    seg_path(c, path, sizeof path);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)c->seg_bytes) != 0) {
        if (fd >= 0)
            close(fd);
        fgn_go_local(c, "cannot create the shared segment");
        return;
    }
    void *m = mmap(NULL, c->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        unlink(path);
        fgn_go_local(c, "cannot map the shared segment");
        return;
    }
    c->seg = m;
    atomic_store(&c->seg->peer[c->rank].pid, (int)getpid());
    long long deadline = now_ns() + (long long)(env_seconds("FAKEGPU_NCCL_JOIN_TIMEOUT_S", 30) * 1e9);
    for (int r = 0; r < c->nranks; r++) {
        unsigned sleep_us = 10;
        while (atomic_load(&c->seg->peer[r].pid) == 0) {
            if (now_ns() > deadline) {
                unlink(path);
                fgn_go_local(c, "peers did not join (ranks on another host or container?)");
                return;
            }
            usleep(sleep_us);
            if (sleep_us < 10000)
                sleep_us *= 2;
        }
    }
    if (c->rank == 0)
        unlink(path); /* everyone has it mapped */
}

void fgn_leave(struct ncclComm *c)
{
    fgn_net_leave(c);
    if (c->seg)
        munmap(c->seg, c->seg_bytes);
    c->seg = NULL;
}

void *fgn_slot(struct ncclComm *c, int rank)
{
    if (c->socks)
        return fgn_net_slot(c, rank);
    return (char *)c->seg + HDR_BYTES(c->nranks) + (size_t)rank * c->chunk;
}

void fgn_hang(struct ncclComm *c)
{
    if (c->socks)
        fgn_net_hang(c);
    if (c->seg)
        atomic_store(&c->seg->peer[c->rank].hung, 1);
}

int fgn_round_begin(struct ncclComm *c)
{
    if (c->local || (!c->seg && !c->socks) || c->peer_hung)
        return -1;
    if (c->socks)
        return 0; /* each connection delivers the rounds in order: a slot copy is never read ahead */
    /* My slot may be rewritten once every rank has read the previous round. */
    return wait_all(c, offsetof(fgn_peer, consumed), c->round, env_seconds("FAKEGPU_NCCL_TIMEOUT_S", 300));
}

int fgn_round_post(struct ncclComm *c, size_t bytes)
{
    if (c->socks)
        return fgn_net_post(c, bytes);
    unsigned long long t = c->round + 1;
    atomic_store_explicit(&c->seg->peer[c->rank].posted, t, memory_order_release);
    return wait_all(c, offsetof(fgn_peer, posted), t, env_seconds("FAKEGPU_NCCL_TIMEOUT_S", 300));
}

void fgn_round_end(struct ncclComm *c)
{
    c->round++;
    if (c->socks)
        return;
    atomic_store_explicit(&c->seg->peer[c->rank].consumed, c->round, memory_order_release);
}
