/* NCCL, first slice: version, error strings, unique ids, communicators and groups. Collectives are rank-local
 * and complete at once (they never hang): each rank's output is filled from its own input, and calls and bytes
 * are counted. Exchanging real inputs between ranks (what DDP's start-up needs) is not done yet. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#pragma GCC visibility push(default)
#include <nccl.h>
#pragma GCC visibility pop

#include "fgc_unsup.h"

struct ncclComm {
    int nranks, rank, device;
};

static atomic_ullong coll_calls, coll_bytes;

FGC_EXPORT ncclResult_t ncclGetVersion(int *version)
{
    if (!version)
        return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

FGC_EXPORT const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

FGC_EXPORT const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return "";
}

FGC_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id)
        return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, id->internal, sizeof id->internal) : -1;
    if (fd >= 0)
        close(fd);
    return n > 0 ? ncclSuccess : ncclSystemError;
}

static ncclResult_t init(ncclComm_t *comm, int nranks, int rank)
{
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c)
        return ncclSystemError;
    c->nranks = nranks;
    c->rank = rank;
    cudaGetDevice(&c->device);
    *comm = c;
    return ncclSuccess;
}

FGC_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    (void)id;
    return init(comm, nranks, rank);
}

FGC_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                               ncclConfig_t *config)
{
    (void)id, (void)config;
    return init(comm, nranks, rank);
}

FGC_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
    if (!comms || ndev < 1)
        return ncclInvalidArgument;
    for (int i = 0; i < ndev; i++) {
        ncclResult_t r = init(&comms[i], ndev, i);
        if (r != ncclSuccess)
            return r;
        comms[i]->device = devlist ? devlist[i] : i;
    }
    return ncclSuccess;
}

FGC_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    free(comm);
    return ncclSuccess;
}
FGC_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }
FGC_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) { return comm ? ncclSuccess : ncclInvalidArgument; }

FGC_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    if (!comm || !count)
        return ncclInvalidArgument;
    *count = comm->nranks;
    return ncclSuccess;
}

FGC_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!comm || !rank)
        return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}

FGC_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err)
{
    if (!comm || !err)
        return ncclInvalidArgument;
    *err = ncclSuccess; /* collectives complete at the call: nothing is ever pending or failed */
    return ncclSuccess;
}

FGC_EXPORT ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
FGC_EXPORT ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

static size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 1;
    }
}

static ncclResult_t count(ncclComm_t comm, size_t bytes)
{
    if (!comm)
        return ncclInvalidArgument;
    atomic_fetch_add(&coll_calls, 1);
    atomic_fetch_add(&coll_bytes, bytes);
    return ncclSuccess;
}

static void copy_if(void *dst, const void *src, size_t n)
{
    if (dst && src && dst != src && n)
        memmove(dst, src, n);
}

FGC_EXPORT ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                      ncclComm_t comm, cudaStream_t st)
{
    (void)op, (void)st;
    copy_if(r, s, n * type_size(t));
    return count(comm, n * type_size(t));
}

FGC_EXPORT ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t comm,
                                      cudaStream_t st)
{
    (void)root, (void)st;
    copy_if(r, s, n * type_size(t));
    return count(comm, n * type_size(t));
}

FGC_EXPORT ncclResult_t ncclBcast(void *buf, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st)
{
    return ncclBroadcast(buf, buf, n, t, root, comm, st);
}

FGC_EXPORT ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root,
                                   ncclComm_t comm, cudaStream_t st)
{
    (void)op, (void)st;
    if (comm && comm->rank == root)
        copy_if(r, s, n * type_size(t));
    return count(comm, n * type_size(t));
}

FGC_EXPORT ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t comm,
                                      cudaStream_t st)
{
    (void)st;
    if (!comm)
        return ncclInvalidArgument;
    size_t b = n * type_size(t);
    for (int i = 0; i < comm->nranks; i++) /* every rank's slot holds this rank's input (rank-local) */
        copy_if((char *)r + (size_t)i * b, s, b);
    return count(comm, b * (size_t)comm->nranks);
}

FGC_EXPORT ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                          ncclComm_t comm, cudaStream_t st)
{
    (void)op, (void)st;
    if (!comm)
        return ncclInvalidArgument;
    size_t b = n * type_size(t);
    copy_if(r, (const char *)s + (size_t)comm->rank * b, b);
    return count(comm, b * (size_t)comm->nranks);
}

FGC_EXPORT ncclResult_t ncclAlltoAll(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t comm,
                                     cudaStream_t st)
{
    (void)st;
    if (!comm)
        return ncclInvalidArgument;
    size_t b = n * type_size(t) * (size_t)comm->nranks;
    copy_if(r, s, b);
    return count(comm, b);
}

FGC_EXPORT ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st)
{
    (void)s, (void)peer, (void)st;
    return count(comm, n * type_size(t));
}

FGC_EXPORT ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st)
{
    (void)r, (void)peer, (void)st;
    return count(comm, n * type_size(t));
}

__attribute__((destructor)) static void write_report(void)
{
    const char *dir = getenv("FAKEGPU_REPORT_DIR");
    if (!dir || !*dir || !atomic_load(&coll_calls))
        return;
    char path[1024];
    snprintf(path, sizeof path, "%s/nccl-%d.json", dir, (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "{\"library\": \"nccl\", \"mode\": \"native\", \"pid\": %d, \"collectives\": %llu, \"bytes\": %llu}\n",
            (int)getpid(), (unsigned long long)atomic_load(&coll_calls), (unsigned long long)atomic_load(&coll_bytes));
    fclose(f);
}
