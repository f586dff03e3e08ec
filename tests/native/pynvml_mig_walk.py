"""Walk every board's MIG surface with real pynvml; print one JSON document.

Run like pynvml_walk.py (libnvidia-ml.so.1 on LD_LIBRARY_PATH). Per board: MIG mode, the MIG device handle at
every index up to one past the maximum, and per MIG device its identity, memory, attributes, IDs and every
query pynvml_walk.py asks a whole GPU.
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
    }
    top = max(out["max_mig"].get("value", 0), 8)
    for i in range(top + 1):
        try:
            m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
        except n.NVMLError as exc:
            out["by_index"].append({"error": type(exc).__name__})
            continue
        out["by_index"].append({"value": i})
        out["mig"].append(mig_device(m, h))
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
