"""Walk every board's MIG surface with real pynvml; print one JSON document.

Run like pynvml_walk.py (libnvidia-ml.so.1 on LD_LIBRARY_PATH). Per board: MIG mode, the MIG device handle at
every index up to one past the maximum, and per MIG device its identity, memory, attributes, IDs and every
query pynvml_walk.py asks a whole GPU; then the GPU instance profiles (every NVML_GPU_INSTANCE_PROFILE_*
constant up to the first INVALID_ARGUMENT), their placements and remaining capacity, the GPU instances with
their compute instances, and what creating or destroying one answers.
"""

from __future__ import annotations

import json
import sys

import pynvml as n
from pynvml_walk import call, device_queries  # run as a script: its folder is on sys.path


def is_mig(h) -> int:
    # pynvml hands back the c_uint itself
    return n.nvmlDeviceIsMigDeviceHandle(h).value


def mig_device(h, parent):
    q = device_queries(h, parent)
    q.update({
        "attributes": call(n.nvmlDeviceGetAttributes, h),
        "is_mig": call(is_mig, h),
        "gpu_instance_id": call(n.nvmlDeviceGetGpuInstanceId, h),
        "compute_instance_id": call(n.nvmlDeviceGetComputeInstanceId, h),
        "parent_index": call(lambda x: n.nvmlDeviceGetIndex(n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(x)), h),
        "by_uuid": call(lambda x: n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByUUID(n.nvmlDeviceGetUUID(x))), h),
        "by_uuid_index": call(lambda x: n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID(n.nvmlDeviceGetUUID(x))), h),
    })
    return q


def error(fn, *args):
    return call(fn, *args).get("error")


def gpu_instance(gi):
    info = n.nvmlGpuInstanceGetInfo(gi)
    out = {"id": info.id, "profile_id": info.profileId, "parent_index": n.nvmlDeviceGetIndex(info.device),
           "placement": [info.placement.start, info.placement.size], "ci_profiles": {}, "cis": []}
    for k in range(n.NVML_COMPUTE_INSTANCE_PROFILE_COUNT + 1):
        got = call(n.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, k,
                   n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
        if "value" in got:
            got["remaining"] = n.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, k)
            got["v1"] = call(n.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, k, 0, 1)["value"]
            cis = (n.c_nvmlComputeInstance_t * 8)()
            count = n.c_uint(0)
            n.nvmlGpuInstanceGetComputeInstances(gi, k, cis, n.byref(count))
            for ci in cis[:count.value]:
                ci_info = n.nvmlComputeInstanceGetInfo(ci)
                out["cis"].append({"id": ci_info.id, "profile_id": ci_info.profileId,
                                   "placement": [ci_info.placement.start, ci_info.placement.size],
                                   "parent_index": n.nvmlDeviceGetIndex(ci_info.device),
                                   "gi_id": n.nvmlGpuInstanceGetInfo(ci_info.gpuInstance).id})
        out["ci_profiles"][k] = got
    out["ci_by_id_0"] = call(lambda g: n.nvmlComputeInstanceGetInfo(n.nvmlGpuInstanceGetComputeInstanceById(g, 0)).id,
                             gi)
    out["ci_by_id_1"] = call(n.nvmlGpuInstanceGetComputeInstanceById, gi, 1)
    out["create_ci"] = error(n.nvmlGpuInstanceCreateComputeInstance, gi, 0)
    out["destroy_gi"] = error(n.nvmlGpuInstanceDestroy, gi)
    out["destroy_ci"] = error(n.nvmlComputeInstanceDestroy, n.nvmlGpuInstanceGetComputeInstanceById(gi, 0))
    return out


def instances(h):
    out = {"profiles": {}, "gis": [], "by_id": {}}
    for k in range(n.NVML_GPU_INSTANCE_PROFILE_COUNT + 1):
        got = call(n.nvmlDeviceGetGpuInstanceProfileInfo, h, k)
        out["profiles"][k] = got
        if "value" not in got:
            continue
        pid = got["value"]["id"]
        got["v1"] = call(n.nvmlDeviceGetGpuInstanceProfileInfo, h, k, 1)["value"]
        got["by_id"] = call(n.nvmlDeviceGetGpuInstanceProfileInfoById, h, pid)
        got["remaining"] = call(n.nvmlDeviceGetGpuInstanceRemainingCapacity, h, pid)
        count = n.c_uint(0)
        n.nvmlDeviceGetGpuInstancePossiblePlacements(h, pid, None, n.byref(count))
        placements = (n.c_nvmlGpuInstancePlacement_t * count.value)()
        n.nvmlDeviceGetGpuInstancePossiblePlacements(h, pid, placements, n.byref(count))
        got["placements"] = [[p.start, p.size] for p in placements[:count.value]]
        gis = (n.c_nvmlGpuInstance_t * 8)()
        found = call(n.nvmlDeviceGetGpuInstances, h, pid, gis, n.byref(count))
        if "error" in found:
            got["gis"] = found
            continue
        got["gis"] = [n.nvmlGpuInstanceGetInfo(gi).id for gi in gis[:count.value]]
        out["gis"] += [gpu_instance(gi) for gi in gis[:count.value]]
        got["create"] = error(n.nvmlDeviceCreateGpuInstance, h, pid)
    for gi_id in range(15):
        out["by_id"][gi_id] = call(lambda x, i: n.nvmlGpuInstanceGetInfo(n.nvmlDeviceGetGpuInstanceById(x, i)).id,
                                   h, gi_id)
    out["set_mig_mode"] = error(n.nvmlDeviceSetMigMode, h, n.NVML_DEVICE_MIG_DISABLE)
    return out


def board(h):
    out = {
        "mig_mode": call(n.nvmlDeviceGetMigMode, h),
        "max_mig": call(n.nvmlDeviceGetMaxMigDeviceCount, h),
        "is_mig": call(is_mig, h),
        "gpu_instance_id": call(n.nvmlDeviceGetGpuInstanceId, h),
        "compute_instance_id": call(n.nvmlDeviceGetComputeInstanceId, h),
        "attributes": call(n.nvmlDeviceGetAttributes, h),
        "parent_of_whole": call(n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, h),
        "by_index": [],
        "mig": [],
        "whole": device_queries(h, h),
    }
    out["whole"]["num_cores"] = call(n.nvmlDeviceGetNumGpuCores, h)
    top = max(out["max_mig"].get("value", 0), 8)
    for i in range(top + 1):
        try:
            m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
        except n.NVMLError as exc:
            out["by_index"].append({"error": type(exc).__name__})
            continue
        out["by_index"].append({"value": i})
        out["mig"].append(mig_device(m, h))
    out.update(instances(h))
    return out


def main() -> None:
    n.nvmlInit()
    handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
    out = {"boards": [board(h) for h in handles],
           "by_unknown_mig_uuid": call(n.nvmlDeviceGetHandleByUUID, b"MIG-00000000-0000-0000-0000-000000000000")}
    n.nvmlShutdown()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
