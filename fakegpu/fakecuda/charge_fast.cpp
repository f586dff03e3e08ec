// The charging rules' common case in C++: an op whose fresh outputs are charged to its inputs' fake device, and
// nothing around them (dispatch.py's ChargeRules.after for an op without a rule of its own).
//
// Why not Python: the rules' call (the op's arguments and outputs made Python objects, a dozen calls, their dicts
// and frames) cost 10-15 us an op inside a training step (bench_fakecuda.py --no-fast-path), where the CPU kernels
// between two ops leave the caches cold for it. Here it is a few dictionary operations, the C++ allocator model's
// malloc, and the watch that frees the block when the storage dies (storage_watch.cpp), with Python's own objects:
// tracker.live stays the one map of charged storages, read and written by Python as before.
//
// The op's fake device is found as ChargeRules._device finds it (a badge, else tracker.live); an op on none is
// left alone, as the rules leave it. Otherwise the fast path is taken only where the rules would do exactly this:
// - the op is one ChargeRules.fast_kind() says has no rule of its own (asked once per op);
// - the device's model is the C++ one, and ChargeRules.fast_window() says until when nothing else is owed at an
//   op: the device is initialized and launched, and no fault board can speak before then (faults/board.py's
//   quiet(), which looks for a board again only after RETRY_S).
// A GEMM whose only rule is _gemm's is charged here too, where fast_gemm() says cuBLAS is loaded and its workspaces
// are taken per call (torch 2.15's default): its output, then a contiguous copy of each operand cuBLAS cannot read,
// then the call's workspace, freed with the copies after it, as _gemm takes them. Held workspaces (torch before 2.15,
// TORCH_CUBLAS_WORKSPACE_CACHE) depend on the thread's cuBLAS handle and stream: those stay with the Python rules.
// cuDNN's convolution is the common op once ChargeRules.fast_cudnn says cuDNN is loaded on the device (the rules load
// it at the first one); its backward is charged as _convolution_backward does it. A reduction's staging buffers
// (and convolution_backward's, for its bias gradient's sum) are taken and freed after its outputs, in the sizes
// ChargeRules.fast_staging gives for the input's layout and the op's dim argument, asked once per distinct call:
// a training step makes the same few every step, and the rules' call into Python cost 60-130 us each there.
// An add is the common op while grad mode is on; without it the engine may be summing gradients, which the rules
// charge as done in place where CUDA's engine would (backward.accumulated_in_place): those stay in Python. Layer
// norm takes a contiguous copy of its input (forward and backward) and of dY (backward) around its outputs.
// Anything else goes to the Python rules, as before. Busy time (Runtime.ran's telemetry) is written at once into the
// state file's C++ writer where the publisher has one (busy_ring.cpp); where not, it is kept here and handed
// to ChargeRules.fast_busy in batches, at the latest half a telemetry slot after the op and before any busy time
// Python reports itself (Runtime.ran and synced() drain this first), so the order is kept. Back-to-back ops that the
// publisher would join into one span whatever span it holds (state.Publisher.busy: one board and kind, no gap, the
// first op's slot) are handed over as one: its Python costs ~1.5 us a record, and a step's ops come in runs.
#include <torch/extension.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/PyInterpreter.h>

#include <time.h>

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

// busy_ring.cpp
bool ring_busy(int64_t board, bool compute, int64_t started, int64_t ended);
bool ring_open();

// storage_watch.cpp
struct WatchSink;
std::shared_ptr<WatchSink> watch_sink(py::object live, py::object devices);
py::object watch_storage(const c10::Storage& storage, const std::shared_ptr<WatchSink>& sink, PyObject* key);

// allocator.cpp
void* cxx_allocator(py::handle obj);
bool cxx_malloc(void* allocator, int64_t size, int64_t stream, uint64_t* ptr, uint64_t* alloc_size);
void cxx_free(void* allocator, uint64_t ptr);
std::pair<int64_t, int64_t> cxx_usage(void* allocator);

