"""Run by test_cudnn.py in a fresh process: drives FakeGPU's libcudnn.so.9 through ctypes and prints JSON.

Builds what cudnn-frontend builds for one forward convolution (tensors, convolution, operation, graph,
heuristics, plan, variant pack), executes it, and makes the invalid calls whose statuses the test checks.
Constants are the values cudnn.h documents.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading

# cudnnBackendDescriptorType_t
CONVOLUTION, ENGINE, ENGINECFG, ENGINEHEUR, EXECUTION_PLAN = 1, 2, 3, 4, 5
OP_CONV_FWD, OPERATIONGRAPH, VARIANT_PACK, TENSOR = 10, 15, 16, 17
# cudnnBackendAttributeType_t
T_HANDLE, T_DATA_TYPE, T_INT64, T_FLOAT, T_VOID_PTR, T_CONV_MODE, T_HEUR_MODE, T_DESC = 0, 1, 3, 4, 6, 7, 8, 15
# cudnnBackendAttributeName_t
CONV_COMP_TYPE, CONV_MODE, CONV_DILATIONS, CONV_STRIDES = 100, 101, 102, 103
CONV_POST, CONV_PRE, CONV_DIMS = 104, 105, 106
HEUR_MODE, HEUR_GRAPH, HEUR_RESULTS = 200, 201, 202
CFG_ENGINE, CFG_WORKSPACE = 300, 303
PLAN_HANDLE, PLAN_CFG, PLAN_WORKSPACE = 400, 401, 402
FWD_ALPHA, FWD_BETA, FWD_CONV, FWD_W, FWD_X, FWD_Y = 700, 701, 702, 703, 704, 705
GRAPH_HANDLE, GRAPH_OPS, GRAPH_ENGINES = 800, 801, 802
T_ALIGN, T_DTYPE, T_DIMS, T_STRIDES, T_UID = 900, 901, 902, 903, 906
VP_UIDS, VP_PTRS, VP_WORKSPACE = 1000, 1001, 1003
ENGINE_GRAPH, ENGINE_INDEX = 1300, 1301
FLOAT = 0

libdir = os.environ["FAKEGPU_LIB"]
rt = ctypes.CDLL(os.path.join(libdir, "libcudart.so.13"))
dnn = ctypes.CDLL(os.path.join(libdir, "libcudnn.so.9"))
dnn.cudnnGetVersion.restype = ctypes.c_size_t
dnn.cudnnGetErrorString.restype = ctypes.c_char_p
P, D, Z = ctypes.c_void_p, ctypes.c_double, ctypes.c_size_t
dnn.cudnnBatchNormalizationForwardTrainingEx.argtypes = [
    P,
    ctypes.c_int,
    ctypes.c_int,
    *[P] * 11,
    D,
    P,
    P,
    D,
    *[P] * 4,
    Z,
    P,
    Z,
]
dnn.cudnnBackendSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_void_p]
dnn.cudnnBackendGetAttribute.argtypes = [
    ctypes.c_void_p,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int64,
    ctypes.POINTER(ctypes.c_int64),
    ctypes.c_void_p,
]
for name in ("cudnnBackendFinalize", "cudnnBackendDestroyDescriptor", "cudnnDestroy"):
    getattr(dnn, name).argtypes = [ctypes.c_void_p]
dnn.cudnnBackendExecute.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
dnn.cudnnSetStream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
out: dict = {}


def create(kind: int) -> ctypes.c_void_p:
    d = ctypes.c_void_p()
    rc = dnn.cudnnBackendCreateDescriptor(kind, ctypes.byref(d))
    assert rc == 0, rc
    return d


def put(d: ctypes.c_void_p, name: int, kind: int, values: list, ctype: type = ctypes.c_int64) -> int:
    arr = (ctype * len(values))(*values)
    return dnn.cudnnBackendSetAttribute(d, name, kind, len(values), arr)


def put_desc(d: ctypes.c_void_p, name: int, descs: list[ctypes.c_void_p]) -> int:
    return put(d, name, T_DESC, [x.value for x in descs], ctypes.c_void_p)


def tensor(uid: int, dims: list[int]) -> ctypes.c_void_p:
    strides, acc = [], 1
    for n in reversed(dims):
        strides.insert(0, acc)
        acc *= n
    t = create(TENSOR)
    put(t, T_DTYPE, T_DATA_TYPE, [FLOAT], ctypes.c_int)
    put(t, T_DIMS, T_INT64, dims)
    put(t, T_STRIDES, T_INT64, strides)
    put(t, T_UID, T_INT64, [uid])
    put(t, T_ALIGN, T_INT64, [16])
    assert dnn.cudnnBackendFinalize(t) == 0
    return t


def conv_op(x: list[int], w: list[int], y: list[int]) -> tuple[ctypes.c_void_p, int]:
    c = create(CONVOLUTION)
    put(c, CONV_COMP_TYPE, T_DATA_TYPE, [FLOAT], ctypes.c_int)
    put(c, CONV_MODE, T_CONV_MODE, [1], ctypes.c_int)  # cross-correlation
    put(c, CONV_DIMS, T_INT64, [2])
    for name, v in ((CONV_DILATIONS, 1), (CONV_STRIDES, 1), (CONV_PRE, 1), (CONV_POST, 1)):
        put(c, name, T_INT64, [v, v])
    assert dnn.cudnnBackendFinalize(c) == 0
    op = create(OP_CONV_FWD)
    put_desc(op, FWD_X, [tensor(ord("x"), x)])
    put_desc(op, FWD_W, [tensor(ord("w"), w)])
    put_desc(op, FWD_Y, [tensor(ord("y"), y)])
    put_desc(op, FWD_CONV, [c])
    put(op, FWD_ALPHA, T_FLOAT, [1.0], ctypes.c_float)
    put(op, FWD_BETA, T_FLOAT, [0.0], ctypes.c_float)
    return op, dnn.cudnnBackendFinalize(op)


def get_i64(d: ctypes.c_void_p, name: int) -> tuple[int, int]:
    v, n = ctypes.c_int64(-1), ctypes.c_int64(0)
    rc = dnn.cudnnBackendGetAttribute(d, name, T_INT64, 1, ctypes.byref(n), ctypes.byref(v))
    return rc, v.value


out["version"] = dnn.cudnnGetVersion()
prop = ctypes.c_int()
out["properties"] = [dnn.cudnnGetProperty(i, ctypes.byref(prop)) or prop.value for i in range(3)]
handle = ctypes.c_void_p()
out["create_rc"] = dnn.cudnnCreate(ctypes.byref(handle))
if out["create_rc"] != 0:
    json.dump(out, sys.stdout)
    sys.exit(0)
stream = ctypes.c_void_p()
rt.cudaStreamCreate(ctypes.byref(stream))
got = ctypes.c_void_p()
out["stream_rc"] = [dnn.cudnnSetStream(handle, stream), dnn.cudnnGetStream(handle, ctypes.byref(got))]
out["stream_kept"] = got.value == stream.value

# Invalid calls.
out["null_handle_set_stream"] = dnn.cudnnSetStream(None, stream)
out["null_create"] = dnn.cudnnBackendCreateDescriptor(TENSOR, None)
bogus = ctypes.create_string_buffer(64)
out["bogus_descriptor_finalize"] = dnn.cudnnBackendFinalize(ctypes.addressof(bogus))
open_t = create(TENSOR)
out["get_before_finalize"] = get_i64(open_t, T_UID)[0]
out["finalize_incomplete_tensor"] = dnn.cudnnBackendFinalize(open_t)
out["foreign_attribute"] = put(open_t, CONV_DIMS, T_INT64, [2])
out["unfinalized_element"] = put_desc(create(OP_CONV_FWD), FWD_X, [open_t])
out["generated_stub"] = dnn.cudnnCreatePoolingDescriptor(ctypes.byref(ctypes.c_void_p()))
_, out["shape_mismatch_finalize"] = conv_op([8, 3, 32, 32], [16, 3, 3, 3], [8, 16, 31, 32])
done = tensor(1, [4, 4])
out["set_after_finalize"] = put(done, T_UID, T_INT64, [2])
out["get_wrong_type"] = dnn.cudnnBackendGetAttribute(
    done, T_UID, T_FLOAT, 1, ctypes.byref(ctypes.c_int64()), ctypes.byref(ctypes.c_float())
)

# One forward convolution, the way cudnn-frontend builds it.
def graph_of(op: ctypes.c_void_p) -> tuple[ctypes.c_void_p, int]:
    graph = create(OPERATIONGRAPH)
    put(graph, GRAPH_HANDLE, T_HANDLE, [handle.value], ctypes.c_void_p)
    put_desc(graph, GRAPH_OPS, [op])
    return graph, dnn.cudnnBackendFinalize(graph)


def heuristics(graph: ctypes.c_void_p) -> tuple[dict, list[ctypes.c_void_p]]:
    """Heuristics' engine configs for `graph` (instant mode), and how asking for them went."""
    heur = create(ENGINEHEUR)
    put_desc(heur, HEUR_GRAPH, [graph])
    put(heur, HEUR_MODE, T_HEUR_MODE, [0], ctypes.c_int)  # CUDNN_HEUR_MODE_INSTANT
    got = {"heur_finalize": dnn.cudnnBackendFinalize(heur)}
    count = ctypes.c_int64()
    dnn.cudnnBackendGetAttribute(heur, HEUR_RESULTS, T_DESC, 0, ctypes.byref(count), None)
    cfgs = [create(ENGINECFG) for _ in range(count.value)]
    arr = (ctypes.c_void_p * len(cfgs))(*[c.value for c in cfgs])
    written = ctypes.c_int64()
    got["results_rc"] = dnn.cudnnBackendGetAttribute(heur, HEUR_RESULTS, T_DESC, len(cfgs), ctypes.byref(written),
                                                     arr)
    got["results"] = [count.value, written.value]
    got["config_workspaces"] = [get_i64(c, CFG_WORKSPACE)[1] for c in cfgs]
    return got, cfgs


