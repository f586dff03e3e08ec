/* The dynamic side of a fake GPU: usage from the shared state, and a load model that follows the work.
 * Utilization is NVML's definition, the share of the last second in which a kernel (or a copy) ran: the share of
 * the shared state's busy slots some process marked (native mode's libcuda marks its launches and copies,
 * fakecuda its ops). Power rises from the board's idle draw toward its limit with utilization, temperature from
 * its idle value by up to 35 C, the SM clock is at boost while busy and at the 210 MHz idle clock otherwise; a
 * process that holds memory but launches nothing leaves the board idle, as on a real one.
 * FAKEGPU_TEMPERATURE / _UTILIZATION / _MEMORY_UTILIZATION / _POWER_W pin it.
 *
 * Every query loads the processes' counters from their mapped files (common/fg_state), so an allocation in
 * another process shows at once; the folder itself is rescanned when it changes and every FAKEGPU_STATE_TTL_MS
 * (default 50 ms), which is how soon a killed process's memory goes. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "fg_nvml.h"

#define MIB (1ull << 20)

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static fg_state_reader reader;
static fg_snapshot cache;
static fg_usage usage[FG_MAX_DEVICES];

void fg_state_invalidate(void)
{
    pthread_mutex_lock(&cache_lock);
    if (strcmp(reader.dir, fg_cfg.state_dir) != 0) {
        fg_state_reader_close(&reader);
        fg_state_reader_open(&reader, fg_cfg.state_dir);
    }
    fg_state_reader_invalidate(&reader);
    pthread_mutex_unlock(&cache_lock);
}

/* Caller holds cache_lock. */
static void refresh_locked(void)
{
    fg_state_reader_read(&reader, (long long)fg_cfg.state_ttl_ms * 1000000LL, &cache);
    memset(usage, 0, sizeof usage);
    for (unsigned i = 0; i < cache.n; i++) {
        const fg_proc *p = &cache.procs[i];
        if (p->device >= fg_devs.count)
            continue;
        usage[p->device].used_bytes += p->used_bytes;
        if (p->type == 'G')
            usage[p->device].graphics_procs++;
        else
            usage[p->device].compute_procs++;
    }
}

void fg_usage_of(unsigned index, fg_usage *u)
{
    pthread_mutex_lock(&cache_lock);
    refresh_locked();
    *u = index < FG_MAX_DEVICES ? usage[index] : (fg_usage){0};
    u->busy_slots = fg_state_reader_busy_slots(&reader, index);
    pthread_mutex_unlock(&cache_lock);
}

unsigned fg_procs_of(unsigned index, char type, fg_proc *out, unsigned max)
{
    unsigned n = 0;
    pthread_mutex_lock(&cache_lock);
    refresh_locked();
    for (unsigned i = 0; i < cache.n && n < max; i++)
        if (cache.procs[i].device == index && (!type || cache.procs[i].type == type))
            out[n++] = cache.procs[i];
    pthread_mutex_unlock(&cache_lock);
    return n;
}

int fg_is_datacenter(const fg_device *d) { return strcmp(d->segment, "datacenter") == 0 || !d->segment[0]; }

static int busy(const fg_usage *u) { return u->busy_slots > 0; }

/* Allocated device memory: what processes hold. An idle board shows 1 MiB used on the 550 branch (an H100 on
 * 550.127.08, ../shared/facts/nvidia-smi-formats.md) and none from 570 on (an H200 on 580.159.04: NVML v2 used 0,
 * tests/data/gpu/h200; 0 MiB in the -q -x captures of an A100 on 570.148.08 and an H100 on 580.105.08 in
 * NVIDIA/k8s-test-infra). The driver's reserved carve-out is accounted separately (nvmlMemory_v2_t.reserved). */
unsigned long long fg_mem_allocated(const fg_device *d, const fg_usage *u)
{
    unsigned long long cap = d->mem_total - d->mem_reserved;
    unsigned long long a = (atoi(fg_cfg.driver_version) < 570 ? MIB : 0) + u->used_bytes;
    return a > cap ? cap : a;
}

unsigned fg_gpu_util(const fg_device *d, const fg_usage *u)
{
    (void)d;
    if (fg_cfg.pin_gpu_util >= 0)
        return fg_cfg.pin_gpu_util > 100 ? 100u : (unsigned)fg_cfg.pin_gpu_util;
    return u->busy_slots * 100 / FG_STATE_BUSY_SLOTS;
}

unsigned fg_mem_util(const fg_device *d, const fg_usage *u)
{
    if (fg_cfg.pin_mem_util >= 0)
        return fg_cfg.pin_mem_util > 100 ? 100u : (unsigned)fg_cfg.pin_mem_util;
    if (!busy(u))
        return 0;
    /* Busier memory for a fuller board, within what training jobs typically show. */
    return 20 + (unsigned)(40.0 * (double)fg_mem_allocated(d, u) / (double)d->mem_total);
}

unsigned fg_temperature(const fg_device *d, const fg_usage *u)
{
    if (fg_cfg.pin_temperature >= 0)
        return (unsigned)fg_cfg.pin_temperature;
    /* Passively cooled datacenter boards idle cooler than desktop cards with their fans stopped. */
    unsigned idle = d->fans ? 38 : 30;
    return idle + (fg_gpu_util(d, u) * 35) / 100;
}

unsigned fg_power_mw(const fg_device *d, const fg_usage *u)
{
    if (fg_cfg.pin_power_mw >= 0)
        return (unsigned)fg_cfg.pin_power_mw;
    unsigned idle = d->power_idle_mw, limit = d->power_default_mw;
    if (idle > limit)
        idle = limit;
    return idle + (unsigned)((unsigned long long)(limit - idle) * fg_gpu_util(d, u) * 8 / 1000);
}

unsigned fg_sm_clock(const fg_device *d, const fg_usage *u)
{
    unsigned util = fg_gpu_util(d, u);
    if (!util)
        return 210; /* idle SM clock real boards of every generation drop to */
    return d->clock_boost_mhz;
}

nvmlPstates_t fg_pstate(const fg_device *d, const fg_usage *u)
{
    /* Datacenter boards with persistence on sit in P0; desktop cards drop to P8 when idle. */
    if (fg_is_datacenter(d) || fg_gpu_util(d, u))
        return NVML_PSTATE_0;
    return NVML_PSTATE_8;
}
