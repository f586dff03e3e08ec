/* The dynamic side of a fake GPU: usage from the shared state, and a load model that follows the work, fitted to a
 * real H200 (tests/data/gpu/h200/telemetry.json by tools/gpu_capture/fit_telemetry.py; native/README.md tells it
 * whole, tests/real_gpu/test_telemetry.py holds it to the capture).
 *
 * Input. The CUDA shims and fakecuda write, per process and board, a ring of 15.625 ms slots holding how many
 * microseconds of compute work (tensor-core math: GEMMs, convolutions, attention) and of memory work (copies,
 * fills, every other kernel) ran in each (common/fg_state.h; fakegpu/shared_state.py says how a launch stream
 * becomes busy time). The board's figures are its profile's telemetry.* (fg_load_params); the curves' shape,
 * the same for every board, is profiles/load_model.yaml's `model`, here as FG_LOAD_* from fg_contract.h.
 *
 * Model, per board:
 *   states     no process: idle_w, the idle SM and video clocks, reason GpuIdle, idle_c. A process holding a
 *              context on a datacenter board, nothing running: active_idle_w at boost clocks, no reason, the
 *              context's draw heating the die like compute work. The capture: 81.7 W / 345 MHz / 37 C against
 *              126.7 W / 1980 MHz / 39 C. Desktop boards stay at their idle with a context (P8), until work runs.
 *   utilization  the busy share of NVML's last whole sample period (0.2 s, aligned to the shared monotonic clock so
 *              that every reader agrees); memory utilization the same period's compute share x 23% plus its memory
 *              share x 100%.
 *   power      each slot demands active_idle_w + compute share x (compute_w - active_idle_w) + memory share x
 *              (memory_w - active_idle_w); the power controller holds the draw at cap_w (98.9% of the limit);
 *              NVML reports the average draw of the last second (a step ramps linearly for a second).
 *   clocks     boost while active; when the sample period's demand passes the cap, the SM clock falls to
 *              boost x ((cap - active idle) / (demand - active idle))^0.75, in 15 MHz steps, with reason SW power
 *              cap (0x4). A bf16 GEMM loop on the H200: 980 W demanded, 692 W drawn, 1455 MHz.
 *   temperature  idle_c plus the steady rise of the draw above the idle (compute_c_per_w for compute work and the
 *              context's draw, memory_c_per_w for memory work: HBM traffic heats the GPU's sensor less), through two
 *              first-order lags (0.2 s carrying 75%, 1.5 s the rest) over the ring's 4 s.
 * A process's busy history goes with it: when it exits the board is at its no-process idle at once.
 * FAKEGPU_TEMPERATURE / _POWER_W / _MEMORY_UTILIZATION pin one reading; FAKEGPU_UTILIZATION pins utilization and
 * drives the rest as steady compute work of that share.
 *
 * Cost. Every query loads the processes' counters from their mapped files (common/fg_state), so an allocation in
 * another process shows at once; the folder itself is rescanned when it changes and every FAKEGPU_STATE_TTL_MS
 * (default 50 ms), which is how soon a killed process's memory goes. The ring's summary (a pass over 255 slots per
 * process) is computed once per device and slot: a memory query never pays for it, and nvidia-smi's dozens of
 * queries pay once. No libm: every nvidia-smi would pay to load it. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "fg_nvml.h"

#define MIB (1ull << 20)
#define SLOTS_PER_S (1e9 / (double)FG_STATE_SLOT_NS)
#define HISTORY (FG_STATE_BUSY_SLOTS - 1) /* completed slots a reader uses: the ring's oldest may hold a new tail */
#define CLOCK_STEP_MHZ 15                 /* NVML's supported SM clocks are 15 MHz apart (nvml.json) */

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static fg_state_reader reader;
static fg_snapshot cache;
static fg_usage usage[FG_MAX_DEVICES];

/* What the rings say about one board, computed once per slot (the slot it was computed in is the key). */
typedef struct {
    uint64_t slot;                     /* 0: never computed */
    double period_compute, period_memory; /* shares of the last sample period busy with each kind */
    int busy;                          /* any work in the power window */
    double excess_w;                   /* the window's average draw above the context-idle draw */
    double rise_c;                     /* the work's lagged temperature rise */
} fg_ring_summary;

static fg_ring_summary summaries[FG_MAX_DEVICES];