namespace {

constexpr int64_t kRetryNs = 100'000'000;             // after fast_window says "not now": ask again this much later
// fast_kind's bits beyond 1 (memory work) and 2 (tensor-core work); dispatch.py's FAST_GEMM* say the same
constexpr int32_t kGemm = 4, kBiasFirst = 8, kCopies = 16, kLt = 32;
constexpr int32_t kCudnn = 64, kConvolutionBackward = 128, kReduction = 256, kGap = 512;
constexpr int32_t kAdd = 1024, kLayerNorm = 2048, kLayerNormBackward = 4096;
constexpr int kGemmRules = 0, kGemmFast = 1, kGemmNotYet = 2;  // fast_gemm's answers (dispatch.py's GEMM_*)
constexpr size_t kBusyBatch = 64;                       // busy records handed to Python at once
constexpr int64_t kBusyDelayNs = 1'000'000'000 / 128;   // half of shared_state.SLOT_NS: a reader's delay stays
                                                         // under the slot it already waits for
struct BusyRecord {
  int64_t board, compute, started, ended;
  int64_t slot_end;  // the end of the slot its first op ended in: joined ops end before it
};

// runtime.devices[i].allocator, read at every op and every charged storage's death: an interned name, where
// pybind's attr("...") would make the string anew each time
PyObject* allocator_name() {
  static PyObject* name = PyUnicode_InternFromString("allocator");
  return name;
}

py::object allocator_of(PyObject* device) {
  auto model = py::reinterpret_steal<py::object>(PyObject_GetAttr(device, allocator_name()));
  if (!model) throw py::error_already_set();
  return model;
}

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct Slot {  // one fake device
  py::object allocator_object;  // the device's model when last looked at (held: its address is compared)
  void* allocator = nullptr;    // the same, when it is the C++ model
  int64_t until_ns = 0;         // the fast path may run until then
  int64_t retry_ns = 0;         // fast_window is not asked again before then
  int64_t board = 0;
  // fast_gemm's answer, kept while the runtime's workspaces object and its version stay the same
  py::object gemm_workspaces;
  int64_t gemm_version = -1;
  int gemm_state = kGemmNotYet;
  int64_t gemm_lt = 0, gemm_chosen = 0;  // the call's workspace: cuBLASLt's (a bias GEMM), cuBLAS's
  bool cudnn = false;                     // fast_cudnn said cuDNN is loaded (a context part is never unloaded)
};

struct Fast {
  py::object rules, live, devices, thread;  // ChargeRules, tracker.live, runtime.devices, runtime.thread
  std::shared_ptr<WatchSink> sink;           // (live and devices, for the storages' deaths: storage_watch.cpp)
  py::object runtime;
  py::object workspaces_name = py::str("workspaces"), version_name = py::str("version");
  py::object gap_calls_name = py::str("gap_calls");
  py::object fake_tensor, fake_parameter, plain_tensor, plain_parameter;  // the badged classes, torch's own
  py::object index_name = py::str("_fc_index");
  py::object stream_ids_name = py::str("stream_ids");
  // runtime.thread.stream_ids of the thread that charged last (its PyThreadState's id, which no later thread
  // reuses): the same dict for a thread's life (HostThread makes it once), so one attribute read per thread switch
  uint64_t ids_thread = UINT64_MAX;
  py::object ids;
  std::vector<Slot> slots;  // one per device, never resized: a Slot is referred to across calls into Python
  // 0: Python's rules; 1: memory work; 2: tensor-core work. Keyed by schema: the dispatcher keeps an op's schema
  // where it is for as long as the op is registered (ATen's, which alone have rules, for the process's life).
  std::unordered_map<const c10::FunctionSchema*, int32_t> kinds;
  std::unordered_map<const c10::FunctionSchema*, py::object> gaps;  // fast_gap's names, for kinds with kGap
  // fast_staging's answers: (schema, device, dtype, sizes, strides, offset, dim argument) -> the buffers' bytes
  std::map<std::vector<int64_t>, std::vector<int64_t>> staging;
  std::vector<BusyRecord> busy;
  int64_t busy_since = 0;                    // when the oldest op in `busy` ended
  int64_t slot_ns = 0, gap_ns = 0;           // shared_state.SLOT_NS and BUSY_GAP_NS
  int64_t handled = 0;                       // ops charged here
  int64_t gemms = 0;                         // of which GEMMs
  int64_t reductions = 0;                    // reductions (convolution_backward's bias sum included)
  int64_t convolutions = 0;                  // cuDNN's convolutions, forward and backward
};

// Changed and read under the GIL; held by each call for its length, as a call into Python can let another thread
// uninstall it. Never destroyed: at exit the interpreter may be gone before static destructors run.
std::shared_ptr<Fast>& fast = *new std::shared_ptr<Fast>();

void drain_busy(Fast& state) {
  if (state.busy.empty()) return;
  if (ring_open()) {  // the state file's writer is in C++ (busy_ring.cpp): no Python
    std::vector<BusyRecord> busy;
    busy.swap(state.busy);
    for (const auto& r : busy) ring_busy(r.board, r.compute != 0, r.started, r.ended);
    return;
  }
  py::list records;
  for (const auto& r : state.busy) records.append(py::make_tuple(r.board, r.compute != 0, r.started, r.ended));
  state.busy.clear();
  state.rules.attr("fast_busy")(records);
}

int32_t kind_of(Fast& fast, const c10::OperatorHandle& op) {
  const c10::FunctionSchema* schema = &op.schema();
  auto found = fast.kinds.find(schema);
  if (found != fast.kinds.end()) return found->second;
  py::handle func = torch::detail::getTorchApiFunction(op);
  const int32_t kind = fast.rules.attr("fast_kind")(func).cast<int32_t>();
  if (kind & kGap) fast.gaps.emplace(schema, fast.rules.attr("fast_gap")(func));
  fast.kinds.emplace(schema, kind);
  return kind;
}

// The storage's key in tracker.live: the StorageImpl's address, as UntypedStorage._cdata gives it.
py::object key_of(const c10::StorageImpl* impl) {
  return py::reinterpret_steal<py::object>(PyLong_FromVoidPtr(const_cast<c10::StorageImpl*>(impl)));
}

bool chargeable(const at::Tensor& t) {
  return t.defined() && t.layout() == at::kStrided && t.is_cpu() && t.has_storage();
}

template <typename F>
void each_tensor(const c10::IValue& value, F&& f) {
  if (value.isTensor()) {
    f(value.toTensor());
  } else if (value.isTensorList()) {
    for (const auto& t : value.toTensorList()) f(static_cast<at::Tensor>(t));
  } else if (value.isList()) {  // Tensor?[]
    for (const auto& item : value.toListRef())
      if (item.isTensor()) f(item.toTensor());
  }
}

// A tensor's fake device as ChargeRules._index_of finds it: a badge (a Python object of a fake type: its
// _fc_index), else, for a strided CPU tensor whose Python object is a plain tensor or parameter (or that has
// none yet, which Python would see as a plain tensor), the device tracker.live charges its storage to; -1 for none.
int64_t index_of(Fast& fast, const at::Tensor& t) {
  PyObject* object = t.unsafeGetTensorImpl()->pyobj_slot()->load_pyobj();
  if (object != nullptr) {
    PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(object));
    if (type == fast.fake_tensor.ptr() || type == fast.fake_parameter.ptr()) {
      auto index = py::reinterpret_steal<py::object>(PyObject_GetAttr(object, fast.index_name.ptr()));
      if (!index) throw py::error_already_set();
      return PyLong_AsLongLong(index.ptr());
    }
    if (type != fast.plain_tensor.ptr() && type != fast.plain_parameter.ptr()) return -1;  // a subclass's own
  }
  if (t.layout() != at::kStrided || !t.is_cpu() || !t.has_storage()) return -1;
  py::object key = key_of(t.storage().unsafeGetStorageImpl());
  PyObject* entry = PyDict_GetItemWithError(fast.live.ptr(), key.ptr());
  if (entry == nullptr) {
    if (PyErr_Occurred()) throw py::error_already_set();
    return -1;
  }
  return PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 0));
}

