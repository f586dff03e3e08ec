/* The socket transport: how the ranks of a communicator that spans hosts (containers of a cluster, nodes of a
 * job) exchange collective data, as NCCL's own socket transport carries it over TCP.
 *
 * Bootstrap, as NCCL's: ncclGetUniqueId opens a listening socket on this host's address (NCCL_SOCKET_IFNAME
 * honoured) and writes it into the id, which the program hands to every rank (torch.distributed through its
 * store); a thread behind that socket collects each rank's own listening address and answers every rank with the
 * whole table. The ranks then connect to each other (each to every lower rank; one connection per pair) and check
 * each other with the id's key, the id's secret part. A split's children get their table from an all-gather over
 * the parent instead (comm.c).
 *
 * Exchange: rendezvous.c's rounds over the connections. Each rank keeps a copy of every rank's slot; posting a
 * round sends this rank's slot (the bytes written) to every peer and receives every peer's, all connections
 * driven at once with poll() so no pair waits on another. A frame carries its round; a peer that hangs (fault
 * plan) says so in a frame, and waiting peers hang with it as over shared memory. A peer that closes, a frame
 * out of step or a wait past FAKEGPU_NCCL_TIMEOUT_S makes the communicator rank-local, as on one host. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fgn.h"

#define ID_MAGIC 0x314e4746u   /* "FGN1": the id carries a bootstrap root */
#define PEER_MAGIC 0x324e4746u /* "FGN2": a rank's hello */
#define FRAME_HUNG 1u
#define MAX_RANKS 65536

struct fgn_wire_hello { /* to the root: who I am and where I listen */
    uint32_t magic;
    unsigned char key[FGN_KEY];
    int32_t nranks, rank;
    struct fgn_addr addr;
};

struct fgn_peer_hello {
    uint32_t magic;
    unsigned char key[FGN_KEY];
    int32_t rank;
};

struct fgn_frame {
    uint64_t round;
    uint32_t len, flags;
};

static double env_seconds(const char *name, double dflt)
{
    const char *v = getenv(name);
    return v && *v ? atof(v) : dflt;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int fgn_socket_transport(void)
{
    const char *t = getenv("FAKEGPU_NCCL_TRANSPORT");
    if (t && *t)
        return strcmp(t, "socket") == 0;
    /* torchrun's LOCAL_WORLD_SIZE below WORLD_SIZE: the job spans hosts, whose ranks share no /dev/shm. Every
     * rank of the job reads the same two numbers, so every rank picks the same transport. */
    const char *w = getenv("WORLD_SIZE"), *lw = getenv("LOCAL_WORLD_SIZE");
    return w && lw && atoi(lw) > 0 && atoi(lw) < atoi(w);
}

/* ---- addresses ---- */

/* NCCL_SOCKET_IFNAME: a comma list of interface name prefixes; "^" first excludes them; "=" first matches
 * whole names. Unset: any interface but loopback and docker's bridge, loopback last. */
static int if_wanted(const char *name, const char *spec)
{
    if (!spec || !*spec)
        return strncmp(name, "lo", 2) != 0 && strncmp(name, "docker", 6) != 0;
    int exclude = *spec == '^', exact = *spec == '=';
    const char *p = spec + (exclude || exact);
    int hit = 0;
    while (*p && !hit) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        hit = n && (exact ? strlen(name) == n && !strncmp(name, p, n) : !strncmp(name, p, n));
        p += n + (end != NULL);
    }
    return exclude ? !hit : hit;
}

