/* Power, temperature, fans and utilization: the profile's limits, the model's current values. */
#include <time.h>

#include "fg_nvml.h"

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    FG_DEVICE(device, d);
    FG_NEED(power);
    fg_load l;
    fg_load_of(d, &l);
    *power = l.power_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    FG_DEVICE(device, d);
    FG_NEED(limit);
    *limit = d->power_default_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int *defaultLimit)
{
    return nvmlDeviceGetPowerManagementLimit(device, defaultLimit);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return nvmlDeviceGetPowerManagementLimit(device, limit);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit,
                                                          unsigned int *maxLimit)
{
    FG_DEVICE(device, d);
    FG_NEED(minLimit);
    FG_NEED(maxLimit);
    *minLimit = d->power_min_mw;
    *maxLimit = d->power_max_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    FG_DEVICE(device, d);
    (void)d;
    FG_NEED(mode);
    *mode = NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    FG_DEVICE(device, d);
    FG_NEED(energy);
    /* mJ since the (fake) driver loaded, taken as boot: monotonic and the same in every process. */
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    unsigned long long ms = (unsigned long long)ts.tv_sec * 1000 + (unsigned long long)ts.tv_nsec / 1000000;
    fg_load l;
    fg_load_of(d, &l);
    *energy = ms * l.power_mw / 1000;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType, unsigned int *temp)
{
    FG_DEVICE(device, d);
    FG_NEED(temp);
    if (sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    fg_load l;
    fg_load_of(d, &l);
    *temp = l.temperature_c;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature)
{
    FG_NEED(temperature);
    if (temperature->version != nvmlTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned t = 0;
    nvmlReturn_t rc = nvmlDeviceGetTemperature(device, temperature->sensorType, &t);
    if (rc == NVML_SUCCESS)
        temperature->temperature = (int)t;
    return rc;
}

/* The profile's thresholds (measured on an H200 and an A100; an A100/H100's of the 550 branch otherwise, see
 * common/fg_devices.c); memory's only where memory has a sensor of its own. */
nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t thresholdType,
                                               unsigned int *temp)
{
    FG_DEVICE(device, d);
    FG_NEED(temp);
    switch (thresholdType) {
    case NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: *temp = d->temp_shutdown_c; break;
    case NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: *temp = d->temp_slowdown_c; break;
    case NVML_TEMPERATURE_THRESHOLD_GPU_MAX: *temp = d->temp_gpu_max_c; break;
    case NVML_TEMPERATURE_THRESHOLD_MEM_MAX:
        if (!d->temp_mem_max_c)
            return NVML_ERROR_NOT_SUPPORTED;
        *temp = d->temp_mem_max_c;
        break;
    case NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MIN:
    case NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR:
    case NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MAX:
    case NVML_TEMPERATURE_THRESHOLD_GPS_CURR: return NVML_ERROR_NOT_SUPPORTED;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

/* How far below T.Limit (the max operating temperature) the GPU runs: 50 C on a real H200 at 37 C with T.Limit 87.
 * Boards from Ada and Hopper on report it; the A100 (570.148.08) and T4 (595.91.07) -q -x captures in
 * NVIDIA/k8s-test-infra give gpu_temp_tlimit N/A, the H100, B200, L40S and GB200 ones a value. */
nvmlReturn_t nvmlDeviceGetMarginTemperature(nvmlDevice_t device, nvmlMarginTemperature_t *marginTempInfo)
{
    FG_DEVICE(device, d);
    FG_NEED(marginTempInfo);
    if (marginTempInfo->version != nvmlMarginTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (d->cc_major * 10 + d->cc_minor < 89)
        return NVML_ERROR_NOT_SUPPORTED;
    fg_load l;
    fg_load_of(d, &l);
    marginTempInfo->marginTemperature = (int)d->temp_gpu_max_c - (int)l.temperature_c;
    return NVML_SUCCESS;
}

/* A passively cooled board counts no fans (0 on a real H200) and has no fan speed to report, as nvidia-smi's
 * "N/A" shows. */
nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t device, unsigned int *numFans)
{
    FG_DEVICE(device, d);
    FG_NEED(numFans);
    *numFans = d->fans;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t device, unsigned int fan, unsigned int *speed)
{
    FG_DEVICE(device, d);
    FG_NEED(speed);
    if (!d->fans)
        return NVML_ERROR_NOT_SUPPORTED;
    if (fan >= d->fans)
        return NVML_ERROR_INVALID_ARGUMENT;
    fg_load l;
    fg_load_of(d, &l);
    *speed = 30 + l.gpu_util * 45 / 100;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    return nvmlDeviceGetFanSpeed_v2(device, 0, speed);
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    FG_DEVICE(device, d);
    FG_NEED(utilization);
    FG_NOT_IN_MIG_MODE(d);
    fg_load l;
    fg_load_of(d, &l);
    utilization->gpu = l.gpu_util;
    utilization->memory = l.mem_util;
    return NVML_SUCCESS;
}

/* Nothing here encodes or decodes video: engines idle, with the real sampling period. */
static nvmlReturn_t idle_engine(nvmlDevice_t device, unsigned int *utilization, unsigned int *samplingPeriodUs)
{
    FG_DEVICE(device, d);
    FG_NEED(utilization);
    FG_NEED(samplingPeriodUs);
    FG_NOT_IN_MIG_MODE(d);
    *utilization = 0;
    *samplingPeriodUs = 167000;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs)
{
    return idle_engine(device, utilization, samplingPeriodUs);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs)
{
    return idle_engine(device, utilization, samplingPeriodUs);
}

nvmlReturn_t nvmlDeviceGetJpgUtilization(nvmlDevice_t device, unsigned int *utilization,
                                         unsigned int *samplingPeriodUs)
{
    return idle_engine(device, utilization, samplingPeriodUs);
}

nvmlReturn_t nvmlDeviceGetOfaUtilization(nvmlDevice_t device, unsigned int *utilization,
                                         unsigned int *samplingPeriodUs)
{
    return idle_engine(device, utilization, samplingPeriodUs);
}

nvmlReturn_t nvmlDeviceGetEncoderStats(nvmlDevice_t device, unsigned int *sessionCount, unsigned int *averageFps,
                                       unsigned int *averageLatency)
{
    FG_DEVICE(device, d);
    (void)d;
    FG_NEED(sessionCount);
    FG_NEED(averageFps);
    FG_NEED(averageLatency);
    *sessionCount = *averageFps = *averageLatency = 0;
    return NVML_SUCCESS;
}

/* No NvFBC capture runs on a fake board: no sessions (a real H200 answers zeros). */
nvmlReturn_t nvmlDeviceGetFBCStats(nvmlDevice_t device, nvmlFBCStats_t *fbcStats)
{
    FG_DEVICE(device, d);
    (void)d;
    FG_NEED(fbcStats);
    memset(fbcStats, 0, sizeof *fbcStats);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerSource(nvmlDevice_t device, nvmlPowerSource_t *powerSource)
{
    FG_DEVICE(device, d);
    (void)d;
    FG_NEED(powerSource);
    *powerSource = NVML_POWER_SOURCE_AC; /* no fake board runs on a battery */
    return NVML_SUCCESS;
}

/* Time clocks were held back by each policy since the driver loaded. A real H200 answers the six policies (the two
 * totals are INVALID_ARGUMENT there); FakeGPU keeps no history of throttling, so no time is counted against any. */
nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t device, nvmlPerfPolicyType_t perfPolicyType,
                                          nvmlViolationTime_t *violTime)
{
    FG_DEVICE(device, d);
    FG_NEED(violTime);
    if ((unsigned)perfPolicyType > NVML_PERF_POLICY_RELIABILITY)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
    violTime->referenceTime = now / 1000;
    /* Time a fault plan's throttles of this policy have held the clocks back (ns); none otherwise. */
    fg_fault_throttling t;
    fg_fault_throttle_of(d->index, d->clock_boost_mhz, &t);
    violTime->violationTime = perfPolicyType == NVML_PERF_POLICY_POWER        ? t.power_ns
                              : perfPolicyType == NVML_PERF_POLICY_THERMAL    ? t.thermal_ns
                              : perfPolicyType == NVML_PERF_POLICY_SYNC_BOOST ? t.sync_ns
                                                                              : 0;
    return NVML_SUCCESS;
}
