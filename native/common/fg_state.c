#include "fg_state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A folder changed less than this before a scan may change again within the same mtime tick (the kernel stamps
 * with a coarse clock), so the next read scans again rather than trust an equal mtime. */
#define SETTLE_NS 20000000LL

const char *fg_state_dir(char *buf, size_t len)
{
    const char *env = getenv("FAKEGPU_STATE_DIR");
    struct stat st;
    if (env && *env)
        fg_strlcpy(buf, env, len);
    else if (stat(FG_CONTAINER_DIR, &st) == 0 && S_ISDIR(st.st_mode))
        fg_strlcpy(buf, FG_CONTAINER_DIR, len);
    else {
        const char *tmp = getenv("TMPDIR");
        snprintf(buf, len, "%s/fakegpu-%u", tmp && *tmp ? tmp : "/tmp", (unsigned)getuid());
    }
    return buf;
}

static int pid_alive(unsigned pid)
{
    /* EPERM means it exists but belongs to someone else: still alive. */
    return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

static long long clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

fg_state_file *fg_state_create(const char *dir, unsigned pid, const char *name, char type)
{
    char path[1024], tmp[1100];
    if (snprintf(path, sizeof path, "%s/%u" FG_STATE_SUFFIX, dir, pid) >= (int)sizeof path)
        return NULL;
    snprintf(tmp, sizeof tmp, "%s/.%u" FG_STATE_SUFFIX ".tmp", dir, pid);
    mkdir(dir, 0777);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return NULL;
    fg_state_file *f = NULL;
    if (ftruncate(fd, sizeof *f) == 0) {
        void *p = mmap(NULL, sizeof *f, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        f = p == MAP_FAILED ? NULL : p;
    }
    close(fd);
    if (f) {
        /* The new file's pages are zero: every counter starts at 0. */
        memcpy(f->magic, FG_STATE_MAGIC, sizeof f->magic);
        f->pid = pid;
        f->type = type == 'G' ? 'G' : 'C';
        size_t o = 0;
        for (const char *c = name ? name : ""; *c && o + 1 < sizeof f->name; c++)
            f->name[o++] = (*c == '\t' || *c == '\n' || *c == '\r') ? ' ' : *c;
        if (rename(tmp, path) == 0)
            return f;
        munmap(f, sizeof *f);
    }
    unlink(tmp);
    return NULL;
}

void fg_state_close(fg_state_file *f, const char *dir, int remove)
{
    if (!f)
        return;
    if (remove) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%u" FG_STATE_SUFFIX, dir, f->pid);
        unlink(path);
    }
    munmap(f, sizeof *f);
}

static void unmap_all(fg_state_reader *r)
{
    for (unsigned i = 0; i < r->n; i++)
        munmap((void *)r->files[i], sizeof *r->files[i]);
    r->n = 0;
}

void fg_state_reader_open(fg_state_reader *r, const char *dir)
{
    memset(r, 0, sizeof *r);
    fg_strlcpy(r->dir, dir, sizeof r->dir);
}

void fg_state_reader_invalidate(fg_state_reader *r) { r->scanned_ns = 0; }

void fg_state_reader_close(fg_state_reader *r)
{
    unmap_all(r);
    r->scanned_ns = 0;
}

/* A pid from "<pid>.proc" (temp: ".<pid>.proc.tmp"); 0 when the name is neither. */
static unsigned file_pid(const char *name, int *temp)
{
    *temp = name[0] == '.';
    const char *digits = name + *temp;
    char *end = NULL;
    unsigned long pid = strtoul(digits, &end, 10);
    if (end == digits || pid == 0 || pid > 0xffffffffUL)
        return 0;
    return strcmp(end, *temp ? FG_STATE_SUFFIX ".tmp" : FG_STATE_SUFFIX) == 0 ? (unsigned)pid : 0;
}

static const fg_state_file *map_file(int dirfd, const char *name, unsigned pid)
{
    /* Never follow a link or block on a FIFO someone put here: only a regular file of the full size is mapped. */
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return NULL;
    struct stat st;
    const fg_state_file *f = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= (off_t)sizeof *f) {
        void *p = mmap(NULL, sizeof *f, PROT_READ, MAP_SHARED, fd, 0);
        f = p == MAP_FAILED ? NULL : p;
    }
    close(fd);
    if (f && (memcmp(f->magic, FG_STATE_MAGIC, sizeof f->magic) != 0 || f->pid != pid)) {
        munmap((void *)f, sizeof *f);
        f = NULL;
    }
    return f;
}