// The op's fake device as ChargeRules._device finds it: its first tensor argument's that has one (arguments in
// the schema's order, which is Python's: positional ones, then keyword-only ones); -1 for none.
int64_t device_of(Fast& fast, const std::vector<c10::IValue>& arguments) {
  int64_t index = -1;
  for (const auto& value : arguments) {
    each_tensor(value, [&](const at::Tensor& t) {
      if (index == -1 && t.defined()) index = index_of(fast, t);
    });
    if (index != -1) break;
  }
  return index;
}

// The device's slot while the fast path may charge its ops now, else null.
Slot* open_slot(Fast& fast, int64_t index, int64_t now) {
  PyObject* devices = fast.devices.ptr();
  if (index < 0 || index >= PyList_GET_SIZE(devices) || static_cast<size_t>(index) >= fast.slots.size()) return nullptr;
  Slot& slot = fast.slots[index];
  py::object model = allocator_of(PyList_GET_ITEM(devices, index));
  if (model.ptr() != slot.allocator_object.ptr()) {  // a new model (replace_allocators, a bench's swap)
    slot.allocator = cxx_allocator(model);
    slot.allocator_object = std::move(model);
    slot.until_ns = slot.retry_ns = 0;
    slot.cudnn = false;
  }
  if (slot.allocator == nullptr) return nullptr;
  if (now < slot.until_ns) return &slot;
  if (now < slot.retry_ns) return nullptr;
  auto window = fast.rules.attr("fast_window")(index).cast<std::pair<int64_t, int64_t>>();
  slot.until_ns = window.first;
  slot.board = window.second;
  if (now < slot.until_ns) return &slot;
  slot.retry_ns = now + kRetryNs;
  return nullptr;
}

