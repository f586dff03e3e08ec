/* Collectives. Each completes at the call. With peers on this host (rendezvous.c) the data really moves: the
 * message is cut into rounds of at most one slot (FAKEGPU_NCCL_CHUNK, default 4 MiB per rank); in each round every
 * rank writes its part to its slot and reads what it needs from the others'. Without peers (other hosts, a
 * timeout, a dead peer, ncclCommInitAll) a collective is rank-local: every output from this rank's own input.
 * In accounting memory mode (FAKEGPU_MEMORY=accounting) device bytes are not kept, so nothing is moved or
 * written; calls and bytes are counted in every case.
 *
 * The driver keeps which device memory kernels may have written (driver/written.c: a host read of it warns, as
 * its values are not a GPU's). A collective's output is computed from real inputs, so it is as host-known as they
 * are: each output region first receives a device-to-device copy of this rank's corresponding input
 * (cuMemcpyDtoD, which carries that account along), then the result. Other ranks' inputs are taken to be like
 * this rank's (every rank runs the same program); a broadcast's non-root receive buffer keeps what it had. */
#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fg_faults.h"
#include "fgc_env.h"
#include "fgc_private.h"
#include "fgc_report.h"
#include "fgn.h"

atomic_ullong fgn_exchanged, fgn_local, fgn_degraded;
static atomic_ullong calls[FGN_NCOLL], bytes[FGN_NCOLL];
static const char *const coll_name[FGN_NCOLL] = {"all_reduce", "broadcast", "reduce",   "all_gather",
                                                 "reduce_scatter", "all_to_all", "send", "recv"};

/* The global rank a fault plan's `rank` names: torchrun's $RANK, else the rank in this communicator. */
static int global_rank(const struct ncclComm *c)
{
    static int env_rank = -2; /* -2: not read yet; -1: no usable $RANK; racing readers compute the same */
    int r = __atomic_load_n(&env_rank, __ATOMIC_RELAXED);
    if (r == -2) {
        const char *v = getenv("RANK");
        char *end = NULL;
        long n = v && *v ? strtol(v, &end, 10) : -1;
        r = end && !*end && n >= 0 && n < 1 << 30 ? (int)n : -1;
        __atomic_store_n(&env_rank, r, __ATOMIC_RELAXED);
    }
    return r >= 0 ? r : c->rank;
}

/* An operation's start as the run's fault board sees it (through the driver, which counts this process's
 * operations and fires faults waiting for the Nth). 0: run it. Otherwise *rc is its result and it does not run:
 * ncclRemoteError from an injected error (from then on, as a real communicator stays broken, and
 * ncclCommGetAsyncError says so too), or ncclSuccess from a hang: the call returns, as a real one returns once
 * its kernel is queued, and the device hangs, so nothing recorded after it ever completes (driver/stream.c). */
static int faulted(fgn_coll k, size_t b, ncclComm_t c, ncclResult_t *rc)
{
    if (c->async_error != ncclSuccess) {
        *rc = c->async_error;
        return 1;
    }
    unsigned code = fgc_nccl_operation(global_rank(c), c->device);
    if (!code && !c->peer_hung)
        return 0;
    atomic_fetch_add_explicit(&calls[k], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&bytes[k], b, memory_order_relaxed);
    atomic_fetch_add_explicit(&fgn_local, 1, memory_order_relaxed);
    if (code == FG_FAULT_NCCL_REMOTE_ERROR) {
        c->async_error = *rc = ncclRemoteError;
        snprintf(c->last_error, sizeof c->last_error,
                 "FakeGPU fault plan: rank %d's connection to its peers failed (nccl: error)", global_rank(c));
        return 1;
    }
    fgn_hang(c); /* a hang here, or a peer's seen before: the peers waiting for this rank hang with it */
    fgc_device_hung(c->device);
    *rc = ncclSuccess;
    return 1;
}

static ncclResult_t done(fgn_coll k, size_t b, int exchanged)
{
    atomic_fetch_add_explicit(&calls[k], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&bytes[k], b, memory_order_relaxed);
    atomic_fetch_add_explicit(exchanged ? &fgn_exchanged : &fgn_local, 1, memory_order_relaxed);
    return ncclSuccess;
}

/* The end of an operation during which a peer was seen to hang (fgn_round_*): this rank hangs with it. */
static ncclResult_t finished(ncclComm_t c, fgn_coll k, size_t b, int exchanged)
{
    if (c->peer_hung) {
        fgn_hang(c);
        fgc_device_hung(c->device);
    }
    return done(k, b, exchanged && !c->peer_hung);
}

/* The communicator as every rank of it names it (its unique id's key, the same on each rank; the handle is not):
 * how the timeline matches one collective across the ranks' logs. 0 is kept for "not recorded". */