void fg_state_invalidate(void)
{
    pthread_mutex_lock(&cache_lock);
    if (strcmp(reader.dir, fg_cfg.state_dir) != 0) {
        fg_state_reader_close(&reader);
        fg_state_reader_open(&reader, fg_cfg.state_dir);
    }
    fg_state_reader_invalidate(&reader);
    memset(summaries, 0, sizeof summaries);
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
    /* Memory a fault plan has something outside the run hold: used, in no process list (as another container's
     * processes are to NVML inside a container). */
    for (unsigned d = 0; d < fg_devs.count && d < FG_MAX_DEVICES; d++)
        usage[d].used_bytes += fg_fault_pressure(d);
}

void fg_usage_of(unsigned index, fg_usage *u)
{
    pthread_mutex_lock(&cache_lock);
    refresh_locked();
    *u = index < FG_MAX_DEVICES ? usage[index] : (fg_usage){0};
    pthread_mutex_unlock(&cache_lock);
}

unsigned fg_procs_of(unsigned index, int instance, char type, fg_proc *out, unsigned max)
{
    unsigned n = 0;
    pthread_mutex_lock(&cache_lock);
    refresh_locked();
    for (unsigned i = 0; i < cache.n && n < max; i++)
        if (cache.procs[i].device == index && (!type || cache.procs[i].type == type) &&
            (instance < 0 || cache.procs[i].instance == (unsigned)instance))
            out[n++] = cache.procs[i];
    pthread_mutex_unlock(&cache_lock);
    return n;
}

int fg_is_datacenter(const fg_device *d) { return strcmp(d->segment, "datacenter") == 0 || !d->segment[0]; }

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

/* x^e for 0 < x <= 1, within 1e-6: the clock under the power cap. Written out rather than libm's pow, since every
 * process that loads NVML (each nvidia-smi) would pay for loading libm. */
static double pow01(double x, double e)
{
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    int k = (int)((b >> 52) & 0x7ff) - 1023; /* x = m * 2^k, 1 <= m < 2 */
    b = (b & ((1ULL << 52) - 1)) | (1023ULL << 52);
    double m, t, t2, y, z, term = 1, r = 1;
    memcpy(&m, &b, sizeof m);
    t = (m - 1) / (m + 1), t2 = t * t; /* ln m = 2 atanh t, t <= 1/3 */
    y = e * (k * 0.69314718055994531 + 2 * t * (1 + t2 * (1 / 3.0 + t2 * (1 / 5.0 + t2 * (1 / 7.0 + t2 / 9.0)))));
    int n = (int)y - (y < (int)y); /* y = n + f, 0 <= f < 1 */
    z = y - n;
    for (int i = 1; i < 12; i++)
        term *= z / i, r += term; /* e^f */
    for (; n < 0; n++)
        r *= 0.36787944117144233; /* e^-1 */
    return r;
}

static long rounded(double x) { return x < 0 ? -(long)(0.5 - x) : (long)(x + 0.5); }

static unsigned slots_of(double seconds)
{
    double n = (double)rounded(seconds * SLOTS_PER_S);
    return n < 1 ? 1u : n > HISTORY ? HISTORY : (unsigned)n;
}

/* A slot's draw above the context idle, by kind, given its busy shares: the demand, cut to the cap. */
static void slot_excess(const fg_load_params *p, double compute, double memory, double *ex_c, double *ex_m)
{
    if (compute + memory > 1) { /* several processes' work overlapping: the GPU time-slices them */
        double k = 1 / (compute + memory);
        compute *= k, memory *= k;
    }
    double dc = compute * (p->compute_w - p->active_idle_w), dm = memory * (p->memory_w - p->active_idle_w);
    double room = p->cap_w - p->active_idle_w, demand = dc + dm;
    double scale = demand > room && demand > 0 ? room / demand : 1;
    *ex_c = dc * scale, *ex_m = dm * scale;
}

