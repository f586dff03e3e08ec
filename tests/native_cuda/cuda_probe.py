"""Run by test_runtime.py in a fresh process: drives libcudart through ctypes and prints JSON."""

import ctypes
import json
import os
import sys

lib = ctypes.CDLL(os.path.join(os.environ["FAKEGPU_LIB"], os.environ.get("PROBE_CUDART", "libcudart.so.13")))
out: dict = {}
n = ctypes.c_int()
out["count_rc"] = lib.cudaGetDeviceCount(ctypes.byref(n))
out["count"] = n.value
if n.value == 0:
    json.dump(out, sys.stdout)
    sys.exit(0)
free, total = ctypes.c_size_t(), ctypes.c_size_t()
out["set_rc"] = lib.cudaSetDevice(1)
lib.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total))
out["free0"], out["total"] = free.value, total.value
ptr = ctypes.c_void_p()
out["malloc_rc"] = lib.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(3 << 20))
ctypes.memset(ptr, 7, 3 << 20)  # device pointers are host addresses: writable
lib.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total))
out["free1"] = free.value
big = ctypes.c_void_p()
out["oom_rc"] = lib.cudaMalloc(ctypes.byref(big), ctypes.c_size_t(total.value))
out["last_error"] = lib.cudaGetLastError()
out["last_error_after"] = lib.cudaGetLastError()
lib.cudaGetErrorName.restype = ctypes.c_char_p
out["oom_name"] = lib.cudaGetErrorName(out["oom_rc"]).decode()
out["free_rc"] = lib.cudaFree(ptr)
lib.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total))
out["free2"] = free.value
attr = ctypes.c_int()
lib.cudaDeviceGetAttribute(ctypes.byref(attr), 16, 0)  # cudaDevAttrMultiProcessorCount
out["sms"] = attr.value
lib.cudaDeviceGetAttribute(ctypes.byref(attr), 97, 0)  # cudaDevAttrMaxSharedMemoryPerBlockOptin
out["smem_optin"] = attr.value
v = ctypes.c_int()
lib.cudaRuntimeGetVersion(ctypes.byref(v))
out["runtime"] = v.value
lib.cudaDriverGetVersion(ctypes.byref(v))
out["driver"] = v.value
fn = ctypes.c_void_p()
status = ctypes.c_int(-1)
out["entry_rc"] = lib.cudaGetDriverEntryPointByVersion(b"cuMemAlloc", ctypes.byref(fn), 12000, 0, ctypes.byref(status))
out["entry_found"] = bool(fn.value) and status.value == 0
out["graph_rc"] = lib.cudaGraphCreate(ctypes.byref(ctypes.c_void_p()), 0)  # graphs: recorded no-ops
out["unsupported_rc"] = lib.cudaGraphClone(ctypes.byref(ctypes.c_void_p()), None)  # a generated stub
json.dump(out, sys.stdout)