static int by_pid(const void *a, const void *b)
{
    const fg_state_file *x = *(const fg_state_file *const *)a, *y = *(const fg_state_file *const *)b;
    return x->pid < y->pid ? -1 : x->pid > y->pid;
}

static void scan(fg_state_reader *r, const struct stat *dir_st)
{
    unmap_all(r);
    r->scanned_ns = clock_ns(CLOCK_MONOTONIC);
    r->dir_mtime = dir_st->st_mtim;
    long long mtime = (long long)dir_st->st_mtim.tv_sec * 1000000000LL + dir_st->st_mtim.tv_nsec;
    if (clock_ns(CLOCK_REALTIME) - mtime < SETTLE_NS)
        r->scanned_ns = 0; /* not settled: scan again next time */
    DIR *d = opendir(r->dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d)) && r->n < FG_STATE_MAX_PROCS;) {
        int temp;
        unsigned pid = file_pid(e->d_name, &temp);
        if (!pid)
            continue;
        if (!pid_alive(pid)) {
            /* The driver reaps a dead process's context: so do we (its file, or its half-made temp file). */
            if (unlinkat(dirfd(d), e->d_name, 0) == 0)
                fg_debug("dropped state of dead pid %u", pid);
            continue;
        }
        if (!temp) {
            const fg_state_file *f = map_file(dirfd(d), e->d_name, pid);
            if (f)
                r->files[r->n++] = f;
        }
    }
    closedir(d);
    qsort(r->files, r->n, sizeof r->files[0], by_pid);
}

void fg_state_reader_read(fg_state_reader *r, long long ttl_ns, fg_snapshot *out)
{
    out->n = 0;
    struct stat st;
    if (stat(r->dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        unmap_all(r);
        return;
    }
    if (!r->scanned_ns || clock_ns(CLOCK_MONOTONIC) - r->scanned_ns >= ttl_ns ||
        st.st_mtim.tv_sec != r->dir_mtime.tv_sec || st.st_mtim.tv_nsec != r->dir_mtime.tv_nsec)
        scan(r, &st);
    for (unsigned i = 0; i < r->n; i++) {
        const fg_state_file *f = r->files[i];
        for (unsigned dev = 0; dev < FG_MAX_DEVICES && out->n < FG_STATE_MAX_PROCS; dev++) {
            uint64_t used = atomic_load_explicit(&f->used[dev], memory_order_relaxed);
            if (!used)
                continue;
            fg_proc *p = &out->procs[out->n++];
            p->pid = f->pid;
            p->device = dev;
            p->used_bytes = used;
            p->type = f->type == 'G' ? 'G' : 'C';
            memcpy(p->name, f->name, sizeof p->name);
            p->name[sizeof p->name - 1] = '\0';
        }
    }
}

void fg_state_mark_busy(fg_state_file *f, unsigned device)
{
    if (!f || device >= FG_MAX_DEVICES)
        return;
    uint64_t k = (uint64_t)(clock_ns(CLOCK_MONOTONIC) / FG_STATE_SLOT_NS);
    atomic_store_explicit(&f->busy[device][k % FG_STATE_BUSY_SLOTS], k, memory_order_relaxed);
}

unsigned fg_state_reader_busy_slots(const fg_state_reader *r, unsigned device)
{
    if (device >= FG_MAX_DEVICES || !r->n)
        return 0;
    uint64_t now = (uint64_t)(clock_ns(CLOCK_MONOTONIC) / FG_STATE_SLOT_NS), busy = 0; /* bit j: slot now - j */
    for (unsigned i = 0; i < r->n; i++)
        for (unsigned j = 0; j < FG_STATE_BUSY_SLOTS && j <= now; j++) {
            uint64_t k = now - j;
            if (atomic_load_explicit(&r->files[i]->busy[device][k % FG_STATE_BUSY_SLOTS], memory_order_relaxed) == k)
                busy |= 1ULL << j;
        }
    return (unsigned)__builtin_popcountll(busy);
}