// Runtime.malloc on the C++ model, on the calling thread's current stream of the device: the block's address.
uint64_t device_malloc(Fast& fast, int64_t index, void* allocator, int64_t nbytes) {
  int64_t stream = 0;
  // runtime.thread.stream_ids: this thread's own (a threading.local's attribute), empty until it sets a stream
  const uint64_t thread = PyThreadState_GetID(PyThreadState_Get());
  if (thread != fast.ids_thread) {
    auto ids = py::reinterpret_steal<py::object>(PyObject_GetAttr(fast.thread.ptr(), fast.stream_ids_name.ptr()));
    if (!ids || !PyDict_Check(ids.ptr())) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "runtime.thread.stream_ids is not a dict");
      throw py::error_already_set();
    }
    fast.ids = std::move(ids);
    fast.ids_thread = thread;
  }
  const py::object& ids = fast.ids;
  if (PyDict_GET_SIZE(ids.ptr()) != 0) {
    auto key = py::reinterpret_steal<py::object>(PyLong_FromLongLong(index));
    PyObject* id = PyDict_GetItemWithError(ids.ptr(), key.ptr());
    if (id == nullptr && PyErr_Occurred()) throw py::error_already_set();
    if (id != nullptr) stream = PyLong_AsLongLong(id);
  }
  const auto before = cxx_usage(allocator);
  uint64_t ptr = 0, alloc_size = 0;
  const bool ok = cxx_malloc(allocator, nbytes, stream, &ptr, &alloc_size);
  if (!ok || cxx_usage(allocator) != before) {
    // a cudaMalloc, a release of cached segments, or an OOM: Runtime.malloc's listeners, and torch's OOM
    fast.rules.attr("fast_allocated")(index, before.first, before.second,
                                       ok ? py::object(py::none()) : py::make_tuple(alloc_size, nbytes));
    if (!ok) throw std::logic_error("fast_allocated returned for an allocation that ran out of memory");
  }
  return ptr;
}

// A fresh output storage charged to the device: a block from its model, and tracker.live's entry for it. As
// ChargeRules._charge: only outputs Python sees as plain tensors or parameters (a badged one, an in-place op's
// self, is charged already; a subclass's is its own business).
void charge(Fast& fast, const at::Tensor& t, int64_t index, void* allocator,
            const std::vector<const c10::StorageImpl*>& written) {
  if (!chargeable(t)) return;
  if (PyObject* object = t.unsafeGetTensorImpl()->pyobj_slot()->load_pyobj()) {
    PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(object));
    if (type != fast.plain_tensor.ptr() && type != fast.plain_parameter.ptr()) return;
  }
  const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  for (const auto* w : written)
    if (w == impl) return;
  py::object key = key_of(impl);
  int has = PyDict_Contains(fast.live.ptr(), key.ptr());
  if (has < 0) throw py::error_already_set();
  if (has) return;
  const int64_t nbytes = static_cast<int64_t>(t.storage().nbytes());
  py::object block = py::none();
  if (nbytes) {
    block = py::reinterpret_steal<py::object>(
        PyLong_FromUnsignedLongLong(device_malloc(fast, index, allocator, nbytes)));
  }
  auto entry = py::make_tuple(index, block, watch_storage(t.storage(), fast.sink, key.ptr()));
  if (PyDict_SetItem(fast.live.ptr(), key.ptr(), entry.ptr()) < 0) throw py::error_already_set();
}

// Whether the GEMM on this slot's device may be charged here: fast_gemm's answer, kept until the runtime's
// workspaces object or its version changes; "not yet" (cuBLAS not loaded: the Python rules load it at the device's
// first GEMM) is asked again at the next GEMM.
bool gemm_open(Fast& fast, Slot& slot, int64_t index) {
  auto workspaces =
      py::reinterpret_steal<py::object>(PyObject_GetAttr(fast.runtime.ptr(), fast.workspaces_name.ptr()));
  if (!workspaces) throw py::error_already_set();
  int64_t version = -1;
  if (!workspaces.is_none()) {
    auto v = py::reinterpret_steal<py::object>(PyObject_GetAttr(workspaces.ptr(), fast.version_name.ptr()));
    if (!v) throw py::error_already_set();
    version = PyLong_AsLongLong(v.ptr());
  }
  if (workspaces.ptr() != slot.gemm_workspaces.ptr() || version != slot.gemm_version) {
    slot.gemm_workspaces = std::move(workspaces);
    slot.gemm_version = version;
    slot.gemm_state = kGemmNotYet;
  }
  if (slot.gemm_state == kGemmNotYet) {
    auto answer = fast.rules.attr("fast_gemm")(index).cast<std::tuple<int, int64_t, int64_t>>();
    slot.gemm_state = std::get<0>(answer);
    slot.gemm_lt = std::get<1>(answer);
    slot.gemm_chosen = std::get<2>(answer);
  }
  return slot.gemm_state == kGemmFast;
}

