/* Clocks, performance state and clock-event (throttle) reasons. */
#include "fg_nvml.h"

static unsigned max_clock(const fg_device *d, nvmlClockType_t type)
{
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM: return d->clock_boost_mhz;
    case NVML_CLOCK_MEM: return d->clock_mem_mhz;
    case NVML_CLOCK_VIDEO: return (unsigned)d->load.video_mhz;
    default: return 0;
    }
}

static unsigned current_clock(const fg_device *d, nvmlClockType_t type)
{
    fg_load l;
    fg_load_of(d, &l);
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM: return l.sm_mhz;
    case NVML_CLOCK_MEM: return d->clock_mem_mhz; /* HBM/GDDR run at full speed in P0 (idle or not, on the H200) */
    case NVML_CLOCK_VIDEO: return l.video_mhz;
    default: return 0;
    }
}

#define FG_CLOCK_TYPE(type)                                                                                       \
    do {                                                                                                          \
        if ((unsigned)(type) >= NVML_CLOCK_COUNT)                                                                 \
            return NVML_ERROR_INVALID_ARGUMENT;                                                                   \
    } while (0)

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    FG_DEVICE(device, d);
    FG_NEED(clock);
    FG_CLOCK_TYPE(type);
    *clock = current_clock(d, type);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    FG_DEVICE(device, d);
    FG_NEED(clock);
    FG_CLOCK_TYPE(type);
    *clock = max_clock(d, type);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType, unsigned int *clockMHz)
{
    FG_DEVICE(device, d);
    FG_NEED(clockMHz);
    FG_CLOCK_TYPE(clockType);
    *clockMHz = max_clock(d, clockType);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                   unsigned int *clockMHz)
{
    return nvmlDeviceGetApplicationsClock(device, clockType, clockMHz);
}

nvmlReturn_t nvmlDeviceGetMaxCustomerBoostClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                unsigned int *clockMHz)
{
    return nvmlDeviceGetMaxClockInfo(device, clockType, clockMHz);
}

nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t clockType, nvmlClockId_t clockId,
                                unsigned int *clockMHz)
{
    FG_DEVICE(device, d);
    FG_NEED(clockMHz);
    FG_CLOCK_TYPE(clockType);
    switch (clockId) {
    case NVML_CLOCK_ID_CURRENT: *clockMHz = current_clock(d, clockType); break;
    case NVML_CLOCK_ID_APP_CLOCK_TARGET:
    case NVML_CLOCK_ID_APP_CLOCK_DEFAULT:
    case NVML_CLOCK_ID_CUSTOMER_BOOST_MAX: *clockMHz = max_clock(d, clockType); break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned int *count, unsigned int *clocksMHz)
{
    FG_DEVICE(device, d);
    FG_NEED(count);
    unsigned want = *count;
    *count = 1;
    if (want < 1 || !clocksMHz)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    clocksMHz[0] = d->clock_mem_mhz;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device, unsigned int memoryClockMHz,
                                                  unsigned int *count, unsigned int *clocksMHz)
{
    FG_DEVICE(device, d);
    FG_NEED(count);
    if (memoryClockMHz != d->clock_mem_mhz)
        return NVML_ERROR_NOT_FOUND;
    /* 15 MHz steps from boost down to 210 MHz, as real boards list them, highest first. */
    unsigned n = (d->clock_boost_mhz - 210) / 15 + 1;
    unsigned want = *count;
    *count = n;
    if (want < n || !clocksMHz)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    for (unsigned i = 0; i < n; i++)
        clocksMHz[i] = d->clock_boost_mhz - 15 * i;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    FG_DEVICE(device, d);
    FG_NEED(pState);
    fg_load l;
    fg_load_of(d, &l);
    *pState = l.pstate;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    return nvmlDeviceGetPerformanceState(device, pState);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *clocksEventReasons)
{
    FG_DEVICE(device, d);
    FG_NEED(clocksEventReasons);
    fg_load l;
    fg_load_of(d, &l);
    *clocksEventReasons = l.event_reasons;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *clocksThrottleReasons)
{
    return nvmlDeviceGetCurrentClocksEventReasons(device, clocksThrottleReasons);
}

nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device,
                                                      unsigned long long *supportedClocksEventReasons)
{
    FG_DEVICE(device, d);
    (void)d;
    FG_NEED(supportedClocksEventReasons);
    *supportedClocksEventReasons = nvmlClocksEventReasonAll;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device,
                                                         unsigned long long *supportedClocksThrottleReasons)
{
    return nvmlDeviceGetSupportedClocksEventReasons(device, supportedClocksThrottleReasons);
}

nvmlReturn_t nvmlDeviceGetAutoBoostedClocksEnabled(nvmlDevice_t device, nvmlEnableState_t *isEnabled,
                                                   nvmlEnableState_t *defaultIsEnabled)
{
    FG_DEVICE(device, d);
    (void)d;
    FG_NEED(isEnabled);
    FG_NEED(defaultIsEnabled);
    return NVML_ERROR_NOT_SUPPORTED; /* auto boost control ended with Pascal */
}