static uint32_t comm_tag(ncclComm_t c)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (int i = 0; i < FGN_KEY; i++)
        h = (h ^ c->key[i]) * 16777619u;
    return h ? h : 1;
}

/* The operation in the timeline log (common/fgc_timeline.h): `b` its bytes as the process report counts them, on
 * the program's stream, for `fakegpu run --timeline` to price with the topology model. */
static ncclResult_t logged(ncclResult_t rc, fgn_coll k, ncclComm_t c, cudaStream_t st, size_t count,
                           ncclDataType_t t, int op, size_t b, const struct timespec t0[2])
{
    if (rc == ncclSuccess && c) {
        /* The CPU time the call took, waiting for the peers included (spins, then sleeps): what the timeline takes
         * off the host's CPU clock after the call when it plays the ranks together and models that wait itself. */
        struct timespec cpu;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
        long long spent = (long long)(cpu.tv_sec - t0[1].tv_sec) * 1000000000LL + (cpu.tv_nsec - t0[1].tv_nsec);
        fgc_tl_record r = {.kind = FGC_TL_COLL, .cpu_dur = spent < 1 ? 1u : spent > 0xffffffffLL ? 0xffffffffu
                                                                                                : (uint32_t)spent, .sub = (uint8_t)k, .device = (uint16_t)c->device,
                           .t0 = (int64_t)t0[0].tv_sec * 1000000000LL + t0[0].tv_nsec,
                           .cpu0 = (int64_t)t0[1].tv_sec * 1000000000LL + t0[1].tv_nsec,
                           .stream = (uint64_t)(uintptr_t)st,
                           .a = b, .b = count, .c = (uint64_t)(uint32_t)c->nranks | (uint64_t)(uint32_t)c->rank << 32,
                           .d = (uint64_t)(uint32_t)t | (uint64_t)(uint32_t)(op & 0xffff) << 16 |
                                (uint64_t)comm_tag(c) << 32};
        fgc_timeline(&r, NULL);
    }
    return rc;
}

/* The operation's start on the timeline log's two clocks (common/fgc_timeline.h). */
#define STARTED(t0)                                                                                               \
    struct timespec t0[2];                                                                                        \
    clock_gettime(CLOCK_MONOTONIC, &t0[0]);                                                                       \
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0[1])

/* Output region dst takes the account of this rank's input src (see the file comment); the bytes it copies are
 * overwritten by the result. */
static void like_input(void *dst, const void *src, size_t n)
{
    if (dst && src && dst != src && n)
        cuMemcpyDtoD_v2((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n);
}

static void copy_if(void *dst, const void *src, size_t n)
{
    if (dst && src && dst != src && n)
        memmove(dst, src, n);
}

/* Move data in this call? Not when device bytes are not kept, nor without reachable peers. */
static int exchange(const struct ncclComm *c) { return fgn_connected(c) && !fgc_memory_accounting(); }

#define CH(p, off) ((char *)(p) + (off))
#define CCH(p, off) ((const char *)(p) + (off))
#define MIN(a, b) ((a) < (b) ? (a) : (b))

int fgn_allgather_bytes(struct ncclComm *c, const void *s, void *r, size_t b)
{
    size_t off = 0;
    for (; fgn_connected(c) && off < b; off += c->chunk) {
        size_t n = MIN(c->chunk, b - off);
        if (fgn_round_begin(c))
            break;
        memcpy(fgn_slot(c, c->rank), CCH(s, off), n);
        if (fgn_round_post(c, n))
            break;
        for (int i = 0; i < c->nranks; i++)
            memcpy(CH(r, (size_t)i * b + off), fgn_slot(c, i), n);
        fgn_round_end(c);
    }
    if (off >= b && fgn_connected(c))
        return 1;
    for (int i = 0; i < c->nranks; i++) /* the rest, rank-locally */
        copy_if(CH(r, (size_t)i * b + off), CCH(s, off), b - MIN(off, b));
    return 0;
}

/* All-reduce, or reduce to `root` (root < 0: every rank gets the result). */
static ncclResult_t reduce(fgn_coll k, const void *s, void *r, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           int root, ncclComm_t c)
{
    size_t ts = fgn_type_size(t);
    if (!c || !ts)
        return ncclInvalidArgument;
    ncclResult_t rc;
    if (faulted(k, count * ts, c, &rc))
        return rc;
    int out = root < 0 || c->rank == root, moved = exchange(c);
    if (out)
        like_input(r, s, count * ts);
    size_t per = moved ? c->chunk / ts : 0, off = 0;
    for (; moved && off < count; off += per) {
        size_t n = MIN(per, count - off);
        if (fgn_round_begin(c))
            break;
        memcpy(fgn_slot(c, c->rank), CCH(s, off * ts), n * ts);
        if (fgn_round_post(c, n * ts))
            break;
        for (int i = 0; i < c->nranks; i++)
            c->ins[i] = fgn_slot(c, i);
        if (out && fgn_reduce(CH(r, off * ts), c->ins, c->nranks, n, t, op) != 0) {
            fgc_refuse("nccl", "reduction of this type/op (fp8, unknown op): rank-local result", ncclInvalidUsage);
            copy_if(CH(r, off * ts), CCH(s, off * ts), n * ts);
        }
        fgn_round_end(c);
    }
    if (off < count && out && !fgc_memory_accounting())
        copy_if(CH(r, off * ts), CCH(s, off * ts), (count - off) * ts);
    return finished(c, k, count * ts, moved && off >= count);
}

FGC_EXPORT ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                      ncclComm_t comm, cudaStream_t st)
{
    STARTED(t0);
    return logged(reduce(FGN_ALLREDUCE, s, r, n, t, op, -1, comm), FGN_ALLREDUCE, comm, st, n, t, op,
                  n * fgn_type_size(t), t0);
}