const at::Tensor* tensor_at(const std::vector<c10::IValue>& arguments, size_t i) {
  if (i >= arguments.size() || !arguments[i].isTensor()) return nullptr;
  const at::Tensor& t = arguments[i].toTensor();
  return t.defined() ? &t : nullptr;
}

int64_t nbytes_of(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// dispatch.py's _cublas_readable: one of the last two dimensions unit-stride, the other a leading dimension at
// least as long as the rows it steps over.
bool cublas_readable(const at::Tensor& t) {
  const int64_t rows = t.size(-2), cols = t.size(-1), s_rows = t.stride(-2), s_cols = t.stride(-1);
  if (s_cols == 1 && s_rows >= std::max<int64_t>(1, cols)) return true;
  return s_rows == 1 && s_cols >= std::max<int64_t>(1, rows);
}

bool scalar_is_one(const c10::IValue& value) {
  if (!value.isScalar()) return false;
  const c10::Scalar s = value.toScalar();
  if (s.isBoolean()) return s.toBool();
  if (s.isIntegral(false)) return s.toLong() == 1;
  if (s.isFloatingPoint()) return s.toDouble() == 1.0;
  if (s.isComplex()) return s.toComplexDouble() == c10::complex<double>(1.0, 0.0);
  return false;
}

// dispatch.py's _uses_lt: a contiguous 1-D bias as long as the product's columns, beta 1, 2-D matrices of a
// float type (the arguments in the schema's order: bias, mat1, mat2, beta).
bool uses_lt(const std::vector<c10::IValue>& arguments) {
  const at::Tensor* bias = tensor_at(arguments, 0);
  const at::Tensor* a = tensor_at(arguments, 1);
  const at::Tensor* b = tensor_at(arguments, 2);
  if (bias == nullptr || a == nullptr || b == nullptr || bias->dim() != 1) return false;
  if (arguments.size() > 3 && !scalar_is_one(arguments[3])) return false;
  const auto dtype = a->scalar_type();
  return bias->is_contiguous() && a->dim() == 2 && b->dim() == 2 && bias->size(0) == b->size(1) &&
         (dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf || dtype == at::kBFloat16);
}

// ChargeRules._gemm after the output is charged: nothing when ATen answers without cuBLAS (an empty operand), else a
// contiguous copy of each matrix operand cuBLAS cannot read, the call's workspace taken and freed, then the copies
// freed, in _gemm's order.
void gemm_transients(Fast& fast, const Slot& slot, int64_t index, void* allocator, int32_t kind,
                     const std::vector<c10::IValue>& arguments) {
  const size_t first = (kind & kBiasFirst) ? 1 : 0;
  for (size_t i = first; i < first + 2; ++i) {
    const at::Tensor* t = tensor_at(arguments, i);
    if (t != nullptr && t->numel() == 0) return;  // _calls_cublas
  }
  std::vector<uint64_t> copies;
  try {
    if (kind & kCopies) {
      for (size_t i = first; i < first + 2; ++i) {
        const at::Tensor* t = tensor_at(arguments, i);
        if (t != nullptr && t->dim() >= 2 && t->numel() && !cublas_readable(*t)) {
          copies.push_back(device_malloc(fast, index, allocator, nbytes_of(*t)));
        }
      }
    }
    const int64_t workspace = ((kind & kLt) && uses_lt(arguments)) ? slot.gemm_lt : slot.gemm_chosen;
    if (workspace) cxx_free(allocator, device_malloc(fast, index, allocator, workspace));
  } catch (...) {  // out of memory: the copies taken so far go back, as _gemm's finally gives them back
    for (const uint64_t block : copies) cxx_free(allocator, block);
    throw;
  }
  for (const uint64_t block : copies) cxx_free(allocator, block);
}

// Whether cuDNN is loaded on the slot's device: asked until it is (the rules load it at its first op).
bool cudnn_open(Fast& fast, Slot& slot, int64_t index) {
  if (!slot.cudnn) slot.cudnn = fast.rules.attr("fast_cudnn")(index).cast<bool>();
  return slot.cudnn;
}

// The op's `dim` argument as _reduced_dims reads it: None when absent or None, an int, a tuple of ints; anything
// else (a Dimname list) a value it refuses. Appended to the cache key as well: a tag, then the ints.
py::object dims_argument(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& arguments,
                         std::vector<int64_t>& key) {
  const auto& declared = schema.arguments();
  for (size_t i = 0; i < declared.size() && i < arguments.size(); ++i) {
    if (declared[i].name() != "dim") continue;
    const c10::IValue& value = arguments[i];
    if (value.isNone()) break;
    if (value.isInt()) {
      key.push_back(-2);
      key.push_back(value.toInt());
      return py::int_(value.toInt());
    }
    if (value.isIntList()) {
      const auto dims = value.toIntVector();
      key.push_back(-3);
      key.push_back(static_cast<int64_t>(dims.size()));
      py::tuple out(dims.size());
      for (size_t j = 0; j < dims.size(); ++j) {
        key.push_back(dims[j]);
        out[j] = py::int_(dims[j]);
      }
      return std::move(out);
    }
    key.push_back(-4);
    return py::str("not a list of ints");
  }
  key.push_back(-1);
  return py::none();
}

// ChargeRules._staging's buffers for a reduction of `x` (fast_staging's answer, remembered per distinct call): taken
// after the op's outputs and freed last taken first, as _transient does.
void staging_transients(Fast& fast, const c10::OperatorHandle& op, int64_t index, void* allocator,
                        const at::Tensor& x, const std::vector<c10::IValue>& arguments, bool convolution_backward) {
  std::vector<int64_t> key{reinterpret_cast<int64_t>(&op.schema()), index, static_cast<int64_t>(x.scalar_type()),
                           x.dim()};
  for (const int64_t n : x.sizes()) key.push_back(n);
  for (const int64_t n : x.strides()) key.push_back(n);
  key.push_back(x.storage_offset());
  py::object dims = py::none();
  if (convolution_backward) {
    key.push_back(-5);
  } else {
    dims = dims_argument(op.schema(), arguments, key);
  }
  auto found = fast.staging.find(key);
  if (found == fast.staging.end()) {
    py::tuple shape(x.dim()), strides(x.dim());
    for (int64_t d = 0; d < x.dim(); ++d) {
      shape[d] = py::int_(x.size(d));
      strides[d] = py::int_(x.stride(d));
    }
    auto dtype = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(x.scalar_type())));
    auto sizes = fast.rules.attr("fast_staging")(torch::detail::getTorchApiFunction(op), index, shape, strides,
                                                 x.storage_offset(), dtype, dims).cast<std::vector<int64_t>>();
    found = fast.staging.emplace(std::move(key), std::move(sizes)).first;
  }
  ++fast.reductions;
  std::vector<uint64_t> blocks;
  try {
    for (const int64_t nbytes : found->second) blocks.push_back(device_malloc(fast, index, allocator, nbytes));
  } catch (...) {  // out of memory: what was taken goes back, as the rules' frames would drop it
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) cxx_free(allocator, *it);
    throw;
  }
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) cxx_free(allocator, *it);
}