/* Caller holds cache_lock (the reader's mappings are fresh). */
static void summarize(const fg_device *d, uint64_t now, fg_ring_summary *s)
{
    const fg_load_params *p = &d->load;
    uint32_t compute[HISTORY], memory[HISTORY]; /* [i]: slot now - HISTORY + i; the last is now - 1 */
    unsigned n = now < HISTORY ? (unsigned)now : HISTORY;
    fg_state_reader_busy(&reader, d->index, now - n, n, compute, memory);
    memset(s, 0, sizeof *s);
    s->slot = now;

    unsigned period = slots_of(FG_LOAD_UTIL_PERIOD_S);
    uint64_t start = (now / period - 1) * period; /* the last whole period: slots start .. start + period - 1 */
    for (uint64_t k = start; k < start + period && k < now; k++) {
        if (k + n < now)
            continue;
        s->period_compute += compute[k + n - now];
        s->period_memory += memory[k + n - now];
    }
    s->period_compute /= (double)period * FG_STATE_SLOT_US;
    s->period_memory /= (double)period * FG_STATE_SLOT_US;

    unsigned window = slots_of(FG_LOAD_POWER_WINDOW_S);
    double fast = FG_LOAD_FAST_DECAY, slow = FG_LOAD_SLOW_DECAY; /* per slot */
    double wf = (1 - fast) * FG_LOAD_FAST_SHARE, ws = (1 - slow) * (1 - FG_LOAD_FAST_SHARE); /* weights of the newest slot */
    for (unsigned age = 0; age < n; age++) { /* age 0: slot now - 1 */
        unsigned i = n - 1 - age;
        if (!compute[i] && !memory[i]) {
            wf *= fast, ws *= slow;
            continue;
        }
        double ex_c, ex_m;
        slot_excess(p, compute[i] / (double)FG_STATE_SLOT_US, memory[i] / (double)FG_STATE_SLOT_US, &ex_c, &ex_m);
        if (age < window) {
            s->excess_w += (ex_c + ex_m) / window;
            s->busy = 1;
        }
        s->rise_c += (wf + ws) * (p->compute_c_per_w * ex_c + p->memory_c_per_w * ex_m);
        wf *= fast, ws *= slow;
    }
}

/* FAKEGPU_UTILIZATION: the board runs that share of compute work, steadily. */
static void pinned(const fg_device *d, double share, fg_ring_summary *s)
{
    const fg_load_params *p = &d->load;
    double ex_c, ex_m;
    memset(s, 0, sizeof *s);
    s->period_compute = share;
    slot_excess(p, share, 0, &ex_c, &ex_m);
    s->busy = share > 0;
    s->excess_w = ex_c + ex_m;
    s->rise_c = p->compute_c_per_w * ex_c + p->memory_c_per_w * ex_m;
}

static unsigned percent(double share)
{
    double v = (double)rounded(share * 100);
    return v < 0 ? 0u : v > 100 ? 100u : (unsigned)v;
}

/* A run's telemetry recording (replay.c) in place of the model, for what it covers now. Pins (FAKEGPU_POWER_W, ...)
 * still win: they are the caller's own. A replayed busy board is active (boost clocks, P0) unless its clock is
 * replayed too. */
static void replayed(const fg_device *d, fg_load *out)
{
    double v;
    if (fg_replay_value(d->index, FG_REPLAY_METRIC_GPU_UTIL, &v) && fg_cfg.pin_gpu_util < 0) {
        out->gpu_util = percent(v / 100);
        if (out->gpu_util && !out->active) {
            out->active = 1;
            out->sm_mhz = d->clock_boost_mhz;
            out->event_reasons &= ~(unsigned long long)nvmlClocksEventReasonGpuIdle;
            out->pstate = NVML_PSTATE_0;
        }
    }
    if (fg_replay_value(d->index, FG_REPLAY_METRIC_MEM_UTIL, &v) && fg_cfg.pin_mem_util < 0)
        out->mem_util = percent(v / 100);
    if (fg_replay_value(d->index, FG_REPLAY_METRIC_POWER_W, &v) && fg_cfg.pin_power_mw < 0)
        out->power_mw = (unsigned)rounded(v * 1000);
    if (fg_replay_value(d->index, FG_REPLAY_METRIC_TEMPERATURE_C, &v) && fg_cfg.pin_temperature < 0)
        out->temperature_c = (unsigned)rounded(v);
    if (fg_replay_value(d->index, FG_REPLAY_METRIC_SM_CLOCK_MHZ, &v))
        out->sm_mhz = (unsigned)rounded(v);
}

