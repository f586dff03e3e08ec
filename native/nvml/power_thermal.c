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

nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t thresholdType,
                                               unsigned int *temp)
{
    FG_DEVICE(device, d);
    FG_NEED(temp);
    /* Values of an A100/H100; memory max only where memory has its own sensor (HBM). */
    int hbm = d->memory_type[0] == 'H';
    switch (thresholdType) {
    case NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: *temp = 92; break;
    case NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: *temp = 89; break;
    case NVML_TEMPERATURE_THRESHOLD_GPU_MAX: *temp = 87; break;
    case NVML_TEMPERATURE_THRESHOLD_MEM_MAX:
        if (!hbm)
            return NVML_ERROR_NOT_SUPPORTED;
        *temp = 95;
        break;
    case NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MIN:
    case NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR:
    case NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MAX:
    case NVML_TEMPERATURE_THRESHOLD_GPS_CURR: return NVML_ERROR_NOT_SUPPORTED;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

/* Passively cooled boards (fans: 0) have no fan to report, as nvidia-smi's "N/A" shows. */
nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t device, unsigned int *numFans)
{
    FG_DEVICE(device, d);
    FG_NEED(numFans);
    if (!d->fans)
        return NVML_ERROR_NOT_SUPPORTED;
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
