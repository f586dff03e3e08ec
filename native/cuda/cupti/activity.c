/* CUPTI's activity API, for a profiler in the process (PyTorch's Kineto behind torch.profiler): the GPU work the
 * timeline log sees (common/fgc_timeline.h), as activity records in the client's buffers. The driver hands every
 * timeline record to this library's sink while any activity kind is enabled (fgc_private.h), log or no log.
 *
 * Kernels, copies, fills and NCCL's collectives are not run, so their device times are simulated: each is priced
 * with the board's price sheet, which `fakegpu run` computes from the roofline, the efficiency table and the
 * topology model and hands over in FAKEGPU_PRICE_SHEET (fakegpu/perf/timeline_price.py, price_sheet: the same numbers `fakegpu run --timeline`
 * prices with, a collective's the topology model's samples), and placed on its stream after the previous piece of
 * work there and no earlier than its launch (a collective's: than its call's return, after the peers arrived).
 * A synchronisation waits (sleeps) until the simulated work it waits for is done, as the real call would block:
 * the profiler drops records that end after its window, which closes right after a synchronisation.
 *
 * Records are written as the work is queued, into the buffer the client's request callback gave, and handed back
 * through its completion callback when the buffer is full or on cuptiActivityFlushAll. Every record is laid out
 * as the newest version of its structure in CUPTI 13's cupti_activity.h; the older versions a client built against
 * CUDA 12 reads share their leading fields. */
#include <pthread.h>
#include <regex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#pragma GCC visibility push(default)
#include <cupti.h>
#pragma GCC visibility pop

#include "fgc_private.h"
#include "fgc_timeline.h"

typedef CUpti_ActivityKernel11 kernel_rec;
typedef CUpti_ActivityMemcpy6 memcpy_rec;
typedef CUpti_ActivityMemset4 memset_rec;

#define ALIGN8(n) (((n) + 7) & ~(size_t)7)
#define STREAMS 256
#define EVENTS 1024
#define EXT_KINDS CUPTI_EXTERNAL_CORRELATION_KIND_SIZE
#define EXT_DEPTH 64

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static CUpti_BuffersCallbackRequestFunc requested;
static CUpti_BuffersCallbackCompleteFunc completed;
static CUpti_TimestampCallbackFunc client_clock;
static uint64_t enabled;  /* bit per CUpti_ActivityKind below 64 */
static int sink_installed; /* 0 not now, 1 installed, -1 the driver has no sink (not FakeGPU's) */
static int sheet_read;
static uint8_t *buf;       /* the client's buffer being filled */
static size_t buf_size, buf_used;
static size_t dropped;
static uint32_t next_correlation;

/* The simulated device: when each stream's last piece of work ends, and when each recorded event fires. */
static struct {
    uint64_t key;
    uint64_t busy; /* ns on the client's clock */
    uint32_t id;
} streams[STREAMS];
static uint32_t next_stream_id = 7; /* CUDA numbers the legacy default stream 7 in its records */
static struct {
    uint64_t event, at;
} events[EVENTS];

/* Per thread, as CUPTI keeps them: the external ids pushed on each kind's stack, and the GEMM whose stand-in
 * kernel the thread launches next (its shape arrives just before the launch). */
static __thread uint64_t ext_stack[EXT_KINDS][EXT_DEPTH];
static __thread int ext_depth[EXT_KINDS];
static __thread struct {
    const char *name;
    uint64_t a, b, d;
    int set;
} pending_gemm;

/* ---- the price sheet (FAKEGPU_PRICE_SHEET): "key=v,v,...;key=..." ---- */
#define DTYPES 12
#define COLL_KINDS 8    /* coll.c's fgn_coll */
#define COLL_RANKS 16   /* the largest group the sheet may price (it samples one node's: 2..8) */
#define COLL_SAMPLES 32
static struct {
    int loaded;
    /* per roofline dtype: FLOP/s and B/s at the shares the roofline expects, kernel fixed s, in/out bytes */
    struct {
        char name[8];
        double compute, memory, fixed, in, out, bmm_compute, bmm_memory;
    } gemm[DTYPES];
    int ngemm;
    struct {
        int code;
        char dtype[8];
    } types[32], fast[8];
    int ntypes, nfast;
    struct {
        char letter;
        char dtype[8];
    } letters[8];
    int nletters;
    double elementwise_bw, elementwise_fixed, reduction_bw, reduction_fixed;
    double copy_bw, copy_fixed, fill_bw, fill_fixed, pcie_bw, fixed;
    double elements_per_thread, bytes_per_element;
    char one_element_prefix[16]; /* names launched with one thread per element (cuDNN's stand-ins) */
    struct {
        regex_t re;
        int reduction;
    } classes[32]; /* kernel_class's rules, in order: the first match decides */
    int nclasses;
    /* per collective (coll.c's order) and group size: the topology model's (bytes, seconds) at sizes ascending,
     * linear between them (timeline_price.collective_samples: the model is linear between its switch points) */
    struct {
        int n;
        double bytes[COLL_SAMPLES], seconds[COLL_SAMPLES];
    } coll[COLL_KINDS][COLL_RANKS + 1];
} sheet;

