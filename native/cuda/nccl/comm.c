/* NCCL communicators: unique ids, initialisation (joining the shared segment, rendezvous.c, or the socket
 * transport, net.c), split, groups, buffer registration, version and errors. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop

#include "fgn.h"

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
    return comm ? comm->last_error : "";
}

/* 128 random bytes: the first FGN_KEY name the communicator's shared segment on this host, and are the secret
 * its ranks show each other over sockets. With the socket transport, the bytes after them hold the address of
 * the bootstrap root this call starts (net.c), as NCCL's id holds its root's. */
FGC_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id)
        return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, id->internal, sizeof id->internal) : -1;
    if (fd >= 0)
        close(fd);
    if (n != (ssize_t)sizeof id->internal)
        return ncclSystemError;
    if (fgn_socket_transport() && fgn_net_root((unsigned char *)id->internal, sizeof id->internal) != 0) {
        fg_warn("nccl: cannot start the bootstrap root (no usable interface? NCCL_SOCKET_IFNAME); this "
                "communicator will be rank-local");
        memset(id->internal + FGN_KEY, 0, sizeof id->internal - FGN_KEY); /* no root: joiners go rank-local */
    }
    return ncclSuccess;
}

/* A communicator joined through its unique id (`id`), or, for a split over sockets, through the address table
 * its parent all-gathered (`table` of nranks, and this rank's listening socket `lfd`). */
static ncclResult_t init_with(ncclComm_t *comm, int nranks, int rank, const unsigned char *key,
                              const unsigned char *id, const struct fgn_addr *table, int lfd)
{
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    struct ncclComm *c = calloc(1, sizeof *c);
    const void **ins = calloc((size_t)nranks, sizeof *ins);
    if (!c || !ins) {
        free(c);
        free(ins);
        return ncclSystemError;
    }
    c->nranks = nranks;
    c->rank = rank;
    c->ins = ins;
    memcpy(c->key, key, FGN_KEY);
    /* The driver's current context, not a runtime's current device: libnccl.so.2 serves libcudart.so.12 and
     * .13 alike, and each runtime keeps its own, while both make the device's context current in libcuda. */
    CUdevice dev = 0;
    c->device = cuCtxGetDevice(&dev) == CUDA_SUCCESS ? dev : 0;
    /* blocks until the peers join, like NCCL's init; never fails: at worst rank-local */
    if (!table && !id) {
        c->local = 1; /* a split whose parent could not exchange: nobody to meet */
    } else if (table) {
        if (nranks == 1) {
            c->local = 1;
            close(lfd);
        } else {
            fgn_net_mesh(c, table, lfd);
        }
    } else {
        fgn_join(c, id);
    }
    *comm = c;
    return ncclSuccess;
}

static ncclResult_t init(ncclComm_t *comm, int nranks, int rank, const unsigned char *id)
{
    return init_with(comm, nranks, rank, id, id, NULL, -1);
}

FGC_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    return init(comm, nranks, rank, (const unsigned char *)id.internal);
}

FGC_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                               ncclConfig_t *config)
{
    (void)config; /* blocking or not: init completes before returning, so ncclInProgress is never seen */
    return init(comm, nranks, rank, (const unsigned char *)id.internal);
}

FGC_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *comm, int nranks, int rank, int nId,
                                                 ncclUniqueId *ids, ncclConfig_t *config)
{
    (void)config; /* several ids spread NCCL's bootstrap over roots; the first one names the communicator */
    if (nId < 1 || !ids)
        return ncclInvalidArgument;
    return init(comm, nranks, rank, (const unsigned char *)ids[0].internal);
}

FGC_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
    if (!comms || ndev < 1)
        return ncclInvalidArgument;
    /* One process drives every rank: there is no peer process to exchange with, so these are rank-local. */
    unsigned char key[FGN_KEY] = {0};
    for (int i = 0; i < ndev; i++) {
        struct ncclComm *c = calloc(1, sizeof *c);
        if (!c)
            return ncclSystemError;
        c->nranks = ndev;
        c->rank = i;
        c->local = 1;
        c->device = devlist ? devlist[i] : i;
        memcpy(c->key, key, FGN_KEY);
        comms[i] = c;
    }
    return ncclSuccess;
}

FGC_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (comm) {
        fgn_leave(comm);
        free(comm->ins);
        free(comm);
    }
    return ncclSuccess;
}
FGC_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }
FGC_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) { return comm ? ncclSuccess : ncclInvalidArgument; }

/* Split: every rank of the parent calls it (NCCL's rule). The (color, key) pairs are all-gathered over the
 * parent; the new communicator's id is derived from the parent's, the split's sequence number and the color,
 * so the ranks of one color meet in the same segment without another id exchange. */
/* What each rank of a split's parent tells the others: its color and key, and over sockets where its child
 * communicator listens. */