void fg_load_of(const fg_device *d, fg_load *out)
{
    const fg_load_params *p = &d->load;
    fg_ring_summary s;
    fg_usage u;
    pthread_mutex_lock(&cache_lock);
    refresh_locked();
    u = d->index < FG_MAX_DEVICES ? usage[d->index] : (fg_usage){0};
    if (fg_cfg.pin_gpu_util >= 0) {
        pinned(d, (fg_cfg.pin_gpu_util > 100 ? 100 : fg_cfg.pin_gpu_util) / 100.0, &s);
    } else {
        uint64_t now = fg_state_slot_of(fg_monotonic_ns());
        fg_ring_summary *cached = &summaries[d->index < FG_MAX_DEVICES ? d->index : 0];
        if (cached->slot != now)
            summarize(d, now, cached);
        s = *cached;
    }
    pthread_mutex_unlock(&cache_lock);

    /* Work in the window, or a context on a datacenter board: clocks up, the context-idle draw. The capture shows a
     * held context keeping a datacenter board at boost; desktop boards drop to P8 at idle, context or not, and no
     * capture says otherwise. */
    int held = u.compute_procs + u.graphics_procs > 0 && fg_is_datacenter(d);
    int active = held || s.busy || s.period_compute + s.period_memory > 0;
    double period_busy = s.period_compute + s.period_memory;
    memset(out, 0, sizeof *out);
    out->active = active;
    out->gpu_util = percent(period_busy);
    if (fg_cfg.pin_gpu_util >= 0)
        out->gpu_util = fg_cfg.pin_gpu_util > 100 ? 100u : (unsigned)fg_cfg.pin_gpu_util;
    double mem = s.period_compute * FG_LOAD_MEM_UTIL_COMPUTE + s.period_memory * FG_LOAD_MEM_UTIL_MEMORY;
    out->mem_util = percent(mem / 100);
    if (fg_cfg.pin_mem_util >= 0)
        out->mem_util = fg_cfg.pin_mem_util > 100 ? 100u : (unsigned)fg_cfg.pin_mem_util;

    double watts = active ? p->active_idle_w + s.excess_w : p->idle_w;
    out->power_mw = fg_cfg.pin_power_mw >= 0 ? (unsigned)fg_cfg.pin_power_mw : (unsigned)rounded(watts * 1000);

    double temp = p->idle_c + s.rise_c + (active ? p->compute_c_per_w * (p->active_idle_w - p->idle_w) : 0);
    out->temperature_c = fg_cfg.pin_temperature >= 0 ? (unsigned)fg_cfg.pin_temperature : (unsigned)rounded(temp);

    /* Idle, a board sits at the bottom of its clock table (the H200: 345 MHz, its lowest supported clock). */
    out->sm_mhz = active ? d->clock_boost_mhz : d->clock_graphics_min_mhz;
    out->video_mhz = active ? d->clock_video_mhz : (unsigned)p->video_idle_mhz;
    out->event_reasons = active ? nvmlClocksEventReasonNone : nvmlClocksEventReasonGpuIdle;
    double demand = s.period_compute * (p->compute_w - p->active_idle_w) +
                    s.period_memory * (p->memory_w - p->active_idle_w);
    if (active && demand > p->cap_w - p->active_idle_w) {
        double ratio = pow01((p->cap_w - p->active_idle_w) / demand, FG_LOAD_CLOCK_EXPONENT);
        unsigned mhz = (unsigned)rounded(d->clock_boost_mhz * ratio / CLOCK_STEP_MHZ) * CLOCK_STEP_MHZ;
        out->sm_mhz = mhz > d->clock_graphics_min_mhz ? mhz : d->clock_graphics_min_mhz;
        out->event_reasons = nvmlClocksEventReasonSwPowerCap;
    }
    /* A throttle a fault plan holds (fakegpu/faults/plan.py): its reasons, its clock while work runs, and for a
     * thermal one the temperature that makes a driver slow down, so the readings agree with each other. */
    fg_fault_throttling t;
    fg_fault_throttle_of(d->index, d->clock_boost_mhz, &t);
    if (t.reasons) {
        out->event_reasons |= t.reasons;
        if (active && t.mhz && out->sm_mhz > t.mhz)
            out->sm_mhz = t.mhz > d->clock_graphics_min_mhz ? t.mhz : d->clock_graphics_min_mhz;
        unsigned hot = (t.reasons & 0x40) && d->temp_slowdown_c ? d->temp_slowdown_c : d->temp_gpu_max_c;
        if ((t.reasons & 0x60) && fg_cfg.pin_temperature < 0 && out->temperature_c < hot)
            out->temperature_c = hot;
    }
    /* Datacenter boards with persistence on sit in P0 (the H200 did in every state captured); desktop cards drop to
     * P8 when idle. */
    out->pstate = fg_is_datacenter(d) || s.busy || period_busy > 0 ? NVML_PSTATE_0 : NVML_PSTATE_8;
    replayed(d, out);
}