static int pick_address(struct fgn_addr *out)
{
    struct ifaddrs *all = NULL;
    if (getifaddrs(&all) != 0)
        return -1;
    const char *spec = getenv("NCCL_SOCKET_IFNAME");
    int found = -1;
    for (int pass = 0; pass < 3 && found < 0; pass++) { /* IPv4, IPv6, then loopback when nothing else */
        for (struct ifaddrs *i = all; i && found < 0; i = i->ifa_next) {
            if (!i->ifa_addr || !(i->ifa_flags & IFF_UP))
                continue;
            int fam = i->ifa_addr->sa_family;
            if (pass < 2 && !if_wanted(i->ifa_name, spec))
                continue;
            if (pass == 2 && !(i->ifa_flags & IFF_LOOPBACK))
                continue;
            memset(out, 0, sizeof *out);
            if (fam == AF_INET && pass != 1) {
                out->family = AF_INET;
                memcpy(out->ip, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
                found = 0;
            } else if (fam == AF_INET6 && pass == 1) {
                const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)i->ifa_addr;
                if (IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr))
                    continue; /* needs a scope id to be reached */
                out->family = AF_INET6;
                memcpy(out->ip, &a->sin6_addr, 16);
                found = 0;
            }
        }
    }
    freeifaddrs(all);
    return found;
}

static socklen_t to_sockaddr(const struct fgn_addr *a, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    if (a->family == AF_INET6) {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
        s->sin6_family = AF_INET6;
        s->sin6_port = a->port;
        memcpy(&s->sin6_addr, a->ip, 16);
        return sizeof *s;
    }
    struct sockaddr_in *s = (struct sockaddr_in *)ss;
    s->sin_family = AF_INET;
    s->sin_port = a->port;
    memcpy(&s->sin_addr, a->ip, 4);
    return sizeof *s;
}

void fgn_addr_text(const struct fgn_addr *a, char *out, size_t size)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    inet_ntop(a->family == AF_INET6 ? AF_INET6 : AF_INET, a->ip, ip, sizeof ip);
    snprintf(out, size, a->family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, (unsigned)ntohs(a->port));
}

int fgn_listen(struct fgn_addr *where)
{
    if (pick_address(where) != 0)
        return -1;
    struct sockaddr_storage ss;
    struct fgn_addr any = *where;
    memset(any.ip, 0, sizeof any.ip); /* every interface: the peers reach the one advertised */
    any.port = 0;
    socklen_t len = to_sockaddr(&any, &ss);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 128) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        close(fd);
        return -1;
    }
    where->port = ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                          : ((struct sockaddr_in *)&ss)->sin_port;
    return fd;
}

/* ---- blocking I/O with a deadline ---- */

static int wait_fd(int fd, short events, long long deadline)
{
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0)
            return -1;
        struct pollfd p = {fd, events, 0};
        int r = poll(&p, 1, left > 1000 ? 1000 : (int)left);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return -1;
    }
}

