"""One rank of a communicator of FakeGPU's libnccl.so.2, driven through ctypes on host buffers (device pointers
are host addresses in native mode). Usage: nccl_peer.py RANK NRANKS ID (nccl_id.py: the id's hex, or @FILE). Prints
`ok NAME` per checked op."""

import ctypes
import os
import struct
import sys
import time

from nccl_id import unique_id

rank, nranks = int(sys.argv[1]), int(sys.argv[2])
nccl = ctypes.CDLL(os.path.join(os.environ["FAKEGPU_LIB"], "libnccl.so.2"))
INT32, FLOAT16, FLOAT32, BFLOAT16 = 2, 6, 7, 9  # ncclDataType_t
SUM, MAX, AVG = 0, 2, 4  # ncclRedOp_t


comm = ctypes.c_void_p()
t0 = time.monotonic()
assert nccl.ncclCommInitRank(ctypes.byref(comm), nranks, unique_id(nccl, rank, sys.argv[3]), rank) == 0
print("init_s", round(time.monotonic() - t0, 3))


def check(name: str, ok: bool) -> None:
    print("ok" if ok else "bad", name, flush=True)


def buf(ctype, values):
    return (ctype * len(values))(*values)


n = 3000  # 12 000 bytes of float32: three rounds with FAKEGPU_NCCL_CHUNK=4096
src = buf(ctypes.c_float, [i + rank * 0.5 for i in range(n)])
dst = (ctypes.c_float * n)()
assert nccl.ncclAllReduce(src, dst, ctypes.c_size_t(n), FLOAT32, SUM, comm, None) == 0
check("allreduce_f32_sum", all(dst[i] == sum(i + r * 0.5 for r in range(nranks)) for i in range(n)))

bf = buf(ctypes.c_uint16, [struct.unpack("<I", struct.pack("<f", 1.0 + 2 * rank))[0] >> 16] * 4)
assert nccl.ncclAllReduce(bf, bf, ctypes.c_size_t(4), BFLOAT16, AVG, comm, None) == 0  # in place
mean = sum(1.0 + 2 * r for r in range(nranks)) / nranks
check("allreduce_bf16_avg", list(bf) == [struct.unpack("<I", struct.pack("<f", mean))[0] >> 16] * 4)

half = buf(ctypes.c_uint16, [(0x3E00, 0x4080)[rank % 2]])  # 1.5, 2.25 in fp16
assert nccl.ncclAllReduce(half, half, ctypes.c_size_t(1), FLOAT16, SUM, comm, None) == 0
check("allreduce_f16_sum", nranks != 2 or half[0] == 0x4380)  # 3.75

mx = buf(ctypes.c_int32, [rank * 7, -rank])
assert nccl.ncclAllReduce(mx, mx, ctypes.c_size_t(2), INT32, MAX, comm, None) == 0
check("allreduce_i32_max", list(mx) == [(nranks - 1) * 7, 0])

b = 5000
root = nranks - 1
bsrc = (ctypes.c_uint8 * b)(*[(i * 31 + rank) % 256 for i in range(b)])
bdst = (ctypes.c_uint8 * b)()
assert nccl.ncclBroadcast(bsrc, bdst, ctypes.c_size_t(b), 0, root, comm, None) == 0
check("broadcast_chunked", all(bdst[i] == (i * 31 + root) % 256 for i in range(b)))

g = (ctypes.c_int32 * (1500 * nranks))()
assert nccl.ncclAllGather(buf(ctypes.c_int32, [rank * 10000 + i for i in range(1500)]), g, 1500, INT32, comm, None) == 0
check("allgather", all(g[r * 1500 + i] == r * 10000 + i for r in range(nranks) for i in range(1500)))

m = 1100
rs = buf(ctypes.c_float, [float(rank + j * 1000 + i) for j in range(nranks) for i in range(m)])
rr = (ctypes.c_float * m)()
assert nccl.ncclReduceScatter(rs, rr, ctypes.c_size_t(m), FLOAT32, SUM, comm, None) == 0
check("reduce_scatter", all(rr[i] == sum(float(r + rank * 1000 + i) for r in range(nranks)) for i in range(m)))

a2 = buf(ctypes.c_int32, [rank * 100 + j for j in range(nranks) for _ in range(700)])
a2o = (ctypes.c_int32 * (700 * nranks))()
assert nccl.ncclAlltoAll(a2, a2o, ctypes.c_size_t(700), INT32, comm, None) == 0
check("all_to_all", all(a2o[r * 700 + i] == r * 100 + rank for r in range(nranks) for i in range(700)))

op, scale = ctypes.c_int(), ctypes.c_float(0.5)
assert nccl.ncclRedOpCreatePreMulSum(ctypes.byref(op), ctypes.byref(scale), FLOAT32, 1, comm) == 0
pm = buf(ctypes.c_float, [rank + 1.0])
assert nccl.ncclAllReduce(pm, pm, ctypes.c_size_t(1), FLOAT32, op.value, comm, None) == 0
check("premul_sum", pm[0] == sum(r + 1.0 for r in range(nranks)) * 0.5)
assert nccl.ncclRedOpDestroy(op, comm) == 0

# A split by parity: the children meet without another id (over sockets, through the parent's all-gather).
child = ctypes.c_void_p()
assert nccl.ncclCommSplit(comm, rank % 2, -rank, ctypes.byref(child), None) == 0
members = [r for r in range(nranks) if r % 2 == rank % 2]
cs = buf(ctypes.c_int32, [rank + 1])
assert nccl.ncclAllReduce(cs, cs, ctypes.c_size_t(1), INT32, SUM, child, None) == 0
cr, cn = ctypes.c_int(), ctypes.c_int()
assert nccl.ncclCommUserRank(child, ctypes.byref(cr)) == 0 and nccl.ncclCommCount(child, ctypes.byref(cn)) == 0
check("split_allreduce", cs[0] == sum(r + 1 for r in members) and cn.value == len(members)
      and cr.value == sorted(members, reverse=True).index(rank))  # keys -rank: the highest parent rank first
assert nccl.ncclCommDestroy(child) == 0
assert nccl.ncclCommDestroy(comm) == 0
