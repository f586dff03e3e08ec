/* Internals of FakeGPU's libnccl.so.2.
 *
 * Collectives never hang and complete at the call (there is no GPU stream to defer to). When the ranks of a
 * communicator are processes of one host (one /dev/shm), they move real data: each rank's input goes through a
 * small shared-memory segment keyed by the communicator's unique id (the id torch.distributed exchanges through
 * its own store), so an all-gather returns every rank's input and an all-reduce their reduction, as DDP's start-up
 * needs (DESIGN.md: even no-op collectives must fill outputs with each rank's real input). Ranks on other hosts or
 * containers cannot share that segment: their data goes over TCP (net.c), as NCCL's socket transport carries it.
 * A communicator whose peers do not arrive in time or die is rank-local (each output from this rank's own input).
 * Point-to-point send/recv are rank-local and counted only. */
#ifndef FGN_H
#define FGN_H

#pragma GCC visibility push(default)
#include <nccl.h>
#pragma GCC visibility pop

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fg_log.h"
#include "fgc_unsup.h"

#define FGN_KEY 16 /* bytes of the unique id that name the shared segment (the id is 128 random bytes) */

struct fgn_seg;

/* A rank's listening address as the socket transport passes it around (in the id, in tables). */
struct fgn_addr {
    uint16_t family; /* AF_INET or AF_INET6 */
    uint16_t port;   /* network order */
    unsigned char ip[16];
};

struct ncclComm {
    int nranks, rank, device;
    unsigned char key[FGN_KEY];
    struct fgn_seg *seg; /* the shared segment (ranks of one host) */
    int *socks;          /* the socket transport (ranks across hosts): a connection per peer, -1 for this rank */
    char *mirror;        /* with it: every rank's slot, this rank's copy */
    size_t seg_bytes, chunk;
    unsigned long long round; /* exchange rounds done: equal on every rank (same collectives, same order) */
    unsigned long long splits;
    const void **ins;     /* nranks slot pointers, for reductions */
    int local;            /* 1: collectives are rank-local (no peers reachable, or they stopped answering) */
    int peer_hung;        /* a peer hangs in a collective (fault plan): so does this rank, from then on */
    ncclResult_t async_error; /* what ncclCommGetAsyncError reports: ncclRemoteError after an injected error */
    char last_error[200];     /* what ncclGetLastError says of it */
};

/* ---- rendezvous.c: the shared segment and its barriers; the rounds of either transport ---- */

/* Join the communicator whose unique id is `id`: over the shared segment, or with the socket transport when
 * the job spans hosts (fgn_socket_transport). On failure the communicator is rank-local (c->local = 1, reason on
 * stderr) and this still returns: NCCL never hangs here. */
FG_HIDDEN void fgn_join(struct ncclComm *c, const unsigned char *id);
FG_HIDDEN void fgn_leave(struct ncclComm *c);
/* From now on this communicator's collectives are rank-local; `why` goes to stderr once. */
FG_HIDDEN void fgn_go_local(struct ncclComm *c, const char *why);
/* The ranks can exchange data: joined over either transport and still in step. */
static inline int fgn_connected(const struct ncclComm *c) { return !c->local && (c->seg || c->socks); }
/* One exchange round: fgn_round_begin() waits until every rank has read the previous round, then the caller
 * writes `bytes` of its slot (fgn_slot(c, c->rank), at most c->chunk), fgn_round_post() waits until every rank
 * has written, the caller reads any slot, and fgn_round_end() says so. begin/post return -1 when the peers are
 * gone or too slow (the communicator is then rank-local from here on). */
FG_HIDDEN int fgn_round_begin(struct ncclComm *c);
FG_HIDDEN int fgn_round_post(struct ncclComm *c, size_t bytes);
FG_HIDDEN void fgn_round_end(struct ncclComm *c);
/* This rank hangs in the collective it is in (fault plan): peers waiting for it in a round see so and hang too,
 * as every rank of a real communicator waits in a collective one rank never joins. */
FG_HIDDEN void fgn_hang(struct ncclComm *c);
FG_HIDDEN void *fgn_slot(struct ncclComm *c, int rank);

/* ---- net.c: the socket transport ---- */

FG_HIDDEN int fgn_socket_transport(void);
/* ncclGetUniqueId's part: a bootstrap root listening on this host, its address written into the id. */
FG_HIDDEN int fgn_net_root(unsigned char *id, size_t id_bytes);
FG_HIDDEN void fgn_net_join(struct ncclComm *c, const unsigned char *id);
/* A listening socket on this host's chosen address (port filled in), or -1. */
FG_HIDDEN int fgn_listen(struct fgn_addr *where);
/* Connect the ranks whose listening addresses are `table` (nranks of them); takes over `lfd`. */
FG_HIDDEN void fgn_net_mesh(struct ncclComm *c, const struct fgn_addr *table, int lfd);
FG_HIDDEN void fgn_net_leave(struct ncclComm *c);
FG_HIDDEN void *fgn_net_slot(struct ncclComm *c, int rank);
FG_HIDDEN int fgn_net_post(struct ncclComm *c, size_t bytes);
FG_HIDDEN void fgn_net_hang(struct ncclComm *c);
FG_HIDDEN void fgn_addr_text(const struct fgn_addr *a, char *out, size_t size);

/* ---- reduce.c ---- */

FG_HIDDEN size_t fgn_type_size(ncclDataType_t t);
/* out[i] = op over in[0..nin)[i], in rank order (so every rank computes the same bits). 0, or -1 when the type
 * or op is not supported. out may alias in[k]. */
FG_HIDDEN int fgn_reduce(void *out, const void *const *in, int nin, size_t count, ncclDataType_t t, ncclRedOp_t op);

/* ---- coll.c: accounting ---- */

typedef enum { FGN_ALLREDUCE, FGN_BROADCAST, FGN_REDUCE, FGN_ALLGATHER, FGN_REDUCESCATTER, FGN_ALLTOALL,
               FGN_SEND, FGN_RECV, FGN_NCOLL } fgn_coll;

FG_HIDDEN extern atomic_ullong fgn_exchanged, fgn_local, fgn_degraded;

/* All-gather of b bytes per rank between host buffers, whatever the memory mode (communicator set-up uses it).
 * Returns 1 when the peers' data was exchanged, 0 when r holds this rank's input in every slot. */
FG_HIDDEN int fgn_allgather_bytes(struct ncclComm *c, const void *s, void *r, size_t b);

#endif
