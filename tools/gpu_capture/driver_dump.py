"""The CUDA driver API's answers, through ctypes on libcuda.so.1, as one JSON document.

Attributes 1..160, limits, the memory a bare context costs, how cuMemGetInfo moves per allocation size (the
driver's page granularity), how close to the reported free memory one allocation may come, and the error names
and texts. Run by capture.sh on a real GPU and under `fakegpu run`, so the two documents diff key by key.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import sys

MIB = 1 << 20
cu = ctypes.CDLL("libcuda.so.1")
size_t, c_int, c_uint = ctypes.c_size_t, ctypes.c_int, ctypes.c_uint


def mem_info() -> tuple[int, int]:
    free, total = size_t(), size_t()
    rc = cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    return (free.value, total.value) if rc == 0 else (-rc, -rc)


def nvml_used() -> dict:
    """The device's used memory and this process's, as nvidia-smi would show them (NVML, if present)."""
    try:
        import os

        import pynvml as N

        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        used = N.nvmlDeviceGetMemoryInfo(h).used
        mine = [p.usedGpuMemory for p in N.nvmlDeviceGetComputeRunningProcesses(h) if p.pid == os.getpid()]
        return {"device_used": used, "process_used": mine[0] if mine else None}
    except Exception as exc:
        return {"error": str(exc)}


def alloc(nbytes: int) -> tuple[int, int]:
    ptr = ctypes.c_uint64()
    rc = cu.cuMemAlloc_v2(ctypes.byref(ptr), size_t(nbytes))
    return rc, ptr.value


def main() -> int:
    doc: dict = {}
    doc["nvml_before_init"] = nvml_used()
    doc["cuInit"] = cu.cuInit(0)
    v, n, dev = c_int(), c_int(), c_int()
    cu.cuDriverGetVersion(ctypes.byref(v))
    cu.cuDeviceGetCount(ctypes.byref(n))
    cu.cuDeviceGet(ctypes.byref(dev), 0)
    doc["driver_version"], doc["device_count"] = v.value, n.value
    name = ctypes.create_string_buffer(256)
    cu.cuDeviceGetName(name, 256, dev)
    doc["name"] = name.value.decode()
    total = size_t()
    cu.cuDeviceTotalMem_v2(ctypes.byref(total), dev)
    doc["total_mem"] = total.value
    uuid = (ctypes.c_ubyte * 16)()
    doc["uuid_rc"] = cu.cuDeviceGetUuid_v2(uuid, dev)
    doc["uuid"] = bytes(uuid).hex()
    bus = ctypes.create_string_buffer(64)
    cu.cuDeviceGetPCIBusId(bus, 64, dev)
    doc["pci_bus_id"] = bus.value.decode()
    attrs = {}
    for a in range(1, 161):
        val = c_int()
        rc = cu.cuDeviceGetAttribute(ctypes.byref(val), a, dev)
        attrs[str(a)] = val.value if rc == 0 else {"error": rc}
    doc["attributes"] = attrs

    ctx = ctypes.c_void_p()
    doc["primary_retain"] = cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    cu.cuCtxSetCurrent(ctx)
    free0, total0 = mem_info()
    doc["after_context"] = {"free": free0, "total": total0, "nvml": nvml_used()}
    limits = {}
    for name_, lim in (("STACK_SIZE", 0), ("PRINTF_FIFO_SIZE", 1), ("MALLOC_HEAP_SIZE", 2),
                       ("DEV_RUNTIME_SYNC_DEPTH", 3), ("DEV_RUNTIME_PENDING_LAUNCH_COUNT", 4),
                       ("MAX_L2_FETCH_GRANULARITY", 5), ("PERSISTING_L2_CACHE_SIZE", 6)):
        val = size_t()
        rc = cu.cuCtxGetLimit(ctypes.byref(val), lim)
        limits[name_] = val.value if rc == 0 else {"error": rc}
    doc["limits"] = limits
    lo, hi = c_int(), c_int()
    cu.cuCtxGetStreamPriorityRange(ctypes.byref(lo), ctypes.byref(hi))
    doc["stream_priority_range"] = [lo.value, hi.value]

    class Prop(ctypes.Structure):  # CUmemAllocationProp: type, requestedHandleTypes, location{type,id}, win32, flags
        _fields_ = [("type", c_int), ("handle", c_int), ("loc_type", c_int), ("loc_id", c_int),
                    ("win32", ctypes.c_void_p), ("compression", ctypes.c_ubyte), ("gpu_direct", ctypes.c_ubyte),
                    ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]

    prop = Prop(type=1, handle=0, loc_type=1, loc_id=0)
    for opt in (0, 1):
        g = size_t()
        rc = cu.cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(prop), opt)
        doc[f"vmm_granularity_{'minimum' if opt == 0 else 'recommended'}"] = g.value if rc == 0 else {"error": rc}

    # cuMemGetInfo's step per allocation size, and where the pointers land.
    steps = []
    for nbytes in (1, 512, 4096, 65536, MIB, 2 * MIB - 1, 2 * MIB, 2 * MIB + 1, 3 * MIB, 20 * MIB, 1 << 30,
                   (1 << 30) + 1):
        before, _ = mem_info()
        rc, ptr = alloc(nbytes)
        after, _ = mem_info()
        cu.cuMemFree_v2(ctypes.c_uint64(ptr))
        back, _ = mem_info()
        steps.append({"bytes": nbytes, "rc": rc, "free_drop": before - after, "restored": back == before,
                      "ptr_mod_2m": ptr % (2 * MIB), "ptr_mod_512": ptr % 512})
    doc["alloc_steps"] = steps
    # Ten 1-byte allocations: do they share a page (address stride, one free-memory step)?
    before, _ = mem_info()
    ptrs = [alloc(1)[1] for _ in range(10)]
    after, _ = mem_info()
    doc["small_allocs"] = {"strides": [b - a for a, b in itertools.pairwise(ptrs)], "free_drop": before - after}
    for p in ptrs:
        cu.cuMemFree_v2(ctypes.c_uint64(p))
    # How close to the reported free memory one allocation may come.
    edge = {}
    free_now, _ = mem_info()
    for slack in (256 * MIB, 64 * MIB, 2 * MIB, 0):
        rc, ptr = alloc(free_now - slack)
        edge[str(slack)] = rc
        if rc == 0:
            cu.cuMemFree_v2(ctypes.c_uint64(ptr))
    doc["alloc_near_free"] = {"free": free_now, "rc_by_slack": edge}
    rc, _ = alloc(total.value * 2)
    doc["alloc_twice_total_rc"] = rc

    names = {}
    for code in list(range(0, 1000)):
        s = ctypes.c_char_p()
        if cu.cuGetErrorName(code, ctypes.byref(s)) == 0 and s.value:
            t = ctypes.c_char_p()
            cu.cuGetErrorString(code, ctypes.byref(t))
            names[str(code)] = [s.value.decode(), t.value.decode() if t.value else None]
    doc["error_names"] = names
    doc["nvml_end"] = nvml_used()
    json.dump(doc, sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