op, out["conv_finalize"] = conv_op([8, 3, 32, 32], [16, 3, 3, 3], [8, 16, 32, 32])
graph, out["graph_finalize"] = graph_of(op)
out["engine_count"] = get_i64(graph, GRAPH_ENGINES)[1]
got, cfgs = heuristics(graph)
out.update(got)
plans = []
for cfg in cfgs:
    plan = create(EXECUTION_PLAN)
    put(plan, PLAN_HANDLE, T_HANDLE, [handle.value], ctypes.c_void_p)
    put_desc(plan, PLAN_CFG, [cfg])
    assert dnn.cudnnBackendFinalize(plan) == 0
    plans.append(plan)
out["plan_workspaces"] = [get_i64(p, PLAN_WORKSPACE)[1] for p in plans]

sizes = {"x": 8 * 3 * 32 * 32 * 4, "w": 16 * 3 * 3 * 3 * 4, "y": 8 * 16 * 32 * 32 * 4}
ptrs = {}
for k, n in sizes.items():
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)) == 0
    ptrs[k] = p.value
workspace = ctypes.c_void_p()
rt.cudaMalloc(ctypes.byref(workspace), ctypes.c_size_t(max(out["plan_workspaces"]) or 1))


def pack(x: int, w: int, y: int, ws: int | None) -> ctypes.c_void_p:
    vp = create(VARIANT_PACK)
    put(vp, VP_PTRS, T_VOID_PTR, [x, w, y], ctypes.c_void_p)
    put(vp, VP_UIDS, T_INT64, [ord("x"), ord("w"), ord("y")])
    put(vp, VP_WORKSPACE, T_VOID_PTR, [ws], ctypes.c_void_p)
    assert dnn.cudnnBackendFinalize(vp) == 0
    return vp


