"""Run by test_vmm.py in a fresh process: drives libcuda's virtual memory management and libcudart's stream-ordered
pools through ctypes and prints one JSON object of results (statuses as numbers, sizes in bytes)."""

import ctypes
import json
import os
import sys
import threading

lib_dir = os.environ["FAKEGPU_LIB"]
rt = ctypes.CDLL(os.path.join(lib_dir, "libcudart.so.13"))
cu = ctypes.CDLL(os.path.join(lib_dir, "libcuda.so.1"))
MiB = 1 << 20
u64, size_t = ctypes.c_ulonglong, ctypes.c_size_t


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class Prop(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", AllocFlags),
    ]


class AccessDesc(ctypes.Structure):
    _fields_ = [("location", Location), ("flags", ctypes.c_int)]


def prop(device: int = 0, handle_types: int = 1) -> Prop:
    return Prop(type=1, requestedHandleTypes=handle_types, location=Location(1, device))  # PINNED, DEVICE


def free_bytes() -> int:
    free, total = size_t(), size_t()
    cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    return free.value


def create(size: int, p: Prop | None = None) -> tuple[int, int]:
    h = u64()
    rc = cu.cuMemCreate(ctypes.byref(h), size_t(size), ctypes.byref(p or prop()), u64(0))
    return rc, h.value


def reserve(size: int) -> tuple[int, int]:
    ptr = u64()
    rc = cu.cuMemAddressReserve(ctypes.byref(ptr), size_t(size), size_t(0), u64(0), u64(0))
    return rc, ptr.value


def mmap(ptr: int, size: int, h: int, offset: int = 0) -> int:
    return cu.cuMemMap(u64(ptr), size_t(size), size_t(offset), u64(h), u64(0))


def unmap(ptr: int, size: int) -> int:
    return cu.cuMemUnmap(u64(ptr), size_t(size))


def access(ptr: int, size: int, flags: int = 3, device: int = 0) -> int:
    d = AccessDesc(Location(1, device), flags)
    return cu.cuMemSetAccess(u64(ptr), size_t(size), ctypes.byref(d), size_t(1))


out: dict = {}
rt.cudaSetDevice(0)
rt.cudaFree(None)  # the primary context, as programs create it
free0 = free_bytes()
out["free0"] = free0

g = size_t()
out["gran_min"] = (cu.cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(prop()), 0), g.value)
out["gran_rec"] = (cu.cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(prop()), 1), g.value)
out["gran_bad_device"] = cu.cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(prop(device=7)), 0)

rc, va = reserve(64 * MiB)
out["reserve"] = rc, va % (2 * MiB)
out["reserve_unaligned"] = reserve(3 * MiB + 4096)[0]

out["create_unaligned"] = create(3 * MiB)[0]
out["create_bad_device"] = create(2 * MiB, prop(device=7))[0]
out["create_fabric"] = create(2 * MiB, prop(handle_types=8))[0]
rc, h = create(4 * MiB)
out["create"] = rc
out["free_after_create"] = free0 - free_bytes()

out["map_offset"] = mmap(va, 4 * MiB, h, offset=2 * MiB)
out["map_unaligned"] = mmap(va + 4096, 2 * MiB, h)
out["map_bad_handle"] = mmap(va, 2 * MiB, 0xDEAD)
out["map_too_big"] = mmap(va, 6 * MiB, h)
plain = ctypes.c_void_p()
rt.cudaMalloc(ctypes.byref(plain), size_t(4 * MiB))
out["map_outside_reservation"] = mmap(plain.value, 2 * MiB, h)
out["map"] = mmap(va + 2 * MiB, 4 * MiB, h)
out["map_again"] = mmap(va + 4 * MiB, 4 * MiB, h)  # overlaps the first mapping
out["access_not_mapped"] = access(va, 4 * MiB)
out["access_bad_flags"] = access(va + 2 * MiB, 4 * MiB, flags=2)
out["access_bad_device"] = access(va + 2 * MiB, 4 * MiB, device=7)
out["access"] = access(va + 2 * MiB, 4 * MiB)
flags = u64()
out["get_access"] = cu.cuMemGetAccess(ctypes.byref(flags), ctypes.byref(Location(1, 0)), u64(va + 3 * MiB)), flags.value

