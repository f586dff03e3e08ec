/* Telemetry replay (fakegpu/faults/replay.py): a run's recording of utilization, power, temperature and SM clock,
 * compiled into telemetry.replay in its state folder, answers in place of the load model for the metrics and
 * times it covers. Mapped once per process (looked for again every 100 ms while the run has none); samples are
 * sorted by (device, metric, time), so a reading is two binary searches. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fg_nvml.h"

typedef struct {
    char magic[8];
    uint32_t count, zero;
    uint64_t start_ns;
} replay_header;

typedef struct {
    uint32_t t_ms;
    uint16_t device, metric;
    double value;
} replay_sample;

_Static_assert(sizeof(replay_header) == 24, "header size differs from replay.py");
_Static_assert(sizeof(replay_sample) == FG_REPLAY_SAMPLE_SIZE, "sample size differs from replay.py");

static _Atomic(const replay_header *) mapped;
static _Atomic uint64_t looked_ns;

static uint64_t now_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static const replay_header *recording(void)
{
    const replay_header *h = atomic_load(&mapped);
    if (h || !fg_cfg.state_dir[0])
        return h;
    uint64_t now = now_ns(CLOCK_MONOTONIC), last = atomic_load(&looked_ns);
    if (last && now - last < 100000000ULL)
        return NULL;
    atomic_store(&looked_ns, now);
    char path[600];
    snprintf(path, sizeof path, "%s/%s", fg_cfg.state_dir, FG_REPLAY_FILE);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return NULL;
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= (off_t)sizeof(replay_header))
        p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return NULL;
    h = p;
    /* A file that is not a whole recording is not read: nothing past its end is ever touched. */
    if (memcmp(h->magic, FG_REPLAY_MAGIC, 8) != 0 ||
        (uint64_t)st.st_size < sizeof *h + (uint64_t)h->count * sizeof(replay_sample)) {
        munmap(p, (size_t)st.st_size);
        return NULL;
    }
    const replay_header *expected = NULL;
    if (!atomic_compare_exchange_strong(&mapped, &expected, h)) {
        munmap(p, (size_t)st.st_size);
        return expected;
    }
    return h;
}

static uint64_t key(unsigned device, unsigned metric, uint32_t t) { return (uint64_t)device << 48 | (uint64_t)metric << 32 | t; }

int fg_replay_value(unsigned device, unsigned metric, double *out)
{
    const replay_header *h = recording();
    if (!h || !h->count)
        return 0;
    uint64_t now = now_ns(CLOCK_REALTIME);
    if (now < h->start_ns)
        return 0;
    uint64_t ms = (now - h->start_ns) / 1000000ULL;
    uint32_t t = ms > 0xFFFFFFFFULL ? 0xFFFFFFFFU : (uint32_t)ms;
    const replay_sample *s = (const replay_sample *)(h + 1);
    /* the last sample of (device, metric) at or before t: the first whose key exceeds (device, metric, t), less one */
    uint64_t want = key(device, metric, t);
    uint32_t lo = 0, hi = h->count;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (key(s[mid].device, s[mid].metric, s[mid].t_ms) <= want)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (!lo || s[lo - 1].device != device || s[lo - 1].metric != metric)
        return 0; /* before its first sample, or a metric the recording does not name */
    *out = s[lo - 1].value;
    return 1;
}