good = pack(ptrs["x"], ptrs["w"], ptrs["y"], workspace.value)
out["execute"] = [dnn.cudnnBackendExecute(handle, p, good) for p in plans]
host = ctypes.create_string_buffer(sizes["y"])
out["execute_host_pointer"] = dnn.cudnnBackendExecute(
    handle, plans[0], pack(ptrs["x"], ptrs["w"], ctypes.addressof(host), None)
)
out["execute_short_allocation"] = dnn.cudnnBackendExecute(handle, plans[0], pack(ptrs["x"], ptrs["w"], ptrs["w"], None))
out["execute_no_workspace"] = dnn.cudnnBackendExecute(handle, plans[1], pack(ptrs["x"], ptrs["w"], ptrs["y"], None))
out["execute_null_handle"] = dnn.cudnnBackendExecute(None, plans[0], good)
out["execute_unfinalized_pack"] = dnn.cudnnBackendExecute(handle, plans[0], create(VARIANT_PACK))
out["runtime_error_after"] = rt.cudaGetLastError()


def worker(results: list[int]) -> None:
    # As torch does: a handle per thread, one cached finalized plan shared by all of them.
    h = ctypes.c_void_p()
    rc = dnn.cudnnCreate(ctypes.byref(h))
    for _ in range(50):
        rc = rc or dnn.cudnnBackendExecute(h, plans[0], good)
    results.append(rc or dnn.cudnnDestroy(h))


