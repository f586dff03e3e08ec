/* nvmlDeviceGetFieldValues: the fields nvidia-smi -q and --query-gpu read (ECC modes and totals, the clock-event
 * counters, remapped rows, the recovery action), each from the query that answers it on its own; every other
 * field answers NOT_SUPPORTED in its own slot, as a real driver does for fields a board lacks. */
#include <sys/time.h>

#include "fg_nvml.h"

typedef nvmlReturn_t (*field_fn)(nvmlDevice_t device, nvmlFieldValue_t *v);

static nvmlReturn_t put_uint(nvmlFieldValue_t *v, nvmlReturn_t rc, unsigned x)
{
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
    v->value.uiVal = x;
    return rc;
}

static nvmlReturn_t put_ull(nvmlFieldValue_t *v, nvmlReturn_t rc, unsigned long long x)
{
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    v->value.ullVal = x;
    return rc;
}

static nvmlReturn_t ecc_mode(nvmlDevice_t device, nvmlFieldValue_t *v)
{
    nvmlEnableState_t cur = NVML_FEATURE_DISABLED, pend = NVML_FEATURE_DISABLED;
    nvmlReturn_t rc = nvmlDeviceGetEccMode(device, &cur, &pend);
    return put_uint(v, rc, v->fieldId == NVML_FI_DEV_ECC_CURRENT ? cur : pend);
}

static nvmlReturn_t ecc_total(nvmlDevice_t device, nvmlFieldValue_t *v)
{
    int dbe = v->fieldId == NVML_FI_DEV_ECC_DBE_VOL_TOTAL || v->fieldId == NVML_FI_DEV_ECC_DBE_AGG_TOTAL;
    int agg = v->fieldId == NVML_FI_DEV_ECC_SBE_AGG_TOTAL || v->fieldId == NVML_FI_DEV_ECC_DBE_AGG_TOTAL;
    unsigned long long n = 0;
    nvmlReturn_t rc = nvmlDeviceGetTotalEccErrors(device, dbe ? NVML_MEMORY_ERROR_TYPE_UNCORRECTED
                                                              : NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                                  agg ? NVML_AGGREGATE_ECC : NVML_VOLATILE_ECC, &n);
    return put_ull(v, rc, n);
}

/* Time (ns) clocks were held back, by policy: the violation counters, which the clock-event reason counters of
 * nvidia-smi read too (nvml.h maps SW power cap, sync boost and SW thermal onto them). The hardware slowdowns
 * have no policy of their own; FakeGPU models no throttling, so their time is 0 as the policies' is. */
static nvmlReturn_t violation(nvmlDevice_t device, nvmlFieldValue_t *v)
{
    if (v->fieldId == NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN ||
        v->fieldId == NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN)
        return put_ull(v, NVML_SUCCESS, 0);
    nvmlPerfPolicyType_t policy = v->fieldId == NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN
                                      ? NVML_PERF_POLICY_THERMAL
                                      : (nvmlPerfPolicyType_t)(v->fieldId - NVML_FI_DEV_PERF_POLICY_POWER);
    nvmlViolationTime_t t = {0};
    nvmlReturn_t rc = nvmlDeviceGetViolationStatus(device, policy, &t);
    return put_ull(v, rc, t.violationTime);
}

static nvmlReturn_t remapped(nvmlDevice_t device, nvmlFieldValue_t *v)
{
    nvmlRemappedRowsInfo_v2_t r = {0};
    nvmlReturn_t rc = nvmlDeviceGetRemappedRows_v2(device, &r);
    unsigned x = 0;
    switch (v->fieldId) {
    case NVML_FI_DEV_REMAPPED_COR: x = r.corrActiveRemaps; break;
    case NVML_FI_DEV_REMAPPED_UNC: x = r.uncActiveRemaps; break;
    case NVML_FI_DEV_REMAPPED_PENDING: x = r.bPending; break;
    case NVML_FI_DEV_REMAPPED_FAILURE: x = r.bFailureOccurred; break;
    case NVML_FI_DEV_REMAPPED_ROWS_COR_INACTIVE: x = r.corrInactiveRemaps; break;
    default: x = r.uncInactiveRemaps;
    }
    return put_uint(v, rc, x);
}

/* The PCIe link's replays: the counter NVML has a call for, and its rollovers, which a link that never replays
 * never has. */
static nvmlReturn_t replays(nvmlDevice_t device, nvmlFieldValue_t *v)
{
    unsigned n = 0;
    nvmlReturn_t rc = nvmlDeviceGetPcieReplayCounter(device, &n);
    return put_uint(v, rc, v->fieldId == NVML_FI_DEV_PCIE_REPLAY_COUNTER ? n : 0);
}

/* Nothing a fake board goes through calls for a reset or a reboot. */
static nvmlReturn_t recovery_action(nvmlDevice_t device, nvmlFieldValue_t *v)
{
    (void)device;
    return put_uint(v, NVML_SUCCESS, NVML_GPU_RECOVERY_ACTION_NONE);
}

static field_fn field(unsigned id)
{
    switch (id) {
    case NVML_FI_DEV_ECC_CURRENT:
    case NVML_FI_DEV_ECC_PENDING: return ecc_mode;
    case NVML_FI_DEV_ECC_SBE_VOL_TOTAL:
    case NVML_FI_DEV_ECC_DBE_VOL_TOTAL:
    case NVML_FI_DEV_ECC_SBE_AGG_TOTAL:
    case NVML_FI_DEV_ECC_DBE_AGG_TOTAL: return ecc_total;
    case NVML_FI_DEV_PERF_POLICY_POWER:
    case NVML_FI_DEV_PERF_POLICY_THERMAL:
    case NVML_FI_DEV_PERF_POLICY_SYNC_BOOST:
    case NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT:
    case NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION:
    case NVML_FI_DEV_PERF_POLICY_RELIABILITY:
    case NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN:
    case NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN:
    case NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN: return violation;
    case NVML_FI_DEV_REMAPPED_COR:
    case NVML_FI_DEV_REMAPPED_UNC:
    case NVML_FI_DEV_REMAPPED_PENDING:
    case NVML_FI_DEV_REMAPPED_FAILURE:
    case NVML_FI_DEV_REMAPPED_ROWS_COR_INACTIVE:
    case NVML_FI_DEV_REMAPPED_ROWS_UNC_INACTIVE: return remapped;
    case NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: return recovery_action;
    case NVML_FI_DEV_PCIE_REPLAY_COUNTER:
    case NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER: return replays;
    default: return NULL;
    }
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
    FG_DEVICE(device, d);
    (void)d;
    if (valuesCount < 0 || (valuesCount && !values))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct timeval now;
    gettimeofday(&now, NULL);
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        field_fn fn = field(v->fieldId);
        v->timestamp = (long long)now.tv_sec * 1000000LL + now.tv_usec;
        v->latencyUsec = 0;
        v->nvmlReturn = fn ? fn(device, v) : NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}
