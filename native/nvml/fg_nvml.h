/* Internals shared by the hand-written NVML exports. Everything here is hidden; only nvml.h's functions
 * are exported (default visibility is switched on around the header, and exports.map lists them). */
#ifndef FG_NVML_H
#define FG_NVML_H

#pragma GCC visibility push(default)
#include <nvml.h>
#pragma GCC visibility pop

#include <stddef.h>
#include <string.h>

#include "fg_devices.h"
#include "fg_faults.h"
#include "fg_log.h"
#include "fg_state.h"
#include "stubs_generated.h"

/* A device handle is the address of one of these; fg_lookup() validates it by address before use, so a
 * garbage handle is INVALID_ARGUMENT instead of a crash. MIG device handles live in their own table
 * (fg_mig_handles, mig.c), so a MIG handle can never pass for its parent. */
struct nvmlDevice_st {
    unsigned index; /* the board in fg_devs */
    unsigned mig;   /* 0: the whole GPU; else 1 + the MIG device index under the board */
};

/* Knobs read once at first init, so queries never call getenv (which is not thread-safe against setenv). */
typedef struct {
    char driver_version[32];
    int cuda_version;
    int pin_temperature, pin_gpu_util, pin_mem_util, pin_power_mw; /* -1: follow the model */
    unsigned state_ttl_ms;
    unsigned cpu_count;
    char state_dir[512];
} fg_config;

/* Dynamic usage of one device, from the shared state. */
typedef struct {
    unsigned long long used_bytes; /* processes' memory, idle baseline not included */
    unsigned compute_procs, graphics_procs;
} fg_usage;

/* What the load model (model.c) says a device reads now. */
typedef struct {
    unsigned gpu_util, mem_util; /* % of NVML's last sample period */
    unsigned power_mw;           /* averaged over the last second */
    unsigned temperature_c;
    unsigned sm_mhz, video_mhz;  /* current clocks (graphics = SM) */
    unsigned long long event_reasons;
    nvmlPstates_t pstate;
    int active; /* a context is on the board, or work ran lately */
} fg_load;

/* replay.c: the value a run's telemetry recording gives the device's metric (FG_REPLAY_METRIC_*) now: 1 and *out,
 * or 0 where the model answers (no recording, before the metric's first sample, a metric it does not name). */
FG_HIDDEN int fg_replay_value(unsigned device, unsigned metric, double *out);

FG_HIDDEN extern fg_devset fg_devs;
FG_HIDDEN extern fg_config fg_cfg;
FG_HIDDEN extern struct nvmlDevice_st fg_handles[FG_MAX_DEVICES];
FG_HIDDEN extern struct nvmlDevice_st fg_mig_handles[FG_MAX_DEVICES][FG_MIG_MAX_INSTANCES];

/* The stub every not-implemented export returns through (generated bodies call it with their index). */
FG_HIDDEN nvmlReturn_t fg_unsupported(unsigned stub_index);
FG_HIDDEN extern const char *const fg_stub_names[FG_STUB_COUNT];

FG_HIDDEN int fg_is_initialized(void);
/* Init check plus handle validation; *d is the device behind a good handle. A MIG device handle is
 * NOT_SUPPORTED here: queries that do not say they take one refuse it, as drivers refuse per-instance clocks,
 * power or temperatures (nvml.h: "not currently supported" on MIG). */
FG_HIDDEN nvmlReturn_t fg_lookup(nvmlDevice_t h, const fg_device **d);

/* ---- MIG (mig.c) ---- */
/* Like fg_lookup, but a MIG device handle is accepted too: *m is its instance, NULL for a whole GPU. */
FG_HIDDEN nvmlReturn_t fg_lookup_any(nvmlDevice_t h, const fg_device **d, const fg_mig_instance **m);
/* Give every MIG handle its board and index (once, when the devices load). */
FG_HIDDEN void fg_mig_handles_init(void);
/* A MIG device's framebuffer: its profile's memory. */
FG_HIDDEN void fg_mig_memory(const fg_device *d, const fg_mig_instance *m, unsigned long long *total,
                             unsigned long long *used);
/* A MIG device's BAR1: its share of the board's (parent_total), all free. */
FG_HIDDEN void fg_mig_bar1(const fg_device *d, const fg_mig_instance *m, unsigned long long parent_total,
                           nvmlBAR1Memory_t *out);

#define FG_DEVICE(handle, var)                                                                                    \
    const fg_device *var = NULL;                                                                                  \
    do {                                                                                                          \
        nvmlReturn_t fg_rc_ = fg_lookup((handle), &var);                                                          \
        if (fg_rc_ != NVML_SUCCESS)                                                                               \
            return fg_rc_;                                                                                        \
    } while (0)

/* For queries real drivers answer on MIG device handles too: `mvar` is the instance or NULL. */
#define FG_DEVICE_OR_MIG(handle, var, mvar)                                                                       \
    const fg_device *var = NULL;                                                                                  \
    const fg_mig_instance *mvar = NULL;                                                                           \
    do {                                                                                                          \
        nvmlReturn_t fg_rc_ = fg_lookup_any((handle), &var, &mvar);                                               \
        if (fg_rc_ != NVML_SUCCESS)                                                                               \
            return fg_rc_;                                                                                        \
    } while (0)

#define FG_NEED(ptr)                                                                                              \
    do {                                                                                                          \
        if (!(ptr))                                                                                               \
            return NVML_ERROR_INVALID_ARGUMENT;                                                                   \
    } while (0)

/* Whole-GPU queries nvml.h says a MIG-enabled GPU does not answer (utilization, engine and process
 * utilization, core count, remapped rows): they are per instance there, and not reported per instance either. */
#define FG_NOT_IN_MIG_MODE(d)                                                                                     \
    do {                                                                                                          \
        if ((d)->mig_mode)                                                                                        \
            return NVML_ERROR_NOT_SUPPORTED;                                                                      \
    } while (0)

/* Copy a string out the way NVML does: INSUFFICIENT_SIZE when it (with its NUL) does not fit. */
FG_HIDDEN nvmlReturn_t fg_copy_out(char *dst, unsigned length, const char *src);

/* ---- the dynamic model (model.c) ---- */
FG_HIDDEN void fg_usage_of(unsigned index, fg_usage *u);
/* This device's process entries, pid order; returns how many (at most max). type 'C', 'G' or 0 for both;
 * instance >= 0: only those whose memory is in that MIG instance (GPU instance ID + 1). */
FG_HIDDEN unsigned fg_procs_of(unsigned index, int instance, char type, fg_proc *out, unsigned max);
FG_HIDDEN void fg_state_invalidate(void);
FG_HIDDEN unsigned long long fg_mem_allocated(const fg_device *d, const fg_usage *u);
/* Utilization, power, temperature, clocks, event reasons and P-state of a whole board, pins applied. */
FG_HIDDEN void fg_load_of(const fg_device *d, fg_load *out);
FG_HIDDEN int fg_is_datacenter(const fg_device *d);

/* ---- topology (pci_nvlink.c) ---- */
FG_HIDDEN unsigned fg_socket_of(const fg_device *d);
FG_HIDDEN nvmlGpuTopologyLevel_t fg_topology(const fg_device *a, const fg_device *b);
FG_HIDDEN void fg_fill_pci(const fg_device *d, nvmlPciInfo_t *pci);

#endif