static void parse_pairs(const char *v, int letters, void *out, int *n, int max)
{
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", v);
    char *save = NULL;
    for (char *t = strtok_r(tmp, ",", &save); t && *n < max; t = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(t, ':');
        if (!colon)
            continue;
        *colon = 0;
        if (letters) {
            sheet.letters[*n].letter = t[0];
            snprintf(sheet.letters[*n].dtype, sizeof sheet.letters[0].dtype, "%s", colon + 1);
        } else {
            struct { int code; char dtype[8]; } *o = out;
            o[*n].code = atoi(t);
            snprintf(o[*n].dtype, sizeof o[0].dtype, "%s", colon + 1);
        }
        (*n)++;
    }
}

static void load_sheet(void)
{
    const char *env = getenv("FAKEGPU_PRICE_SHEET");
    if (!env || !*env)
        return;
    char *copy = strdup(env), *save = NULL;
    if (!copy)
        return;
    for (char *item = strtok_r(copy, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(item, '=');
        if (!eq)
            continue;
        *eq = 0;
        const char *k = item, *v = eq + 1;
        double x[5] = {0};
        int got = sscanf(v, "%lg,%lg,%lg,%lg,%lg", &x[0], &x[1], &x[2], &x[3], &x[4]);
        if (!strncmp(k, "gemm.", 5) || !strncmp(k, "bmm.", 4)) {
            const char *dt = strchr(k, '.') + 1;
            int i = 0;
            while (i < sheet.ngemm && strcmp(sheet.gemm[i].name, dt))
                i++;
            if (i == DTYPES)
                continue;
            if (i == sheet.ngemm) {
                snprintf(sheet.gemm[i].name, sizeof sheet.gemm[i].name, "%s", dt);
                sheet.ngemm++;
            }
            if (k[0] == 'g' && got == 5) {
                sheet.gemm[i].compute = x[0], sheet.gemm[i].memory = x[1], sheet.gemm[i].fixed = x[2];
                sheet.gemm[i].in = x[3], sheet.gemm[i].out = x[4];
            } else if (k[0] == 'b' && got >= 2) {
                sheet.gemm[i].bmm_compute = x[0], sheet.gemm[i].bmm_memory = x[1];
            }
        } else if (!strcmp(k, "types")) {
            parse_pairs(v, 0, sheet.types, &sheet.ntypes, 32);
        } else if (!strcmp(k, "fast")) {
            parse_pairs(v, 0, sheet.fast, &sheet.nfast, 8);
        } else if (!strcmp(k, "letters")) {
            parse_pairs(v, 1, NULL, &sheet.nletters, 8);
        } else if (!strcmp(k, "elementwise") && got == 2) {
            sheet.elementwise_bw = x[0], sheet.elementwise_fixed = x[1];
        } else if (!strcmp(k, "reduction") && got == 2) {
            sheet.reduction_bw = x[0], sheet.reduction_fixed = x[1];
        } else if (!strcmp(k, "thread") && got >= 2) {
            const char *prefix = strchr(strchr(v, ',') + 1, ',');
            sheet.elements_per_thread = x[0], sheet.bytes_per_element = x[1];
            snprintf(sheet.one_element_prefix, sizeof sheet.one_element_prefix, "%s", prefix ? prefix + 1 : "");
        } else if (!strcmp(k, "class") && (v[0] == 'r' || v[0] == 'o') && v[1] == ':' && sheet.nclasses < 32) {
            if (!regcomp(&sheet.classes[sheet.nclasses].re, v + 2, REG_EXTENDED | REG_ICASE | REG_NOSUB))
                sheet.classes[sheet.nclasses++].reduction = v[0] == 'r';
        } else if (!strncmp(k, "coll.", 5)) {
            unsigned kind = 0, ranks = 0;
            if (sscanf(k + 5, "%u.%u", &kind, &ranks) != 2 || kind >= COLL_KINDS || ranks > COLL_RANKS)
                continue;
            int n = 0;
            char *save2 = NULL;
            for (char *t = strtok_r(eq + 1, ",", &save2); t && n < COLL_SAMPLES; t = strtok_r(NULL, ",", &save2))
                if (sscanf(t, "%lg:%lg", &sheet.coll[kind][ranks].bytes[n], &sheet.coll[kind][ranks].seconds[n]) == 2)
                    n++;
            sheet.coll[kind][ranks].n = n >= 2 ? n : 0;
        } else if (!strcmp(k, "copy") && got == 2) {
            sheet.copy_bw = x[0], sheet.copy_fixed = x[1];
        } else if (!strcmp(k, "fill") && got == 2) {
            sheet.fill_bw = x[0], sheet.fill_fixed = x[1];
        } else if (!strcmp(k, "pcie") && got == 2) {
            sheet.pcie_bw = x[0], sheet.fixed = x[1];
        }
    }
    free(copy);
    sheet.loaded = sheet.ngemm > 0 && sheet.elementwise_bw > 0 && sheet.reduction_bw > 0 && sheet.copy_bw > 0 &&
                   sheet.fill_bw > 0 && sheet.pcie_bw > 0 && sheet.elements_per_thread > 0;
    if (!sheet.loaded)
        fg_warn("libcupti: FAKEGPU_PRICE_SHEET is incomplete: kernels are given 1 us each");
}

/* Without a sheet (a program started outside `fakegpu run`) a piece of work is given this long. */
#define UNPRICED_S 1e-6

static const char *dtype_of(uint64_t types, const char *routine)
{
    unsigned atype = types & 0xffff, compute = (types >> 16) & 0xffff, flags = (unsigned)(types >> 48);
    const char *dt = NULL;
    for (int i = 0; i < sheet.ntypes && atype != 0xffff; i++)
        if (sheet.types[i].code == (int)atype)
            dt = sheet.types[i].dtype;
    if (!dt) {
        char letter = routine && !strncmp(routine, "cublas", 6) ? routine[6] : 0;
        dt = "fp32";
        for (int i = 0; i < sheet.nletters; i++)
            if (sheet.letters[i].letter == letter)
                dt = sheet.letters[i].dtype;
    }
    if (!strcmp(dt, "fp32")) {
        for (int i = 0; i < sheet.nfast; i++)
            if (sheet.fast[i].code == (int)compute)
                return sheet.fast[i].dtype;
        if (flags & FGC_TL_GEMM_TF32)
            return "tf32";
    }
    return dt;
}

/* The roofline's expected device time (fakegpu/perf/roofline.py, estimate_op): the kernel's fixed cost plus
 * the slower of its FLOPs at the compute rate and its bytes at the memory rate. */
static double roofline_s(double flops, double bytes, double compute, double memory, double fixed)
{
    double tc = flops && compute > 0 ? flops / compute : 0, tm = bytes && memory > 0 ? bytes / memory : 0;
    return fixed + (tc > tm ? tc : tm);
}

static double gemm_s(const char *routine, uint64_t a, uint64_t b, uint64_t types)
{
    double m = (double)(a & 0xffffffff), n = (double)(a >> 32), k = (double)(b & 0xffffffff);
    double batch = (double)(b >> 32);
    int batched = batch > 1;
    if (batch < 1)
        batch = 1;
    const char *dt = dtype_of(types, routine);
    for (int i = 0; i < sheet.ngemm; i++) {
        if (strcmp(sheet.gemm[i].name, dt))
            continue;
        double e = sheet.gemm[i].in, out = sheet.gemm[i].out;
        double flops = 2.0 * batch * m * n * k, bytes = batch * (m * k * e + m * n * out) + batch * k * n * e;
        return batched ? roofline_s(flops, bytes, sheet.gemm[i].bmm_compute, sheet.gemm[i].bmm_memory,
                                    sheet.gemm[i].fixed)
                       : roofline_s(flops, bytes, sheet.gemm[i].compute, sheet.gemm[i].memory, sheet.gemm[i].fixed);
    }
    return UNPRICED_S;
}

/* Whether `name` is priced as a reduction (fakegpu/perf/trace_kernels.py, kernel_class): remembered by address,
 * as kernel names live as long as the process. */
#define CLASS_SLOTS 1024
static struct {
    const char *name;
    int reduction;
} class_cache[CLASS_SLOTS];

static int is_reduction(const char *name)
{
    size_t h = ((uintptr_t)name >> 3) * 0x9e3779b97f4a7c15ULL >> 54;
    if (class_cache[h].name == name)
        return class_cache[h].reduction;
    int reduction = 0;
    for (int i = 0; i < sheet.nclasses; i++) {
        if (!regexec(&sheet.classes[i].re, name, 0, NULL, 0)) {
            reduction = sheet.classes[i].reduction;
            break;
        }
    }
    class_cache[h].name = name, class_cache[h].reduction = reduction;
    return reduction;
}

/* A kernel whose work the launch does not reveal, as Pricer.kernel estimates it from its threads. */
static double estimate_s(const char *name, double threads)
{
    int whole = sheet.one_element_prefix[0] && !strncmp(name, sheet.one_element_prefix, strlen(sheet.one_element_prefix));
    double bytes = (whole ? threads : threads * sheet.elements_per_thread) * sheet.bytes_per_element;
    return is_reduction(name) ? roofline_s(0, bytes, 0, sheet.reduction_bw, sheet.reduction_fixed)
                              : roofline_s(0, bytes, 0, sheet.elementwise_bw, sheet.elementwise_fixed);
}

/* A collective as Pricer.collective prices it: one rank's is the kernel's start only; a group's, the topology
 * model's time for its bytes, linear between the sheet's samples (and beyond the last, at the last segment's
 * rate). A group the sheet has no samples for (past one node) is unpriced. Each process prices its collective
 * alone: when the peers arrive is not known in-process, so a rank's wait for them is not in the kernel (in
 * `fakegpu run --timeline` the ranks are played together and it is). */
static double coll_s(unsigned kind, uint64_t bytes, unsigned ranks)
{
    if (ranks < 2 || !bytes)
        return sheet.fixed;
    if (kind >= COLL_KINDS || ranks > COLL_RANKS || !sheet.coll[kind][ranks].n)
        return UNPRICED_S;
    const double *x = sheet.coll[kind][ranks].bytes, *y = sheet.coll[kind][ranks].seconds, s = (double)bytes;
    int n = sheet.coll[kind][ranks].n, i = 0;
    while (i < n - 2 && s > x[i + 1])
        i++;
    if (s == x[i + 1]) /* a sampled size: the model's own price, to the bit */
        return y[i + 1];
    return y[i] + (s - x[i]) * (y[i + 1] - y[i]) / (x[i + 1] - x[i]);
}

/* NCCL's kernel name for a collective, as the timeline's trace spells it (fakegpu/perf/timeline.py, _work, from
 * timeline_price's COLLECTIVES, NCCL_OPS and NCCL_TYPES): kept for the process, as the profiler reads names late. */
static const char *coll_name(unsigned kind, unsigned type, unsigned op)
{
    static const char *kinds[] = {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllToAll",
                                  "SendRecv", "SendRecv"};
    static const char *ops[] = {"Sum", "Prod", "Max", "Min", "Avg"};
    static const char *types[] = {"i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16"};
    static char *names[COLL_KINDS][5][10];
    kind = kind < COLL_KINDS ? kind : 0, op = op < 5 ? op : 0, type = type < 10 ? type : 7;
    if (!names[kind][op][type]) {
        char tmp[96];
        snprintf(tmp, sizeof tmp, "ncclDevKernel_%s_%s_%s_RING_LL", kinds[kind], ops[op], types[type]);
        names[kind][op][type] = strdup(tmp);
    }
    return names[kind][op][type] ? names[kind][op][type] : "ncclDevKernel";
}

/* ---- clocks ---- */

/* Timestamps are on the client's clock when it registered one. Kineto's counts CPU cycles (its converter makes
 * them ns afterwards), so a duration in ns becomes ticks at the rate measured against CLOCK_MONOTONIC. */
static double ticks_per_ns = 1.0;
static int calibrated;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ns(void)
{
    if (client_clock)
        return client_clock();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

#define CALIBRATION_NS 5000000ULL /* 5 ms once per process: the rate to a few parts per million */

static void calibrate_locked(void)
{
    if (calibrated)
        return;
    calibrated = 1;
    ticks_per_ns = 1.0;
    if (!client_clock)
        return;
    uint64_t m0 = mono_ns(), c0 = client_clock(), m1, c1;
    do {
        m1 = mono_ns();
        c1 = client_clock();
    } while (m1 - m0 < CALIBRATION_NS);
    if (c1 > c0)
        ticks_per_ns = (double)(c1 - c0) / (double)(m1 - m0);
}

static uint64_t ticks(double ns) { return ns > 0 ? (uint64_t)(ns * ticks_per_ns + 0.5) : 0; }

/* Block until the client's clock reaches `t`, as a synchronisation with simulated work would. */
static void wait_until(uint64_t t)
{
    for (;;) {
        uint64_t now = now_ns();
        if (now >= t)
            return;
        uint64_t d = (uint64_t)((double)(t - now) / ticks_per_ns) + 1;
        struct timespec ts = {(time_t)(d / 1000000000ULL), (long)(d % 1000000000ULL)};
        nanosleep(&ts, NULL);
    }
}

/* ---- buffers ---- */

static int on(CUpti_ActivityKind k) { return (unsigned)k < 64 && (enabled >> k & 1); }

static void complete_locked(void)
{
    if (!buf)
        return;
    uint8_t *b = buf;
    size_t used = buf_used, size = buf_size;
    buf = NULL;
    buf_used = buf_size = 0;
    if (completed)
        completed(NULL, 0, b, size, used);
}

/* Room for one record of `n` bytes in the client's buffer (NULL: none, the record is counted as dropped). */
static void *room_locked(size_t n)
{
    n = ALIGN8(n);
    if (buf && buf_used + n > buf_size)
        complete_locked();
    if (!buf && requested) {
        uint8_t *b = NULL;
        size_t size = 0, max_records = 0;
        requested(&b, &size, &max_records);
        if (b && size >= n)
            buf = b, buf_size = size, buf_used = 0;
    }
    if (!buf) {
        dropped++;
        return NULL;
    }
    void *p = buf + buf_used;
    memset(p, 0, n);
    buf_used += n;
    return p;
}

static size_t record_size(CUpti_ActivityKind k)
{
    switch (k) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        return ALIGN8(sizeof(kernel_rec));
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
        return ALIGN8(sizeof(CUpti_ActivityAPI));
    case CUPTI_ACTIVITY_KIND_MEMCPY:
        return ALIGN8(sizeof(memcpy_rec));
    case CUPTI_ACTIVITY_KIND_MEMSET:
        return ALIGN8(sizeof(memset_rec));
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
        return ALIGN8(sizeof(CUpti_ActivityExternalCorrelation));
    default:
        return 0;
    }
}

/* ---- the simulated device ---- */

static uint64_t stream_key(const fgc_tl_record *r)
{
    /* the per-thread default stream (handle 2) is one stream per thread */
    return (r->stream ^ (uint64_t)r->device << 48 ^ (r->stream == 2 ? (uint64_t)r->tid << 8 : 0)) + 1;
}

static int stream_slot(const fgc_tl_record *r)
{
    uint64_t key = stream_key(r);
    unsigned h = (unsigned)((key * 0x9e3779b97f4a7c15ULL) >> 56);
    for (unsigned i = 0; i < STREAMS; i++) {
        unsigned j = (h + i) % STREAMS;
        if (streams[j].key == key)
            return (int)j;
        if (!streams[j].key) {
            streams[j].key = key;
            streams[j].id = next_stream_id++;
            return (int)j;
        }
    }
    return 0; /* more streams than slots: the rest share one timeline */
}

static uint64_t *event_at(uint64_t event, int create)
{
    unsigned h = (unsigned)((event * 0x9e3779b97f4a7c15ULL) >> 54);
    for (unsigned i = 0; i < EVENTS; i++) {
        unsigned j = (h + i) % EVENTS;
        if (events[j].event == event)
            return &events[j].at;
        if (!events[j].event) {
            if (!create)
                return NULL;
            events[j].event = event;
            return &events[j].at;
        }
    }
    return NULL;
}

static void api_record_locked(CUpti_CallbackId cbid, uint64_t start, uint64_t end, uint32_t tid, uint32_t corr)
{
    if (!on(CUPTI_ACTIVITY_KIND_RUNTIME))
        return;
    CUpti_ActivityAPI *a = room_locked(sizeof *a);
    if (!a)
        return;
    a->kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    a->cbid = cbid;
    a->start = start, a->end = end;
    a->processId = (uint32_t)getpid();
    a->threadId = tid;
    a->correlationId = corr;
}

/* The external ids on top of this thread's stacks, one record each, tied to the call's correlation id. */
static void external_records_locked(uint32_t corr)
{
    if (!on(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION))
        return;
    for (int k = 0; k < EXT_KINDS; k++) {
        if (!ext_depth[k])
            continue;
        CUpti_ActivityExternalCorrelation *e = room_locked(sizeof *e);
        if (!e)
            return;
        e->kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
        e->externalKind = (CUpti_ExternalCorrelationKind)k;
        e->externalId = ext_stack[k][ext_depth[k] - 1];
        e->correlationId = corr;
    }
}

static void work_locked(const fgc_tl_record *r, const char *name)
{
    uint64_t end_host = now_ns(), start_host = end_host - ticks(r->dur);
    int slot = stream_slot(r);
    uint64_t start = streams[slot].busy > end_host ? streams[slot].busy : end_host;
    uint32_t corr = ++next_correlation;
    double seconds = UNPRICED_S;
    CUpti_CallbackId cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
    if (r->kind == FGC_TL_KERNEL) {
        if (pending_gemm.set && name && pending_gemm.name && !strcmp(pending_gemm.name, name)) {
            if (sheet.loaded)
                seconds = gemm_s(name, pending_gemm.a, pending_gemm.b, pending_gemm.d);
        } else if (sheet.loaded) { /* what the launch does not reveal: estimated from its threads */
            double grid = (double)(r->b & 0xffffffff) * (double)(r->b >> 32) * (double)(r->c & 0xffff);
            double block = (double)(r->c >> 16 & 0xffff) * (double)(r->c >> 32 & 0xffff) * (double)(r->c >> 48);
            seconds = estimate_s(name ? name : "(unnamed kernel)", grid * block);
        }
        pending_gemm.set = 0;
    } else if (r->kind == FGC_TL_COLL) {
        /* NCCL launches its kernel with cudaLaunchKernelExC (cuLaunchKernelEx in newer versions) */
        cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060;
        name = coll_name(r->sub, (unsigned)(r->d & 0xffff), (unsigned)(r->d >> 16 & 0xffff));
        if (sheet.loaded)
            seconds = coll_s(r->sub, r->a, (unsigned)(r->c & 0xffffffff));
    } else if (r->kind == FGC_TL_MEMCPY) {
        cbid = r->b ? CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020 : CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020;
        if (sheet.loaded) {
            if (r->sub == FGC_TL_DTOD)
                seconds = roofline_s(0, 2.0 * (double)r->a, 0, sheet.copy_bw, sheet.copy_fixed);
            else if (r->sub == FGC_TL_HTOH)
                seconds = sheet.fixed;
            else
                seconds = sheet.fixed + (double)r->a / sheet.pcie_bw;
        }
    } else {
        cbid = r->b ? CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020 : CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020;
        if (sheet.loaded)
            seconds = roofline_s(0, (double)r->a, 0, sheet.fill_bw, sheet.fill_fixed);
    }
    uint64_t end = start + ticks(seconds * 1e9);
    streams[slot].busy = end;
    external_records_locked(corr);
    api_record_locked(cbid, start_host, end_host, r->tid, corr);
    uint32_t device = r->device, context = r->device + 1, stream = streams[slot].id;
    if ((r->kind == FGC_TL_KERNEL || r->kind == FGC_TL_COLL) &&
        (on(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) || on(CUPTI_ACTIVITY_KIND_KERNEL))) {
        kernel_rec *k = room_locked(sizeof *k);
        if (k) {
            k->kind = on(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) ? CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
                                                                 : CUPTI_ACTIVITY_KIND_KERNEL;
            k->start = start, k->end = k->completed = end;
            k->queued = k->submitted = end_host;
            k->deviceId = device, k->contextId = context, k->streamId = stream;
            k->gridX = (int32_t)(r->b & 0xffffffff), k->gridY = (int32_t)(r->b >> 32);
            k->gridZ = (int32_t)(r->c & 0xffff);
            k->blockX = (int32_t)(r->c >> 16 & 0xffff), k->blockY = (int32_t)(r->c >> 32 & 0xffff);
            k->blockZ = (int32_t)(r->c >> 48);
            if (r->kind == FGC_TL_COLL) /* one channel of NCCL_LL_MAX_NTHREADS threads; no launch was recorded */
                k->gridX = k->gridY = k->gridZ = 1, k->blockX = 512, k->blockY = k->blockZ = 1;
            else
                k->dynamicSharedMemory = (int32_t)r->d;
            k->correlationId = corr;
            k->gridId = corr;
            k->name = name ? name : "(unnamed kernel)";
            k->launchType = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
        }
    } else if (r->kind == FGC_TL_MEMCPY && on(CUPTI_ACTIVITY_KIND_MEMCPY)) {
        memcpy_rec *m = room_locked(sizeof *m);
        if (m) {
            static const uint8_t kinds[][3] = {
                [FGC_TL_HTOD] = {CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE,
                                 CUPTI_ACTIVITY_MEMORY_KIND_DEVICE},
                [FGC_TL_DTOH] = {CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
                                 CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE},
                [FGC_TL_DTOD] = {CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
                                 CUPTI_ACTIVITY_MEMORY_KIND_DEVICE},
                [FGC_TL_HTOH] = {CUPTI_ACTIVITY_MEMCPY_KIND_HTOH, CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE,
                                 CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE}};
            unsigned sub = r->sub <= FGC_TL_HTOH ? r->sub : FGC_TL_HTOD;
            m->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
            m->copyKind = kinds[sub][0], m->srcKind = kinds[sub][1], m->dstKind = kinds[sub][2];
            m->flags = r->b ? CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC : 0;
            m->bytes = r->a;
            m->start = start, m->end = end;
            m->deviceId = device, m->contextId = context, m->streamId = stream;
            m->correlationId = corr;
            m->copyCount = 1;
        }
    } else if (r->kind == FGC_TL_MEMSET && on(CUPTI_ACTIVITY_KIND_MEMSET)) {
        memset_rec *m = room_locked(sizeof *m);
        if (m) {
            m->kind = CUPTI_ACTIVITY_KIND_MEMSET;
            m->bytes = r->a;
            m->start = start, m->end = end;
            m->deviceId = device, m->contextId = context, m->streamId = stream;
            m->correlationId = corr;
            m->flags = r->b ? CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC : 0;
            m->memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
        }
    }
}

/* Every timeline record, on the thread that made it (fgc_tl_sink). */
static void sink(const fgc_tl_record *r, const char *name)
{
    uint64_t wait = 0;
    pthread_mutex_lock(&lock);
    if (!enabled) {
        pthread_mutex_unlock(&lock);
        return;
    }
    switch (r->kind) {
    case FGC_TL_GEMM:
        pending_gemm.name = name, pending_gemm.a = r->a, pending_gemm.b = r->b, pending_gemm.d = r->d;
        pending_gemm.set = 1;
        break;
    case FGC_TL_KERNEL:
    case FGC_TL_COLL:
    case FGC_TL_MEMCPY:
    case FGC_TL_MEMSET:
        work_locked(r, name);
        if (r->kind == FGC_TL_MEMCPY && !r->b) /* a blocking copy returns when it is done */
            wait = streams[stream_slot(r)].busy;
        break;
    case FGC_TL_EVENT_RECORD: {
        uint64_t *at = event_at(r->a, 1), now = now_ns(), busy = streams[stream_slot(r)].busy;
        if (at)
            *at = busy > now ? busy : now;
        break;
    }
    case FGC_TL_STREAM_WAIT: {
        uint64_t *at = event_at(r->a, 0);
        int slot = stream_slot(r);
        if (at && *at > streams[slot].busy)
            streams[slot].busy = *at;
        break;
    }
    case FGC_TL_SYNC:
        if (r->sub == FGC_TL_SYNC_STREAM) {
            wait = streams[stream_slot(r)].busy;
        } else if (r->sub == FGC_TL_SYNC_EVENT) {
            uint64_t *at = event_at(r->a, 0);
            wait = at ? *at : 0;
        } else {
            for (int i = 0; i < STREAMS; i++)
                if (streams[i].key && streams[i].busy > wait)
                    wait = streams[i].busy;
        }
        break;
    default:
        break;
    }
    pthread_mutex_unlock(&lock);
    if (wait)
        wait_until(wait);
}

/* ---- the API ---- */

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc funcBufferRequested,
                                                    CUpti_BuffersCallbackCompleteFunc funcBufferCompleted)
{
    if (!funcBufferRequested || !funcBufferCompleted)
        return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&lock);
    requested = funcBufferRequested, completed = funcBufferCompleted;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc funcTimestamp)
{
    if (!funcTimestamp)
        return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&lock);
    client_clock = funcTimestamp;
    calibrated = 0;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