FGC_EXPORT ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root,
                                   ncclComm_t comm, cudaStream_t st)
{
    STARTED(t0);
    if (comm && (root < 0 || root >= comm->nranks))
        return ncclInvalidArgument;
    return logged(reduce(FGN_REDUCE, s, r, n, t, op, root, comm), FGN_REDUCE, comm, st, n, t, op,
                  n * fgn_type_size(t), t0);
}

FGC_EXPORT ncclResult_t ncclBroadcast(const void *s, void *r, size_t count, ncclDataType_t t, int root,
                                      ncclComm_t c, cudaStream_t st)
{
    STARTED(t0);
    size_t ts = fgn_type_size(t), b = count * ts, off = 0;
    if (!c || !ts || root < 0 || root >= c->nranks)
        return ncclInvalidArgument;
    ncclResult_t rc;
    if (faulted(FGN_BROADCAST, b, c, &rc))
        return rc;
    int moved = exchange(c), me = c->rank == root;
    if (me)
        like_input(r, s, b);
    for (; moved && off < b; off += c->chunk) {
        size_t n = MIN(c->chunk, b - off);
        if (fgn_round_begin(c))
            break;
        if (me)
            memcpy(fgn_slot(c, root), CCH(s, off), n);
        if (fgn_round_post(c, me ? n : 0)) /* only the root's slot is read */
            break;
        if (me)
            copy_if(CH(r, off), CCH(s, off), n);
        else
            memcpy(CH(r, off), fgn_slot(c, root), n);
        fgn_round_end(c);
    }
    if (off < b && me && !fgc_memory_accounting()) /* a non-root's send buffer means nothing: leave r */
        copy_if(CH(r, off), CCH(s, off), b - off);
    return logged(finished(c, FGN_BROADCAST, b, moved && off >= b), FGN_BROADCAST, c, st, count, t, 0, b, t0);
}

FGC_EXPORT ncclResult_t ncclBcast(void *buf, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st)
{
    return ncclBroadcast(buf, buf, n, t, root, comm, st);
}

FGC_EXPORT ncclResult_t ncclAllGather(const void *s, void *r, size_t count, ncclDataType_t t, ncclComm_t c,
                                      cudaStream_t st)
{
    STARTED(t0);
    size_t ts = fgn_type_size(t), b = count * ts;
    if (!c || !ts)
        return ncclInvalidArgument;
    ncclResult_t rc;
    if (faulted(FGN_ALLGATHER, b * (size_t)c->nranks, c, &rc))
        return rc;
    for (int i = 0; i < c->nranks; i++) /* rank-local, that is also the result: this rank's input everywhere */
        like_input(CH(r, (size_t)i * b), s, b);
    int moved = exchange(c) ? fgn_allgather_bytes(c, s, r, b) : 0;
    return logged(finished(c, FGN_ALLGATHER, b * (size_t)c->nranks, moved), FGN_ALLGATHER, c, st, count, t, 0,
                  b * (size_t)c->nranks, t0);
}

/* Reduce-scatter and all-to-all share a shape: the send buffer is nranks blocks of `count`; in each round a
 * rank posts the same span of every block, then takes span `rank` of every peer's post. */