results: list[int] = []
threads = [threading.Thread(target=worker, args=(results,)) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
out["threads"] = results
out["error_string"] = dnn.cudnnGetErrorString(2000).decode()

# Legacy descriptors keep and return what was set; batch norm (torch's BatchNorm2d path) is checked and recorded.
IntArr = ctypes.c_int * 8
td = ctypes.c_void_p()
dnn.cudnnCreateTensorDescriptor(ctypes.byref(td))
dims, strides = IntArr(8, 16, 32, 32), IntArr(16 * 32 * 32, 32 * 32, 32, 1)
out["tensor_set"] = dnn.cudnnSetTensorNdDescriptor(td, FLOAT, 4, dims, strides)
dt, nd, d2, s2 = ctypes.c_int(-1), ctypes.c_int(), IntArr(), IntArr()
dnn.cudnnGetTensorNdDescriptor(td, 8, ctypes.byref(dt), ctypes.byref(nd), d2, s2)
out["tensor_get"] = [dt.value, nd.value, list(d2[: nd.value]), list(s2[: nd.value])]
out["tensor_bad_dims"] = dnn.cudnnSetTensorNdDescriptor(td, FLOAT, 0, dims, strides)
cd = ctypes.c_void_p()
dnn.cudnnCreateConvolutionDescriptor(ctypes.byref(cd))
dnn.cudnnSetConvolutionNdDescriptor(cd, 2, IntArr(1, 2), IntArr(1, 1), IntArr(1, 3), 1, FLOAT)
dnn.cudnnSetConvolutionGroupCount(cd, 4)
dnn.cudnnSetConvolutionMathType(cd, 2)
n, pad, st, dil, mode, comp = ctypes.c_int(), IntArr(), IntArr(), IntArr(), ctypes.c_int(), ctypes.c_int()
dnn.cudnnGetConvolutionNdDescriptor(cd, 8, ctypes.byref(n), pad, st, dil, ctypes.byref(mode), ctypes.byref(comp))
groups, math = ctypes.c_int(), ctypes.c_int()
dnn.cudnnGetConvolutionGroupCount(cd, ctypes.byref(groups))
dnn.cudnnGetConvolutionMathType(cd, ctypes.byref(math))
out["conv_get"] = [n.value, list(pad[:2]), list(st[:2]), list(dil[:2]), mode.value, groups.value, math.value]
pd = ctypes.c_void_p()
dnn.cudnnCreateTensorDescriptor(ctypes.byref(pd))
dnn.cudnnSetTensorNdDescriptor(pd, FLOAT, 4, IntArr(1, 16, 1, 1), IntArr(16, 1, 1, 1))
bn_ptrs = {}
for k, nbytes in (("x", 8 * 16 * 32 * 32 * 4), ("y", 8 * 16 * 32 * 32 * 4), ("p", 16 * 4 * 6)):
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(nbytes))
    bn_ptrs[k] = p.value
one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
params = [bn_ptrs["p"] + 64 * i for i in range(6)]  # scale, bias, running mean/var, saved mean/inv var


def bn_forward(x: int, eps: float) -> int:
    # spatial mode, plain batch norm; no z, activation, workspace or reserve space
    args = [handle, 1, 0, ctypes.byref(one), ctypes.byref(zero), td, x, None, None, td, bn_ptrs["y"], pd]
    args += [*params[:2], 0.1, *params[2:4], eps, *params[4:], None, None, 0, None, 0]
    return dnn.cudnnBatchNormalizationForwardTrainingEx(*args)


out["bn_forward"] = bn_forward(bn_ptrs["x"], 1e-5)
out["bn_forward_host_x"] = bn_forward(ctypes.addressof(host), 1e-5)
out["bn_forward_negative_eps"] = bn_forward(bn_ptrs["x"], -1.0)
# Engine 2 (channels-last, with copies of the operands as workspace) applies on Hopper to float NCHW tensors whose
# channel counts 4 divides: heuristics then rank it first; elsewhere it does not support the graph.
wide_graph, _ = graph_of(conv_op([8, 16, 32, 32], [32, 16, 3, 3], [8, 32, 32, 32])[0])
out["wide_config_workspaces"] = heuristics(wide_graph)[0]["config_workspaces"]
engine = create(ENGINE)
put_desc(engine, ENGINE_GRAPH, [wide_graph])
put(engine, ENGINE_INDEX, T_INT64, [2])
out["engine2_finalize"] = dnn.cudnnBackendFinalize(engine)
out["destroy_rc"] = dnn.cudnnDestroy(handle)
json.dump(out, sys.stdout)