static int io_all(int fd, void *buf, size_t len, int writing, long long deadline)
{
    char *p = buf;
    while (len) {
        if (wait_fd(fd, writing ? POLLOUT : POLLIN, deadline) != 0)
            return -1;
        ssize_t n = writing ? send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, p, len, MSG_DONTWAIT);
        if (n == 0)
            return -1;
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int dial(const struct fgn_addr *a, long long deadline)
{
    struct sockaddr_storage ss;
    socklen_t len = to_sockaddr(a, &ss);
    unsigned sleep_ms = 10;
    while (now_ms() < deadline) {
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        if (connect(fd, (struct sockaddr *)&ss, len) == 0)
            return fd;
        close(fd);
        usleep(sleep_ms * 1000); /* the listener may not be up yet: torch hands the id out before it inits */
        if (sleep_ms < 500)
            sleep_ms *= 2;
    }
    return -1;
}

/* ---- the bootstrap root, behind the id ---- */

struct root {
    int lfd;
    unsigned char key[FGN_KEY];
};

static void *root_main(void *arg)
{
    struct root *r = arg;
    long long deadline = now_ms() + (long long)(env_seconds("FAKEGPU_NCCL_ROOT_TIMEOUT_S", 3600) * 1000);
    int n = -1, got = 0, *fds = NULL;
    struct fgn_addr *table = NULL;
    while (n < 0 || got < n) {
        if (wait_fd(r->lfd, POLLIN, deadline) != 0)
            break; /* the ranks never came: nothing to answer */
        int fd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        struct fgn_wire_hello h;
        if (io_all(fd, &h, sizeof h, 0, now_ms() + 5000) != 0 || h.magic != ID_MAGIC ||
            memcmp(h.key, r->key, FGN_KEY) != 0 || h.nranks < 1 || h.nranks > MAX_RANKS || (n >= 0 && h.nranks != n) ||
            h.rank < 0 || h.rank >= h.nranks) {
            close(fd); /* not one of ours: a port scan, another job, a stale id */
            continue;
        }
        if (n < 0) {
            n = h.nranks;
            fds = malloc(sizeof *fds * (size_t)n);
            table = calloc((size_t)n, sizeof *table);
            if (!fds || !table)
                break;
            for (int i = 0; i < n; i++)
                fds[i] = -1;
        }
        if (fds[h.rank] >= 0) {
            close(fd);
            continue;
        }
        fds[h.rank] = fd;
        table[h.rank] = h.addr;
        got++;
    }
    for (int i = 0; fds && i < n; i++) {
        if (fds[i] >= 0) {
            if (got == n)
                io_all(fds[i], table, sizeof *table * (size_t)n, 1, now_ms() + 30000);
            close(fds[i]);
        }
    }
    free(fds);
    free(table);
    close(r->lfd);
    free(r);
    return NULL;
}

int fgn_net_root(unsigned char *id, size_t id_bytes)
{
    struct fgn_addr a;
    if (id_bytes < FGN_KEY + 4 + sizeof a)
        return -1;
    int lfd = fgn_listen(&a);
    if (lfd < 0)
        return -1;
    struct root *r = malloc(sizeof *r);
    pthread_t t;
    pthread_attr_t attr;
    if (!r || pthread_attr_init(&attr) != 0) {
        free(r);
        close(lfd);
        return -1;
    }
    r->lfd = lfd;
    memcpy(r->key, id, FGN_KEY);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int ok = pthread_create(&t, &attr, root_main, r) == 0;
    pthread_attr_destroy(&attr);
    if (!ok) {
        free(r);
        close(lfd);
        return -1;
    }
    uint32_t magic = ID_MAGIC;
    memcpy(id + FGN_KEY, &magic, 4);
    memcpy(id + FGN_KEY + 4, &a, sizeof a);
    return 0;
}

/* ---- joining ---- */

static long long join_deadline(void)
{
    return now_ms() + (long long)(env_seconds("FAKEGPU_NCCL_JOIN_TIMEOUT_S", 30) * 1000);
}

void fgn_net_join(struct ncclComm *c, const unsigned char *id)
{
    uint32_t magic;
    memcpy(&magic, id + FGN_KEY, 4);
    if (magic != ID_MAGIC) {
        fgn_go_local(c, "the unique id names no bootstrap root (it was not made by FakeGPU's ncclGetUniqueId with the "
                    "socket transport)");
        return;
    }
    struct fgn_addr root, mine;
    memcpy(&root, id + FGN_KEY + 4, sizeof root);
    int lfd = fgn_listen(&mine);
    if (lfd < 0) {
        fgn_go_local(c, "cannot listen for peers (no usable interface? NCCL_SOCKET_IFNAME)");
        return;
    }
    long long deadline = join_deadline();
    int fd = dial(&root, deadline);
    struct fgn_addr *table = calloc((size_t)c->nranks, sizeof *table);
    struct fgn_wire_hello h = {ID_MAGIC, {0}, c->nranks, c->rank, mine};
    memcpy(h.key, c->key, FGN_KEY);
    if (fd < 0 || !table || io_all(fd, &h, sizeof h, 1, deadline) != 0 ||
        io_all(fd, table, sizeof *table * (size_t)c->nranks, 0, deadline) != 0) {
        char where[64];
        fgn_addr_text(&root, where, sizeof where);
        char why[160];
        snprintf(why, sizeof why, "the bootstrap root at %s did not answer (FAKEGPU_NCCL_JOIN_TIMEOUT_S)", where);
        if (fd >= 0)
            close(fd);
        close(lfd);
        free(table);
        fgn_go_local(c, why);
        return;
    }
    close(fd);
    fgn_net_mesh(c, table, lfd);
    free(table);
}

static void nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void fgn_net_mesh(struct ncclComm *c, const struct fgn_addr *table, int lfd)
{
    int n = c->nranks;
    const char *ch = getenv("FAKEGPU_NCCL_CHUNK");
    /* 1 MiB by default, not shared memory's 4: every rank keeps a copy of every rank's slot. */
    c->chunk = ch && atol(ch) >= 4096 ? (size_t)atol(ch) / 64 * 64 : 1u << 20;
    c->socks = malloc(sizeof *c->socks * (size_t)n);
    c->mirror = malloc(c->chunk * (size_t)n);
    if (!c->socks || !c->mirror) {
        close(lfd);
        free(c->socks);
        free(c->mirror);
        c->socks = NULL;
        c->mirror = NULL;
        fgn_go_local(c, "out of memory for the socket transport");
        return;
    }
    for (int i = 0; i < n; i++)
        c->socks[i] = -1;
    long long deadline = join_deadline();
    const char *why = NULL;
    for (int j = 0; j < c->rank && !why; j++) { /* connect() lands in the peer's backlog: no order to wait for */
        int fd = dial(&table[j], deadline);
        struct fgn_peer_hello h = {PEER_MAGIC, {0}, c->rank};
        memcpy(h.key, c->key, FGN_KEY);
        if (fd < 0 || io_all(fd, &h, sizeof h, 1, deadline) != 0) {
            if (fd >= 0)
                close(fd);
            why = "a lower rank did not take the connection";
            break;
        }
        c->socks[j] = fd;
    }
    for (int missing = n - 1 - c->rank; missing > 0 && !why;) {
        if (wait_fd(lfd, POLLIN, deadline) != 0) {
            why = "a higher rank did not connect in time (FAKEGPU_NCCL_JOIN_TIMEOUT_S)";
            break;
        }
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        struct fgn_peer_hello h;
        if (io_all(fd, &h, sizeof h, 0, now_ms() + 5000) != 0 || h.magic != PEER_MAGIC ||
            memcmp(h.key, c->key, FGN_KEY) != 0 || h.rank <= c->rank || h.rank >= n || c->socks[h.rank] >= 0) {
            close(fd);
            continue;
        }
        c->socks[h.rank] = fd;
        missing--;
    }
    close(lfd);
    if (why) {
        fgn_net_leave(c);
        fgn_go_local(c, why);
        return;
    }
    for (int i = 0; i < n; i++)
        if (i != c->rank)
            nodelay(c->socks[i]);
}

void fgn_net_leave(struct ncclComm *c)
{
    for (int i = 0; c->socks && i < c->nranks; i++)
        if (c->socks[i] >= 0)
            close(c->socks[i]);
    free(c->socks);
    free(c->mirror);
    c->socks = NULL;
    c->mirror = NULL;
}

/* ---- rounds ---- */

struct xfer {
    struct fgn_frame out, in;
    size_t sent, got; /* bytes of frame header + payload moved so far */
};

/* Send this rank's frame to every peer and take every peer's, all at once. 0, or -1 (go_local or a peer hung). */
static int exchange_frames(struct ncclComm *c, uint32_t len, uint32_t flags)
{
    int n = c->nranks, me = c->rank, open = 0;
    struct xfer *x = calloc((size_t)n, sizeof *x);
    struct pollfd *p = calloc((size_t)n, sizeof *p);
    if (!x || !p) {
        free(x);
        free(p);
        fgn_go_local(c, "out of memory in a round");
        return -1;
    }
    const char *payload = (const char *)fgn_net_slot(c, me);
    for (int i = 0; i < n; i++) {
        x[i].out = (struct fgn_frame){c->round + 1, len, flags};
        open += i != me;
    }
    long long deadline = now_ms() + (long long)(env_seconds("FAKEGPU_NCCL_TIMEOUT_S", 300) * 1000);
    const char *why = NULL;
    int hung = 0;
    const size_t hdr = sizeof(struct fgn_frame);
    while (open > 0 && !why) {
        int k = 0;
        for (int i = 0; i < n; i++) {
            p[i] = (struct pollfd){-1, 0, 0};
            if (i == me)
                continue;
            short ev = 0;
            if (x[i].sent < hdr + len)
                ev |= POLLOUT;
            if (x[i].got < hdr || x[i].got < hdr + x[i].in.len)
                ev |= POLLIN;
            if (ev) {
                p[i] = (struct pollfd){c->socks[i], ev, 0};
                k++;
            }
        }
        long long left = deadline - now_ms();
        if (left <= 0) {
            why = "peers did not reach the collective in time (FAKEGPU_NCCL_TIMEOUT_S)";
            break;
        }
        int r = poll(p, (nfds_t)n, left > 1000 ? 1000 : (int)left);
        if (r < 0 && errno != EINTR) {
            why = "poll failed";
            break;
        }
        for (int i = 0; i < n && r > 0 && !why; i++) {
            if (i == me || !p[i].revents)
                continue;
            struct xfer *t = &x[i];
            if ((p[i].revents & POLLOUT) && t->sent < hdr + len) {
                const char *src = t->sent < hdr ? (const char *)&t->out + t->sent : payload + (t->sent - hdr);
                size_t want = t->sent < hdr ? hdr - t->sent : hdr + len - t->sent;
                ssize_t m = send(c->socks[i], src, want, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (m > 0)
                    t->sent += (size_t)m;
                else if (m < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                    why = "a peer's connection failed";
            }
            if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) && !why) {
                char *dst = t->got < hdr ? (char *)&t->in + t->got : (char *)fgn_net_slot(c, i) + (t->got - hdr);
                size_t want = t->got < hdr ? hdr - t->got : hdr + t->in.len - t->got;
                ssize_t m = want ? recv(c->socks[i], dst, want, MSG_DONTWAIT) : 0;
                if (m == 0 && want)
                    why = "a peer closed its connection (it exited?)";
                else if (m < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                    why = "a peer's connection failed";
                else if (m > 0) {
                    t->got += (size_t)m;
                    if (t->got == hdr) {
                        if (t->in.flags & FRAME_HUNG)
                            hung = 1;
                        else if (t->in.round != c->round + 1 || t->in.len > c->chunk)
                            why = "a peer is out of step (collectives called in another order?)";
                    }
                }
            }
        }
        if (hung)
            break;
        open = 0;
        for (int i = 0; i < n; i++)
            open += i != me && (x[i].sent < hdr + len || x[i].got < hdr || x[i].got < hdr + x[i].in.len);
    }
    free(x);
    free(p);
    if (hung) {
        c->peer_hung = 1;
        return -1;
    }
    if (why) {
        fgn_go_local(c, why);
        return -1;
    }
    return 0;
}

void *fgn_net_slot(struct ncclComm *c, int rank)
{
    return c->mirror + (size_t)rank * c->chunk;
}

int fgn_net_post(struct ncclComm *c, size_t bytes)
{
    return exchange_frames(c, (uint32_t)(bytes < c->chunk ? bytes : c->chunk), 0);
}

void fgn_net_hang(struct ncclComm *c)
{
    /* Best effort: tell the peers now, so the ones waiting in a round hang too instead of timing out. */
    struct fgn_frame f = {c->round + 1, 0, FRAME_HUNG};
    for (int i = 0; c->socks && i < c->nranks; i++)
        if (i != c->rank && c->socks[i] >= 0)
            (void)!send(c->socks[i], &f, sizeof f, MSG_NOSIGNAL | MSG_DONTWAIT);
}