// ChargeRules._convolution_backward: a contiguous copy of grad_output unless it is one, grad_input and grad_weight,
// the copy freed, then grad_bias and its sum's staging.
void convolution_backward(Fast& fast, const c10::OperatorHandle& op, int64_t index, void* allocator,
                          const std::vector<c10::IValue>& arguments, const c10::IValue* outputs, size_t n_outputs,
                          const std::vector<const c10::StorageImpl*>& written) {
  const at::Tensor* grad_output = tensor_at(arguments, 0);
  uint64_t copy = 0;
  bool copied = false;
  if (grad_output != nullptr && !grad_output->is_contiguous()) {
    copy = device_malloc(fast, index, allocator, nbytes_of(*grad_output));
    copied = true;
  }
  try {
    for (size_t i = 0; i < 2 && i < n_outputs; ++i)
      each_tensor(outputs[i], [&](const at::Tensor& t) { charge(fast, t, index, allocator, written); });
  } catch (...) {
    if (copied) cxx_free(allocator, copy);
    throw;
  }
  if (copied) cxx_free(allocator, copy);
  if (n_outputs < 3 || !outputs[2].isTensor() || !outputs[2].toTensor().defined()) return;
  charge(fast, outputs[2].toTensor(), index, allocator, written);
  if (grad_output != nullptr) staging_transients(fast, op, index, allocator, *grad_output, arguments, true);
}

// One more call of an op with a known gap: runtime.gap_calls[name] += 1, as ChargeRules.after counts it.
void count_gap(Fast& fast, const c10::OperatorHandle& op) {
  PyObject* name = fast.gaps.at(&op.schema()).ptr();
  auto calls = py::reinterpret_steal<py::object>(PyObject_GetAttr(fast.runtime.ptr(), fast.gap_calls_name.ptr()));
  if (!calls) throw py::error_already_set();
  PyObject* count = PyDict_GetItemWithError(calls.ptr(), name);
  if (count == nullptr && PyErr_Occurred()) throw py::error_already_set();
  auto next = py::reinterpret_steal<py::object>(PyLong_FromLongLong(count ? PyLong_AsLongLong(count) + 1 : 1));
  if (PyDict_SetItem(calls.ptr(), name, next.ptr()) < 0) throw py::error_already_set();
}

