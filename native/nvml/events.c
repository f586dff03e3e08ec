/* Event sets. A fake GPU never raises Xid, ECC or clock events, so waiting always times out, but it waits
 * the whole timeout like the real call (monitoring loops rely on that to pace themselves). */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "fg_nvml.h"

#define FG_EVENT_MAGIC 0x46474556u /* "FGEV": catches a freed or foreign set */

struct nvmlEventSet_st {
    unsigned magic;
    unsigned long long registered[FG_MAX_DEVICES];
};

static unsigned long long supported(const fg_device *d)
{
    unsigned long long m = nvmlEventTypePState | nvmlEventTypeXidCriticalError | nvmlEventTypeClock;
    if (d->ecc)
        m |= nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError;
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
    set->registered[d->index] |= eventTypes;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    if (!fg_is_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!set || set->magic != FG_EVENT_MAGIC || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec ts = {.tv_sec = timeoutms / 1000, .tv_nsec = (long)(timeoutms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
    return NVML_ERROR_TIMEOUT;
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
}