static ncclResult_t scatter(fgn_coll k, const void *s, void *r, size_t count, ncclDataType_t t, ncclRedOp_t op,
                            ncclComm_t c)
{
    size_t ts = fgn_type_size(t);
    if (!c || !ts)
        return ncclInvalidArgument;
    ncclResult_t rc;
    if (faulted(k, count * ts * (size_t)c->nranks, c, &rc))
        return rc;
    size_t nr = (size_t)c->nranks, per = c->chunk / (ts * nr), off = 0;
    if (k == FGN_ALLTOALL)
        like_input(r, s, count * ts * nr);
    else
        like_input(r, CCH(s, (size_t)c->rank * count * ts), count * ts);
    int moved = exchange(c) && per > 0;
    for (; moved && off < count; off += per) {
        size_t n = MIN(per, count - off);
        if (fgn_round_begin(c))
            break;
        for (size_t j = 0; j < nr; j++)
            memcpy(CH(fgn_slot(c, c->rank), j * n * ts), CCH(s, (j * count + off) * ts), n * ts);
        if (fgn_round_post(c, nr * n * ts))
            break;
        for (size_t i = 0; i < nr; i++)
            c->ins[i] = CH(fgn_slot(c, (int)i), (size_t)c->rank * n * ts);
        if (k == FGN_ALLTOALL) {
            for (size_t i = 0; i < nr; i++)
                memcpy(CH(r, (i * count + off) * ts), c->ins[i], n * ts);
        } else if (fgn_reduce(CH(r, off * ts), c->ins, c->nranks, n, t, op) != 0) {
            fgc_refuse("nccl", "reduction of this type/op (fp8, unknown op): rank-local result", ncclInvalidUsage);
            memcpy(CH(r, off * ts), c->ins[c->rank], n * ts);
        }
        fgn_round_end(c);
    }
    if (off < count && !fgc_memory_accounting()) {
        if (k == FGN_ALLTOALL)
            for (size_t i = 0; i < nr; i++)
                copy_if(CH(r, (i * count + off) * ts), CCH(s, (i * count + off) * ts), (count - off) * ts);
        else
            copy_if(CH(r, off * ts), CCH(s, ((size_t)c->rank * count + off) * ts), (count - off) * ts);
    }
    return finished(c, k, count * ts * nr, moved && off >= count);
}

FGC_EXPORT ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                          ncclComm_t comm, cudaStream_t st)
{
    STARTED(t0);
    return logged(scatter(FGN_REDUCESCATTER, s, r, n, t, op, comm), FGN_REDUCESCATTER, comm, st, n, t, op,
                  comm ? n * fgn_type_size(t) * (size_t)comm->nranks : 0, t0);
}

FGC_EXPORT ncclResult_t ncclAlltoAll(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t comm,
                                     cudaStream_t st)
{
    STARTED(t0);
    return logged(scatter(FGN_ALLTOALL, s, r, n, t, ncclSum, comm), FGN_ALLTOALL, comm, st, n, t, 0,
                  comm ? n * fgn_type_size(t) * (size_t)comm->nranks : 0, t0);
}

/* Point-to-point: rank-local and counted (matching a send with its receive would need a queue per pair). */
FGC_EXPORT ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st)
{
    (void)s, (void)peer;
    STARTED(t0);
    ncclResult_t rc;
    if (!comm)
        return ncclInvalidArgument;
    rc = faulted(FGN_SEND, n * fgn_type_size(t), comm, &rc) ? rc : done(FGN_SEND, n * fgn_type_size(t), 0);
    return logged(rc, FGN_SEND, comm, st, n, t, 0, n * fgn_type_size(t), t0);
}

FGC_EXPORT ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st)
{
    (void)r, (void)peer;
    STARTED(t0);
    ncclResult_t rc;
    if (!comm)
        return ncclInvalidArgument;
    rc = faulted(FGN_RECV, n * fgn_type_size(t), comm, &rc) ? rc : done(FGN_RECV, n * fgn_type_size(t), 0);
    return logged(rc, FGN_RECV, comm, st, n, t, 0, n * fgn_type_size(t), t0);
}

/* The NCCL part of the process report. */
static void fgn_report(FILE *f)
{
    fprintf(f, "{\"exchanged_calls\": %llu, \"rank_local_calls\": %llu, \"degraded_communicators\": %llu, \"ops\": {",
            (unsigned long long)atomic_load(&fgn_exchanged), (unsigned long long)atomic_load(&fgn_local),
            (unsigned long long)atomic_load(&fgn_degraded));
    const char *sep = "";
    unsigned long long total_calls = 0, total_bytes = 0;
    for (int k = 0; k < FGN_NCOLL; k++) {
        unsigned long long n = atomic_load(&calls[k]), b = atomic_load(&bytes[k]);
        total_calls += n;
        total_bytes += b;
        if (n) {
            fprintf(f, "%s\"%s\": {\"calls\": %llu, \"bytes\": %llu}", sep, coll_name[k], n, b);
            sep = ", ";
        }
    }
    fprintf(f, "}, \"calls\": %llu, \"bytes\": %llu}", total_calls, total_bytes);
}

__attribute__((destructor)) static void write_report(void)
{
    FILE *f = fgc_part_open("collectives");
    if (!f)
        return;
    fgn_report(f);
    fgc_part_close(f, "collectives");
}