// ChargeRules.after for layer norm: a contiguous copy of its input (arguments[0] forward, [1] backward) taken before
// the outputs are charged and freed after them; in backward dY's copy (arguments[0]) taken and freed between.
void layer_norm(Fast& fast, int64_t index, void* allocator, bool backward, const std::vector<c10::IValue>& arguments,
                const c10::IValue* outputs, size_t n_outputs, const std::vector<const c10::StorageImpl*>& written) {
  const at::Tensor* input = tensor_at(arguments, backward ? 1 : 0);
  uint64_t held = 0;
  const bool copied = input != nullptr && !input->is_contiguous();
  if (copied) held = device_malloc(fast, index, allocator, nbytes_of(*input));
  try {
    for (size_t i = 0; i < n_outputs; ++i)
      each_tensor(outputs[i], [&](const at::Tensor& t) { charge(fast, t, index, allocator, written); });
    const at::Tensor* grad = backward ? tensor_at(arguments, 0) : nullptr;
    if (grad != nullptr && !grad->is_contiguous())
      cxx_free(allocator, device_malloc(fast, index, allocator, nbytes_of(*grad)));
  } catch (...) {
    if (copied) cxx_free(allocator, held);
    throw;
  }
  if (copied) cxx_free(allocator, held);
}

// The op's busy time, joined to the last record where Publisher.busy would join it to that record's span whatever
// came before: both have length, one board and kind, it starts within BUSY_GAP_NS of the record's end and ends in
// the slot the record's first op ended in (ops end in order, so a span the publisher holds that took the record's
// first op ends in that slot too). Publisher.busy then joins or starts spans exactly as it would op by op.
void join_busy(std::vector<BusyRecord>& busy, int64_t slot_ns, int64_t gap_ns, int64_t board, bool compute,
               int64_t started, int64_t now) {
  if (!busy.empty()) {
    BusyRecord& last = busy.back();
    if (last.board == board && last.compute == compute && last.started < last.ended && started < now &&
        started < last.ended + gap_ns && now < last.slot_end) {
      last.ended = std::max(last.ended, now);
      return;
    }
  }
  busy.push_back({board, compute, started, now, (now / slot_ns + 1) * slot_ns});
}

void keep_busy(Fast& state, int64_t board, bool compute, int64_t started, int64_t now) {
  if (ring_open()) {  // written at once: a record costs no more than keeping it
    drain_busy(state);
    ring_busy(board, compute, started, now);
    return;
  }
  if (state.busy.empty()) state.busy_since = now;
  join_busy(state.busy, state.slot_ns, state.gap_ns, board, compute, started, now);
}

}  // namespace

// Called by the fallback under the GIL after the op ran; false: nothing was done, the Python rules decide.
bool charge_fast(const c10::OperatorHandle& op, const std::vector<c10::IValue>& arguments, const c10::IValue* outputs,
                 size_t n_outputs, int64_t started) {
  const std::shared_ptr<Fast> held = fast;
  if (!held) return false;
  Fast& state = *held;
  const int64_t index = device_of(state, arguments);
  if (index < 0) return true;  // on no fake device: the rules have nothing to do (a CPU op, an optimizer's .item())
  const int32_t kind = kind_of(state, op);
  if (kind == 0) return false;
  const int64_t now = now_ns();
  Slot* slot = open_slot(state, index, now);
  if (slot == nullptr) return false;
  if ((kind & kGemm) && !gemm_open(state, *slot, index)) return false;
  if ((kind & kCudnn) && !cudnn_open(state, *slot, index)) return false;
  if ((kind & kAdd) && !c10::GradMode::is_enabled()) return false;
  const py::object model = slot->allocator_object;  // (kept alive for the call whatever Python does meanwhile)
  void* const allocator = slot->allocator;
  // Runtime.ran: the device was busy with the op (faults and the first launch are settled by the window)
  keep_busy(state, slot->board, (kind & 2) != 0, started, now);
  if (state.busy.size() >= kBusyBatch || now - state.busy_since >= kBusyDelayNs) drain_busy(state);
  // The storages the op writes into belong to someone already (ChargeRules._written)
  std::vector<const c10::StorageImpl*> written;
  const auto& schema_arguments = op.schema().arguments();
  for (size_t i = 0; i < schema_arguments.size() && i < arguments.size(); ++i) {
    const auto* alias = schema_arguments[i].alias_info();
    if (alias != nullptr && alias->isWrite()) {
      each_tensor(arguments[i], [&](const at::Tensor& t) {
        if (t.defined() && t.has_storage()) written.push_back(t.storage().unsafeGetStorageImpl());
      });
    }
  }
  if (kind & kGap) count_gap(state, op);
  if (kind & kCudnn) ++state.convolutions;
  if (kind & (kLayerNorm | kLayerNormBackward)) {
    layer_norm(state, index, allocator, (kind & kLayerNormBackward) != 0, arguments, outputs, n_outputs, written);
    ++state.handled;
    return true;
  }
  if (kind & kConvolutionBackward) {
    convolution_backward(state, op, index, allocator, arguments, outputs, n_outputs, written);
    ++state.handled;
    return true;
  }
  for (size_t i = 0; i < n_outputs; ++i) {
    each_tensor(outputs[i], [&](const at::Tensor& t) { charge(state, t, index, allocator, written); });
  }
  if (kind & kReduction) {  // ChargeRules._reduction: a strided first argument, else no staging
    const at::Tensor* x = tensor_at(arguments, 0);
    if (x != nullptr && x->layout() == at::kStrided) staging_transients(state, op, index, allocator, *x, arguments, false);
  }
  if (kind & kGemm) {
    ++state.gemms;  // (counted before its buffers: one that runs out of memory was taken here too)
    gemm_transients(state, *slot, index, allocator, kind, arguments);
  }
  ++state.handled;
  return true;
}

