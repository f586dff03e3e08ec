/* Clocks, performance state and clock-event (throttle) reasons. */
#include "fg_nvml.h"

static unsigned max_clock(const fg_device *d, nvmlClockType_t type)
{
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM: return d->clock_boost_mhz;
    case NVML_CLOCK_MEM: return d->clock_mem_mhz;
    case NVML_CLOCK_VIDEO: return d->clock_video_mhz;
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

/* Application clocks are set for graphics (SM) and memory; a real H200 (580.159.04) has none for video, and its
 * customer boost clock is a graphics one (tests/data/gpu/h200/nvml.json). */
static int has_app_clock(nvmlClockType_t type) { return type != NVML_CLOCK_VIDEO; }
static int has_boost_clock(nvmlClockType_t type) { return type == NVML_CLOCK_GRAPHICS || type == NVML_CLOCK_SM; }

nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType, unsigned int *clockMHz)
{
    FG_DEVICE(device, d);
    FG_NEED(clockMHz);
    FG_CLOCK_TYPE(clockType);
    if (!has_app_clock(clockType))
        return NVML_ERROR_NOT_SUPPORTED;
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
    FG_DEVICE(device, d);
    FG_NEED(clockMHz);
    FG_CLOCK_TYPE(clockType);
    if (!has_boost_clock(clockType))
        return NVML_ERROR_NOT_SUPPORTED;
    *clockMHz = max_clock(d, clockType);
    return NVML_SUCCESS;
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
        if (!has_app_clock(clockType))
            return NVML_ERROR_NOT_SUPPORTED;
        *clockMHz = max_clock(d, clockType);
        break;
    case NVML_CLOCK_ID_CUSTOMER_BOOST_MAX:
        if (!has_boost_clock(clockType))
            return NVML_ERROR_NOT_SUPPORTED;
        *clockMHz = max_clock(d, clockType);
        break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

/* The profile's memory clocks (a real H200 lists 3201 and 2201 MHz), highest first. */
nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned int *count, unsigned int *clocksMHz)
{
    FG_DEVICE(device, d);
    FG_NEED(count);
    unsigned want = *count;
    *count = d->mem_clock_count;
    if (want < d->mem_clock_count || !clocksMHz)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(clocksMHz, d->mem_clocks, d->mem_clock_count * sizeof *clocksMHz);
    return NVML_SUCCESS;
}

static int is_mem_clock(const fg_device *d, unsigned mhz)
{
    for (unsigned i = 0; i < d->mem_clock_count; i++)
        if (d->mem_clocks[i] == mhz)
            return 1;
    return 0;
}

/* 15 MHz steps from boost down to the profile's lowest graphics clock, highest first, the same list under every
 * memory clock (as a real H200 and H100 list them: 1980 down to 345 MHz). */
nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device, unsigned int memoryClockMHz,
                                                  unsigned int *count, unsigned int *clocksMHz)
{
    FG_DEVICE(device, d);
    FG_NEED(count);
    if (!is_mem_clock(d, memoryClockMHz))
        return NVML_ERROR_NOT_FOUND;
    unsigned n = (d->clock_boost_mhz - d->clock_graphics_min_mhz) / 15 + 1;
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
    /* The nine reasons driver 580 reports on a real H200 (511); the board-limit and reliability bits nvml.h also
     * defines are not among them, though their violation counters answer (tests/data/gpu/h200/nvml.json). */
    *supportedClocksEventReasons = 0x1FF;
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

/* The utilization domains that drive P-state changes: graphics, framebuffer, video and bus are present on a real
 * H200, with no thresholds reported; their busy shares are the load model's. */
nvmlReturn_t nvmlDeviceGetDynamicPstatesInfo(nvmlDevice_t device, nvmlGpuDynamicPstatesInfo_t *pDynamicPstatesInfo)
{
    FG_DEVICE(device, d);
    FG_NEED(pDynamicPstatesInfo);
    fg_load l;
    fg_load_of(d, &l);
    memset(pDynamicPstatesInfo, 0, sizeof *pDynamicPstatesInfo);
    for (unsigned i = NVML_GPU_UTILIZATION_DOMAIN_GPU; i <= NVML_GPU_UTILIZATION_DOMAIN_BUS; i++)
        pDynamicPstatesInfo->utilization[i].bIsPresent = 1;
    pDynamicPstatesInfo->utilization[NVML_GPU_UTILIZATION_DOMAIN_GPU].percentage = l.gpu_util;
    pDynamicPstatesInfo->utilization[NVML_GPU_UTILIZATION_DOMAIN_FB].percentage = l.mem_util;
    return NVML_SUCCESS;
}