struct split_entry {
    int color, key;
    struct fgn_addr addr;
};

FGC_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
    (void)config;
    if (!comm || !newcomm)
        return ncclInvalidArgument;
    struct split_entry mine = {color, key, {0}};
    int lfd = -1;
    if (comm->socks && !comm->local && color != NCCL_SPLIT_NOCOLOR && (lfd = fgn_listen(&mine.addr)) < 0)
        fg_warn("nccl: split: cannot listen for the new communicator's peers; it will be rank-local");
    struct split_entry *all = calloc((size_t)comm->nranks, sizeof *all);
    if (!all) {
        if (lfd >= 0)
            close(lfd);
        return ncclSystemError;
    }
    int exchanged = fgn_allgather_bytes(comm, &mine, all, sizeof mine);
    unsigned long long seq = ++comm->splits;
    *newcomm = NULL;
    if (color == NCCL_SPLIT_NOCOLOR) {
        free(all);
        return ncclSuccess;
    }
    int n = 0, rank = 0;
    for (int i = 0; i < comm->nranks; i++) {
        int ci = exchanged ? all[i].color : (i == comm->rank ? color : NCCL_SPLIT_NOCOLOR);
        int ki = all[i].key;
        if (ci != color)
            continue;
        n++;
        if (ki < key || (ki == key && i < comm->rank)) /* order by key, then by parent rank */
            rank++;
    }
    /* Over sockets: the child's table, its ranks in the same order. */
    struct fgn_addr *table = NULL;
    if (lfd >= 0 && exchanged) {
        table = calloc((size_t)n, sizeof *table);
        for (int i = 0; table && i < comm->nranks; i++) {
            if (all[i].color != color)
                continue;
            int at = 0;
            for (int j = 0; j < comm->nranks; j++)
                at += all[j].color == color &&
                      (all[j].key < all[i].key || (all[j].key == all[i].key && j < i));
            table[at] = all[i].addr;
        }
    }
    free(all);
    uint64_t h = 1469598103934665603ULL; /* FNV-1a over the parent's key, the split's number and the color */
    unsigned char salt[12];
    memcpy(salt, &seq, 8);
    memcpy(salt + 8, &color, 4);
    for (int i = 0; i < FGN_KEY + 12; i++)
        h = (h ^ (i < FGN_KEY ? comm->key[i] : salt[i - FGN_KEY])) * 1099511628211ULL;
    unsigned char k[FGN_KEY];
    for (int i = 0; i < FGN_KEY; i += 8) { /* splitmix64 spreads the hash over the key */
        uint64_t z = (h += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        memcpy(k + i, &z, 8);
    }
    ncclResult_t r;
    if (!exchanged) {
        if (lfd >= 0)
            close(lfd);
        r = init_with(newcomm, n, rank, k, NULL, NULL, -1);
    } else if (table) {
        r = init_with(newcomm, n, rank, k, NULL, table, lfd);
    } else {
        if (lfd >= 0)
            close(lfd);
        /* Over sockets without a table the child has no way to its peers: rank-local (init's id carries no root). */
        unsigned char id[NCCL_UNIQUE_ID_BYTES] = {0};
        memcpy(id, k, FGN_KEY);
        r = init(newcomm, n, rank, id);
        if (r == ncclSuccess && comm->socks)
            fgn_go_local(*newcomm, "the split's parent could not exchange the new communicator's addresses");
    }
    free(table);
    return r;
}

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
    *err = comm->async_error; /* collectives complete at the call: only an injected error is ever pending */
    return ncclSuccess;
}

/* Groups: every call completes when made, so a group has nothing left to launch at its end. */
FGC_EXPORT ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
FGC_EXPORT ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

/* Buffer registration (torch registers its allocator's segments): nothing to pin or map; the handle only has to
 * be non-NULL and given back. */
FGC_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle)
{
    (void)size;
    if (!comm || !handle)
        return ncclInvalidArgument;
    *handle = buff ? buff : (void *)comm;
    return ncclSuccess;
}

FGC_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
    return comm && handle ? ncclSuccess : ncclInvalidArgument;
}

/* NCCL's own allocator for registration-friendly buffers: device memory from our driver. */
FGC_EXPORT ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
    if (!ptr)
        return ncclInvalidArgument;
    CUdeviceptr p = 0;
    CUresult rc = cuMemAlloc_v2(&p, size);
    *ptr = rc == CUDA_SUCCESS ? (void *)(uintptr_t)p : NULL;
    return rc == CUDA_SUCCESS ? ncclSuccess : ncclUnhandledCudaError;
}

FGC_EXPORT ncclResult_t ncclMemFree(void *ptr)
{
    return cuMemFree_v2((CUdeviceptr)(uintptr_t)ptr) == CUDA_SUCCESS ? ncclSuccess : ncclUnhandledCudaError;
}