void register_fast(py::module_& m) {
  m.def("fast_install", [](py::object rules, py::object live, py::object devices, py::object thread,
                           py::tuple fake_types) {
    if (!PyDict_CheckExact(live.ptr()) || !PyList_CheckExact(devices.ptr()) || fake_types.size() != 2)
      throw py::type_error("fast_install takes tracker.live (a dict), runtime.devices (a list), runtime.thread "
                           "and (FakeCudaTensor, FakeCudaParameter)");
    if (fast) drain_busy(*fast);
    auto state = std::make_shared<Fast>();
    state->rules = std::move(rules);
    state->live = std::move(live);
    state->devices = std::move(devices);
    state->thread = std::move(thread);
    state->sink = watch_sink(state->live, state->devices);
    state->runtime = state->rules.attr("runtime");
    state->fake_tensor = fake_types[0];
    state->fake_parameter = fake_types[1];
    auto torch_module = py::module_::import("torch");
    state->plain_tensor = torch_module.attr("Tensor");
    state->plain_parameter = torch_module.attr("nn").attr("Parameter");
    state->slots.resize(static_cast<size_t>(PyList_GET_SIZE(state->devices.ptr())));
    auto shared_state = py::module_::import("fakegpu.shared_state");
    state->slot_ns = shared_state.attr("SLOT_NS").cast<int64_t>();
    state->gap_ns = shared_state.attr("BUSY_GAP_NS").cast<int64_t>();
    fast = std::move(state);
  });
  m.def("fast_uninstall", []() {
    const std::shared_ptr<Fast> held = std::move(fast);
    if (held) drain_busy(*held);
  });
  m.def("fast_drain", []() {
    const std::shared_ptr<Fast> held = fast;
    if (held) drain_busy(*held);
  }, "Hand the busy time kept here to ChargeRules.fast_busy now.");
  m.def("fast_handled", []() -> py::object {
    if (!fast) return py::none();
    return py::int_(fast->handled);
  }, "How many ops the installed fast path charged; None when none is installed.");
  m.def("fast_gemms", []() -> py::object {
    if (!fast) return py::none();
    return py::int_(fast->gemms);
  }, "How many of those were GEMMs; None when none is installed.");
  m.def("join_busy", [](const std::vector<std::tuple<int64_t, bool, int64_t, int64_t>>& records, int64_t slot_ns,
                        int64_t gap_ns) {
    std::vector<BusyRecord> busy;
    for (const auto& [board, compute, started, ended] : records)
      join_busy(busy, slot_ns, gap_ns, board, compute, started, ended);
    std::vector<std::tuple<int64_t, bool, int64_t, int64_t>> out;
    for (const auto& r : busy) out.emplace_back(r.board, r.compute != 0, r.started, r.ended);
    return out;
  }, "The fast path's busy records for these ops (board, compute, started, ended), joined as it hands them over "
     "(for tests).");
  m.def("fast_reductions", []() -> py::object {
    if (!fast) return py::none();
    return py::int_(fast->reductions);
  }, "How many reductions' staging (convolution_backward's bias sum included) was taken here; None when none is "
     "installed.");
  m.def("fast_convolutions", []() -> py::object {
    if (!fast) return py::none();
    return py::int_(fast->convolutions);
  }, "How many cuDNN convolutions, forward and backward, were charged here; None when none is installed.");
}