static int valid_kind(CUpti_ActivityKind kind)
{
    return kind > CUPTI_ACTIVITY_KIND_INVALID && kind < CUPTI_ACTIVITY_KIND_COUNT;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind)
{
    if (!valid_kind(kind))
        return CUPTI_ERROR_INVALID_KIND;
    pthread_mutex_lock(&lock);
    calibrate_locked();
    if (!sink_installed) {
        if (!sheet_read) {
            load_sheet();
            sheet_read = 1;
        }
        sink_installed = fgc_timeline_sink(sink) == 0 ? 1 : -1;
    }
    if ((unsigned)kind < 64) /* the kinds FakeGPU makes no records of are accepted and stay empty */
        enabled |= 1ULL << kind;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind)
{
    if (!valid_kind(kind))
        return CUPTI_ERROR_INVALID_KIND;
    pthread_mutex_lock(&lock);
    if ((unsigned)kind < 64)
        enabled &= ~(1ULL << kind);
    if (!enabled && sink_installed > 0) { /* the driver stops making records nobody wants */
        fgc_timeline_sink(NULL);
        sink_installed = 0;
    }
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable)
{
    (void)cbid, (void)enable; /* per-call filters: FakeGPU records only launches, copies and fills */
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable)
{
    (void)cbid, (void)enable;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnableCudaEventDeviceTimestamps(uint8_t enable)
{
    (void)enable;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag)
{
    (void)flag; /* every record is complete when written: a plain flush hands them over as a forced one does */
    pthread_mutex_lock(&lock);
    complete_locked();
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t *buffer, size_t validBufferSizeBytes, CUpti_Activity **record)
{
    if (!buffer || !record)
        return CUPTI_ERROR_INVALID_PARAMETER;
    size_t at = 0;
    if (*record) {
        uint8_t *p = (uint8_t *)*record;
        if (p < buffer || p >= buffer + validBufferSizeBytes)
            return CUPTI_ERROR_INVALID_PARAMETER;
        size_t n = record_size((*record)->kind);
        if (!n)
            return CUPTI_ERROR_INVALID_KIND;
        at = (size_t)(p - buffer) + n;
    }
    if (at >= validBufferSizeBytes) {
        *record = NULL;
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    }
    *record = (CUpti_Activity *)(buffer + at);
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId, size_t *droppedOut)
{
    (void)context, (void)streamId;
    if (!droppedOut)
        return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&lock);
    *droppedOut = dropped;
    dropped = 0;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id)
{
    if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID || kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE)
        return CUPTI_ERROR_INVALID_PARAMETER; /* what CUPTI answers for an invalid external kind */
    if (ext_depth[kind] == EXT_DEPTH) /* deeper than any profiler nests: the outer ids are the ones kept */
        return CUPTI_SUCCESS;
    ext_stack[kind][ext_depth[kind]++] = id;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t *lastId)
{
    if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID || kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE)
        return CUPTI_ERROR_INVALID_PARAMETER; /* what CUPTI answers for an invalid external kind */
    if (!ext_depth[kind])
        return CUPTI_ERROR_QUEUE_EMPTY;
    uint64_t id = ext_stack[kind][--ext_depth[kind]];
    if (lastId)
        *lastId = id;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivitySetAttribute(CUpti_ActivityAttribute attr, size_t *valueSize, void *value)
{
    (void)attr; /* buffer sizes and pools: the client's buffers are the only ones */
    if (!valueSize || !value)
        return CUPTI_ERROR_INVALID_PARAMETER;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetVersion(uint32_t *version)
{
    if (!version)
        return CUPTI_ERROR_INVALID_PARAMETER;
    *version = CUPTI_API_VERSION;
    return CUPTI_SUCCESS;
}

/* The callback API: a profiler subscribes for launch and resource callbacks it uses for extra metadata. FakeGPU
 * never calls them (its records carry what the profiler needs), so a subscription is kept and stays silent. */
struct CUpti_Subscriber_st {
    CUpti_CallbackFunc callback;
    void *userdata;
};
static struct CUpti_Subscriber_st subscriber;
static atomic_int subscribed;

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *out, CUpti_CallbackFunc callback, void *userdata)
{
    if (!out)
        return CUPTI_ERROR_INVALID_PARAMETER;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&subscribed, &expected, 1))
        return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    subscriber.callback = callback, subscriber.userdata = userdata;
    *out = &subscriber;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle s)
{
    if (s != &subscriber)
        return CUPTI_ERROR_INVALID_PARAMETER;
    atomic_store(&subscribed, 0);
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle s, CUpti_CallbackDomain domain,
                                         CUpti_CallbackId cbid)
{
    (void)enable, (void)domain, (void)cbid;
    return s == &subscriber ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

CUptiResult CUPTIAPI cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle s, CUpti_CallbackDomain domain)
{
    (void)enable, (void)domain;
    return s == &subscriber ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

CUptiResult CUPTIAPI cuptiFinalize(void)
{
    pthread_mutex_lock(&lock);
    complete_locked();
    enabled = 0;
    if (sink_installed > 0) {
        fgc_timeline_sink(NULL);
        sink_installed = 0;
    }
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

/* The names of the runtime calls FakeGPU makes records of; a real CUPTI knows every call's. */
CUptiResult CUPTIAPI cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid, const char **name)
{
    if (!name)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
        switch (cbid) {
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000: *name = "cudaLaunchKernel"; return CUPTI_SUCCESS;
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060: *name = "cudaLaunchKernelExC"; return CUPTI_SUCCESS;
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020: *name = "cudaMemcpy"; return CUPTI_SUCCESS;
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020: *name = "cudaMemcpyAsync"; return CUPTI_SUCCESS;
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020: *name = "cudaMemset"; return CUPTI_SUCCESS;
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020: *name = "cudaMemsetAsync"; return CUPTI_SUCCESS;
        default: break;
        }
    }
    *name = NULL;
    return CUPTI_ERROR_INVALID_PARAMETER;
}

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char **str)
{
    if (!str)
        return CUPTI_ERROR_INVALID_PARAMETER;
    switch (result) {
    case CUPTI_SUCCESS: *str = "CUPTI_SUCCESS"; break;
    case CUPTI_ERROR_INVALID_PARAMETER: *str = "CUPTI_ERROR_INVALID_PARAMETER"; break;
    case CUPTI_ERROR_INVALID_KIND: *str = "CUPTI_ERROR_INVALID_KIND"; break;
    case CUPTI_ERROR_MAX_LIMIT_REACHED: *str = "CUPTI_ERROR_MAX_LIMIT_REACHED"; break;
    case CUPTI_ERROR_QUEUE_EMPTY: *str = "CUPTI_ERROR_QUEUE_EMPTY"; break;
    case CUPTI_ERROR_NOT_SUPPORTED: *str = "CUPTI_ERROR_NOT_SUPPORTED"; break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"; break;
    default: *str = "CUPTI_ERROR_UNKNOWN"; return CUPTI_ERROR_INVALID_PARAMETER;
    }
    return CUPTI_SUCCESS;
}
