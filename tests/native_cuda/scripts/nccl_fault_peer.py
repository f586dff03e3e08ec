"""One rank of a communicator of FakeGPU's libnccl.so.2 meeting the run's NCCL faults, through ctypes. Usage:
nccl_fault_peer.py RANK NRANKS ID OPS (ID: nccl_id.py's). Makes the rank's device current, runs OPS all-reduces
and prints, per op, its result code and whether the device's work still completes (cuStreamQuery on the default
stream and cuEventQuery of an event recorded after it: 0 = done, 600 = not ready), then ncclCommGetAsyncError's
answer and ncclGetLastError's text."""

import ctypes
import os
import sys

from nccl_id import unique_id

rank, nranks, ops = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[4])
cuda = ctypes.CDLL(os.path.join(os.environ["FAKEGPU_LIB"], "libcuda.so.1"))
nccl = ctypes.CDLL(os.path.join(os.environ["FAKEGPU_LIB"], "libnccl.so.2"))
nccl.ncclGetLastError.restype = ctypes.c_char_p
FLOAT32, SUM = 7, 0


ctx, dev = ctypes.c_void_p(), ctypes.c_int()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), rank) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
comm = ctypes.c_void_p()
assert nccl.ncclCommInitRank(ctypes.byref(comm), nranks, unique_id(nccl, rank, sys.argv[3]), rank) == 0
src = (ctypes.c_float * 4)(*[float(rank + 1)] * 4)
dst = (ctypes.c_float * 4)()
for op in range(1, ops + 1):
    rc = nccl.ncclAllReduce(src, dst, ctypes.c_size_t(4), FLOAT32, SUM, comm, None)
    event = ctypes.c_void_p()
    assert cuda.cuEventCreate(ctypes.byref(event), 0) == 0 and cuda.cuEventRecord(event, None) == 0
    print("op", op, rc, cuda.cuStreamQuery(None), cuda.cuEventQuery(event), dst[0], flush=True)
err = ctypes.c_int(-1)
assert nccl.ncclCommGetAsyncError(comm, ctypes.byref(err)) == 0
print("async", err.value, nccl.ncclGetLastError(comm).decode(), flush=True)
