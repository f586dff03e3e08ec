/* Event sets. The Xid events are the run's fault board's (native/common/fg_faults.h): a set delivers each Xid
 * that fires on a device it registered for Xids, once, from its registration on. With nothing to deliver the
 * wait lasts the whole timeout like the real call (monitoring loops rely on that to pace themselves). */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "fg_nvml.h"

#define FG_EVENT_MAGIC 0x46474556u /* "FGEV": catches a freed or foreign set */

#define FG_EVENT_POLL_NS 10000000L /* how often a waiting set looks at the board */

struct nvmlEventSet_st {
    unsigned magic;
    unsigned long long registered[FG_MAX_DEVICES];
    uint64_t since_ns[FG_MAX_DEVICES]; /* a device's events count from its first registration */
    uint64_t delivered;                /* bit i: board record i was handed out */
};

_Static_assert(FG_FAULT_MAX_RECORDS <= 64, "one delivered bit per board record");

/* The events driver 580 offers on a real H200 (65439: every type nvml.h defines); those about memory errors only where
 * ECC is on, retirement and remapping (DRAM) events only from Ampere on, the MIG one only where MIG is. Only Xids are
 * ever delivered (the fault board's). */
static unsigned long long supported(const fg_device *d)
{
    unsigned long long m = nvmlEventTypePState | nvmlEventTypeXidCriticalError | nvmlEventTypeClock |
                           nvmlEventTypePowerSourceChange | nvmlEventTypeGpuUnavailableError |
                           nvmlEventTypeGpuRecoveryAction;
    if (d->mig_supported)
        m |= nvmlEventMigConfigChange;
    if (d->ecc)
        m |= nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypeSingleBitEccErrorStorm |
             nvmlEventTypeNonFatalPoisonError | nvmlEventTypeFatalPoisonError;
    if (d->ecc && d->cc_major >= 8)
        m |= nvmlEventTypeDramRetirementEvent | nvmlEventTypeDramRetirementFailure;
    return m;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (!fg_is_initialized())
        return NVML_ERROR_UNINITIALIZED;
    FG_NEED(set);
    struct nvmlEventSet_st *s = calloc(1, sizeof *s);
    if (!s)
        return NVML_ERROR_MEMORY;
    s->magic = FG_EVENT_MAGIC;
    *set = s;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    if (!fg_is_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!set || set->magic != FG_EVENT_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    set->magic = 0;
    free(set);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    FG_DEVICE(device, d);
    FG_NEED(eventTypes);
    *eventTypes = supported(d);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set)
{
    FG_DEVICE(device, d);
    if (!set || set->magic != FG_EVENT_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (eventTypes & ~supported(d))
        return NVML_ERROR_NOT_SUPPORTED;
    if (!set->registered[d->index])
        set->since_ns[d->index] = fg_fault_now_ns();
    set->registered[d->index] |= eventTypes;
    return NVML_SUCCESS;
}

/* The next fired Xid this set is owed, into data; 0 when there is none yet. */
static int take_event(nvmlEventSet_t set, nvmlEventData_t *data)
{
    const fg_fault_board *b = fg_faults();
    unsigned n = fg_fault_count(b);
    uint64_t now = fg_fault_now_ns();
    for (unsigned i = 0; i < n; i++) {
        const fg_fault_record *r = &b->rec[i];
        if ((set->delivered >> i & 1) || r->kind != FG_FAULT_KIND_XID || r->device >= fg_devs.count ||
            !(set->registered[r->device] & nvmlEventTypeXidCriticalError) || r->fire_ns > now ||
            r->fire_ns < set->since_ns[r->device])
            continue;
        set->delivered |= 1ULL << i;
        data->device = &fg_handles[r->device];
        data->eventType = nvmlEventTypeXidCriticalError;
        data->eventData = r->code;
        data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu; /* not attributed to a MIG instance */
        return 1;
    }
    return 0;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    if (!fg_is_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!set || set->magic != FG_EVENT_MAGIC || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += timeoutms / 1000;
    end.tv_nsec += (long)(timeoutms % 1000) * 1000000L;
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    for (;;) {
        if (take_event(set, data))
            return NVML_SUCCESS;
        struct timespec now, step = {0, FG_EVENT_POLL_NS};
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long left = (long long)(end.tv_sec - now.tv_sec) * 1000000000LL + (end.tv_nsec - now.tv_nsec);
        if (left <= 0)
            return NVML_ERROR_TIMEOUT;
        if (left < FG_EVENT_POLL_NS)
            step.tv_nsec = (long)left;
        while (nanosleep(&step, &step) == -1 && errno == EINTR)
            ;
    }
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
}