# Copies through the mapping, and the contents belong to the handle: a second mapping of it shows them.
src = (ctypes.c_ubyte * (4 * MiB)).from_buffer_copy(bytes(range(256)) * (4 * MiB // 256))
back = (ctypes.c_ubyte * (4 * MiB))()
out["h2d"] = cu.cuMemcpyHtoD_v2(u64(va + 2 * MiB), src, size_t(4 * MiB))
out["d2d"] = cu.cuMemcpyDtoD_v2(u64(plain.value), u64(va + 2 * MiB), size_t(4 * MiB))
out["d2h"] = cu.cuMemcpyDtoH_v2(back, u64(plain.value), size_t(4 * MiB))
out["roundtrip"] = bytes(back) == bytes(src)
out["roundtrip_zeros"] = bytes(back) == bytes(4 * MiB)  # accounting mode: device memory reads as zeros
out["alias_map"] = mmap(va + 32 * MiB, 4 * MiB, h)
access(va + 32 * MiB, 4 * MiB, flags=1)  # read-only
ctypes.memset(back, 0, 4 * MiB)
cu.cuMemcpyDtoH_v2(back, u64(va + 32 * MiB), size_t(4 * MiB))
out["alias_same_bytes"] = bytes(back) == bytes(src)
out["free_after_alias"] = free0 - free_bytes()  # mapping twice charges nothing more

# Pointer lookups: device memory of device 0, the range is the mapping.
mtype, ordinal, start, size = ctypes.c_uint(), ctypes.c_int(), u64(), size_t()
cu.cuPointerGetAttribute(ctypes.byref(mtype), 2, u64(va + 3 * MiB))  # MEMORY_TYPE
cu.cuPointerGetAttribute(ctypes.byref(ordinal), 9, u64(va + 3 * MiB))  # DEVICE_ORDINAL
out["ptr_type"], out["ptr_device"] = mtype.value, ordinal.value
out["range"] = cu.cuMemGetAddressRange_v2(ctypes.byref(start), ctypes.byref(size), u64(va + 5 * MiB))
out["range_start"], out["range_size"] = start.value - va, size.value


class RtAttrs(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("device", ctypes.c_int),
        ("devicePointer", ctypes.c_void_p),
        ("hostPointer", ctypes.c_void_p),
        ("reserved", ctypes.c_long * 8),
    ]


attrs = RtAttrs()
out["rt_attrs"] = rt.cudaPointerGetAttributes(ctypes.byref(attrs), ctypes.c_void_p(va + 3 * MiB)), attrs.type
out["cuMemFree_on_mapping"] = cu.cuMemFree_v2(u64(va + 2 * MiB))

# Adjacent mappings of one reservation read as one range (a tensor may straddle torch's segments).
rc, h2 = create(2 * MiB)
out["map_adjacent"] = mmap(va + 6 * MiB, 2 * MiB, h2)
cu.cuMemGetAddressRange_v2(ctypes.byref(start), ctypes.byref(size), u64(va + 3 * MiB))
out["range_joined"] = start.value - va, size.value

props_out = Prop()
out["props"] = cu.cuMemGetAllocationPropertiesFromHandle(ctypes.byref(props_out), u64(h)), props_out.location.id
retained = u64()
out["retain"] = (
    cu.cuMemRetainAllocationHandle(ctypes.byref(retained), ctypes.c_void_p(va + 3 * MiB)),
    retained.value == h,
)
out["retain_unmapped"] = cu.cuMemRetainAllocationHandle(ctypes.byref(retained), ctypes.c_void_p(va + 40 * MiB))
cu.cuMemRelease(u64(h))  # the retained reference

out["unmap_part"] = unmap(va + 2 * MiB, 2 * MiB)
out["unmap_unmapped"] = unmap(va + 10 * MiB, 2 * MiB)
out["address_free_mapped"] = cu.cuMemAddressFree(u64(va), size_t(64 * MiB))
out["release_mapped"] = cu.cuMemRelease(u64(h))
out["free_after_release_mapped"] = free0 - free_bytes()  # still mapped: still charged
out["release_again"] = cu.cuMemRelease(u64(h))
out["unmap_two"] = unmap(va + 2 * MiB, 6 * MiB)  # the 4 MiB mapping and the adjacent 2 MiB one together
out["unmap_alias"] = unmap(va + 32 * MiB, 4 * MiB)
cu.cuMemRelease(u64(h2))
out["free_after_unmap"] = free0 - free_bytes()
out["address_free_wrong_size"] = cu.cuMemAddressFree(u64(va), size_t(32 * MiB))
out["address_free"] = cu.cuMemAddressFree(u64(va), size_t(64 * MiB))
rt.cudaFree(plain)

# Capacity: physical allocations stop exactly where the device's capacity ends.
free_now = free_bytes()
out["oom"] = create((free_now // (2 * MiB) + 1) * (2 * MiB))[0]
rc, hall = create(free_now // (2 * MiB) * (2 * MiB))
out["fill"] = rc, free_bytes()
out["oom_one_more"] = create(2 * MiB)[0]
cu.cuMemRelease(u64(hall))

# Concurrency: threads creating, mapping, unmapping and releasing at once leave nothing behind.
rc, tva = reserve(64 * MiB)
errors = []


def worker(slot: int) -> None:
    for _ in range(200):
        rc, th = create(2 * MiB)
        ptr = tva + slot * 2 * MiB
        rcs = (rc, mmap(ptr, 2 * MiB, th), access(ptr, 2 * MiB), unmap(ptr, 2 * MiB), cu.cuMemRelease(u64(th)))
        if any(rcs):
            errors.append(rcs)


threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
out["threads_errors"] = len(errors)
out["threads_leak"] = free0 - free_bytes()
cu.cuMemAddressFree(u64(tva), size_t(64 * MiB))

# Fork: the child's calls work (no lock inherited held) and leave the parent's account alone.
pid = os.fork()
if pid == 0:
    rc, ch = create(2 * MiB)
    os._exit(10 + rc if rc else cu.cuMemRelease(u64(ch)))
out["fork_child"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
out["fork_parent_leak"] = free0 - free_bytes()

# Stream-ordered pools: the default pool of device 0 through the runtime.
pool = ctypes.c_void_p()
out["pool_get"] = rt.cudaDeviceGetDefaultMemPool(ctypes.byref(pool), 0)
pool2 = ctypes.c_void_p()
rt.cudaDeviceGetMemPool(ctypes.byref(pool2), 0)
out["pool_is_current"] = pool.value == pool2.value


def pool_attr(attr: int) -> int:
    v = u64()
    rt.cudaMemPoolGetAttribute(pool, attr, ctypes.byref(v))
    return v.value


RES, RES_HIGH, USED, USED_HIGH, THRESHOLD = 5, 6, 7, 8, 4
p1, p2 = ctypes.c_void_p(), ctypes.c_void_p()
out["malloc_async"] = rt.cudaMallocAsync(ctypes.byref(p1), size_t(MiB + 1), None)
out["malloc_async_2"] = rt.cudaMallocAsync(ctypes.byref(p2), size_t(3 * MiB), None)
out["pool_after_alloc"] = pool_attr(RES), pool_attr(USED), free0 - free_bytes()
cu.cuPointerGetAttribute(ctypes.byref(mtype), 2, u64(p1.value))
out["pool_ptr_type"] = mtype.value
out["h2d_pool"] = cu.cuMemcpyHtoD_v2(u64(p2.value), src, size_t(3 * MiB))
back3 = (ctypes.c_ubyte * (3 * MiB))()
cu.cuMemcpyDtoH_v2(back3, u64(p2.value), size_t(3 * MiB))
out["pool_roundtrip"] = bytes(back3) == bytes(src)[: 3 * MiB]
out["free_async"] = rt.cudaFreeAsync(p1, None)
out["pool_after_free"] = pool_attr(RES), pool_attr(USED), pool_attr(USED_HIGH)
rt.cudaStreamSynchronize(None)  # threshold 0: the unused reserve goes back to the device
out["pool_after_sync"] = pool_attr(RES), free0 - free_bytes()
keep = u64((1 << 64) - 1)
out["set_threshold"] = rt.cudaMemPoolSetAttribute(pool, THRESHOLD, ctypes.byref(keep))
rt.cudaFree(p2)  # cudaFree of stream-ordered memory is allowed
rt.cudaDeviceSynchronize()
out["pool_kept"] = pool_attr(RES), pool_attr(USED)
out["trim"] = rt.cudaMemPoolTrimTo(pool, size_t(0))
out["pool_after_trim"] = pool_attr(RES), free0 - free_bytes(), pool_attr(RES_HIGH)
nonzero = u64(5)
out["set_high_nonzero"] = rt.cudaMemPoolSetAttribute(pool, RES_HIGH, ctypes.byref(nonzero))
zero = u64(0)
out["reset_high"] = rt.cudaMemPoolSetAttribute(pool, USED_HIGH, ctypes.byref(zero)), pool_attr(USED_HIGH)
out["set_current_ro"] = rt.cudaMemPoolSetAttribute(pool, USED, ctypes.byref(zero))
big = ctypes.c_void_p()
out["malloc_async_oom"] = rt.cudaMallocAsync(ctypes.byref(big), size_t(free_bytes() + MiB), None)
rt.cudaGetLastError()
out["pool_bad"] = rt.cudaMemPoolTrimTo(ctypes.c_void_p(0x1234), size_t(0))
rt.cudaGetLastError()
json.dump(out, sys.stdout)
