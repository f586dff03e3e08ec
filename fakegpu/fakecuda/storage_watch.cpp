// How a charged storage's block goes back to its device's model when the storage dies.
//
// tracker.live maps a charged storage (its StorageImpl's address) to (device, block, weak reference). The Python
// tracker's weak reference is to the storage's Python object, which the charging hook used to make for every
// output it charged. That object costs more than the rest of the charge, and it is not free in another way: torch
// keeps a storage's Python object alive, holding a reference to the storage, for as long as anything else refers to
// the storage, so the autograd engine, which sums a gradient into the one it holds only when nothing else holds
// that one's storage (InputBuffer::accumulate), summed every charged gradient out of place: one more
// gradient-sized buffer each, which CUDA's engine does not take.
//
// Here the storage's DataPtr is wrapped instead: the storage keeps its memory, and the wrapper's deleter, which runs
// when the storage lets go of it, gives the block back. A storage also lets go of its DataPtr while it lives: a
// CPU resize_ (Tensor.resize_, UntypedStorage.resize_) or a move to shared memory puts a new one in its place. The
// deleter tells the two apart by the storage's reference count, read through a weak reference the wrapper holds:
// zero while the storage dies (StorageImpl::release_resources clears the DataPtr), above zero for a swap. A swapped
// storage is watched again, under the GIL, after the op that swapped it (the hook's next call) or, for
// UntypedStorage.resize_, by tracker.resize: its new DataPtr wrapped, or, where it is not the CPU allocator's (shared
// memory, whose owners recognise it by its deleter), a weak reference to its Python object, as before. Only the CPU
// allocator's DataPtrs are wrapped; others (a copy-on-write clone's, memory from another library) keep the weak
// reference. A storage method that swaps outside any op (share_memory_) is seen at the next op: a storage that dies
// before that op gives its block back there.
//
// The deleter can run on any thread, with or without the GIL (the autograd engine frees saved tensors without it):
// it takes the GIL to book a death, as torch does to drop a tensor's Python object, and none for a swap.
#include <torch/extension.h>

#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/Storage.h>

#include <pthread.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <vector>

// allocator.cpp
void* cxx_allocator(py::handle obj);
void cxx_free(void* allocator, uint64_t ptr);

// Where deaths are booked: tracker.live and runtime.devices of the fast path's install. Its references are dropped
// under the GIL, by whichever thread lets go of it last (a deleter's, possibly), and not at all once Python is
// finalizing.
struct WatchSink {
  PyObject* live;
  PyObject* devices;
  WatchSink(py::object l, py::object d) : live(l.release().ptr()), devices(d.release().ptr()) {}
  WatchSink(const WatchSink&) = delete;
  WatchSink& operator=(const WatchSink&) = delete;
  ~WatchSink();
};

namespace {

bool python_alive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// Under the GIL, with the caller's pending exception (if any) kept aside and put back after.
template <typename F>
void with_gil(F&& f) noexcept {
  if (!python_alive()) return;
  const PyGILState_STATE state = PyGILState_Ensure();
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  try {
    f();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  if (PyErr_Occurred()) PyErr_WriteUnraisable(nullptr);  // a deleter has no caller to raise to
  PyErr_Restore(type, value, traceback);
  PyGILState_Release(state);
}

py::object key_of(const void* impl) {
  return py::reinterpret_steal<py::object>(PyLong_FromVoidPtr(const_cast<void*>(impl)));
}

// The C++ model behind a device's allocator object, or null for the Python one: the last answer is kept (with a
// reference, so the address cannot be another object's), as every death asks and the answer rarely changes.
// Under the GIL.
void* cxx_model(PyObject* model) {
  static PyObject* last = nullptr;  // (leaked at exit, as the interpreter may be gone before statics die)
  static void* last_allocator = nullptr;
  if (model == last) return last_allocator;
  void* allocator = cxx_allocator(py::handle(model));
  PyObject* previous = last;
  Py_INCREF(model);
  last = model;
  last_allocator = allocator;
  Py_XDECREF(previous);  // (last: a death its release sets off finds the new answer)
  return allocator;
}

// tracker._release's work for the storage at `key`: its entry out of tracker.live, its block back to the model.
// The entry is read now, as _release reads it: Python may have rewritten it (a resize's new block) or taken it
// (transfer). Raises (a Python error set) when the model's free does.
void release_entry(PyObject* live, PyObject* devices, PyObject* key) {
  PyObject* entry = PyDict_GetItemWithError(live, key);
  if (entry == nullptr) {
    if (PyErr_Occurred()) throw py::error_already_set();
    return;
  }
  py::object held = py::reinterpret_borrow<py::object>(entry);
  if (PyDict_DelItem(live, key) < 0) throw py::error_already_set();
  PyObject* block = PyTuple_GET_ITEM(entry, 1);
  if (block == Py_None) return;
  const int64_t index = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 0));
  if (!PyList_Check(devices) || index < 0 || index >= PyList_GET_SIZE(devices))
    throw std::out_of_range("a charged storage's device is not in runtime.devices");
  static PyObject* const allocator_name = PyUnicode_InternFromString("allocator");
  auto model = py::reinterpret_steal<py::object>(PyObject_GetAttr(PyList_GET_ITEM(devices, index), allocator_name));
  if (!model) throw py::error_already_set();
  void* allocator = cxx_model(model.ptr());
  if (allocator != nullptr && PyLong_Check(block)) {
    cxx_free(allocator, PyLong_AsUnsignedLongLong(block));
  } else {
    model.attr("free")(py::handle(block));
  }
}

// The weak reference's callback when a storage watched through its Python object dies; `self` is (key, live,
// devices).
PyObject* released(PyObject* self, PyObject* /*ref*/) {
  try {
    release_entry(PyTuple_GET_ITEM(self, 1), PyTuple_GET_ITEM(self, 2), PyTuple_GET_ITEM(self, 0));
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyMethodDef released_def{"release_charged_storage", released, METH_O, nullptr};

// A weak reference to the storage's Python object (made here if it has none) whose callback releases `key`.
py::object weak_reference(const c10::Storage& storage, const WatchSink& sink, PyObject* key) {
  auto object = py::reinterpret_steal<py::object>(THPStorage_Wrap(storage));
  if (!object) throw py::error_already_set();
  auto context = py::make_tuple(py::handle(key), py::handle(sink.live), py::handle(sink.devices));
  auto callback = py::reinterpret_steal<py::object>(PyCFunction_New(&released_def, context.ptr()));
  if (!callback) throw py::error_already_set();
  auto ref = py::reinterpret_steal<py::object>(PyWeakref_NewRef(object.ptr(), callback.ptr()));
  if (!ref) throw py::error_already_set();
  return ref;
}

// What the wrapper's deleter needs: the DataPtr the storage held (freed with it) and the storage.
struct Watch {
  c10::DataPtr original;
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;
  std::shared_ptr<WatchSink> sink;
};

// The wrapper keeps the memory's address as its context, as the CPU allocator's own DataPtr does: torch calls such a
// DataPtr "simple" and lazily clones (copy-on-write) only those. So its Watch is found by that address.
std::mutex watches_mutex;
std::unordered_map<void*, Watch*>& watches = *new std::unordered_map<void*, Watch*>();  // (leaked, as `swapped`)

// Storages whose wrapped DataPtr was swapped out while they lived: to be watched again (rewatch_swapped).
struct Swapped {
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;
  std::shared_ptr<WatchSink> sink;
};
std::mutex swapped_mutex;
std::vector<Swapped>& swapped = *new std::vector<Swapped>();  // (leaked: deleters may run after static destructors)
std::atomic<bool> any_swapped{false};
std::atomic<bool> wrapping{true};  // off: every storage watched through its Python object (tests, comparisons)

void watched_delete(void* data) {
  std::unique_ptr<Watch> watch;  // the original DataPtr is freed with it, last
  {
    std::lock_guard<std::mutex> lock(watches_mutex);
    auto found = watches.find(data);
    if (found == watches.end()) return;  // (cannot be: every wrapper is registered before it is installed)
    watch.reset(found->second);
    watches.erase(found);
  }
  // A swap, the storage living on with another DataPtr; or a copy-on-write clone's memory outliving the storage
  // it was cloned from, given back now by the clone (the storage's death was not seen: its entry is still there)
  if (!watch->storage.expired()) {
    std::lock_guard<std::mutex> lock(swapped_mutex);
    swapped.push_back({std::move(watch->storage), std::move(watch->sink)});
    any_swapped.store(true);
    return;
  }
  const void* impl = watch->storage._unsafe_get_target();  // (its memory is held by the weak reference until here)
  const WatchSink& sink = *watch->sink;
  with_gil([&] {
    py::object key = key_of(impl);
    release_entry(sink.live, sink.devices, key.ptr());
  });
}

bool cpu_allocators(c10::DeleterFnPtr deleter) {
  return deleter != nullptr &&
         (deleter == c10::GetDefaultCPUAllocator()->raw_deleter() || deleter == c10::GetCPUAllocator()->raw_deleter());
}

// Wrap the storage's DataPtr; false where it is not one this may wrap (see the top of the file).
bool wrap(const c10::Storage& storage, const std::shared_ptr<WatchSink>& sink) {
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  const c10::DataPtr& current = impl->_mutable_data_ptr_no_checks();
  if (current.get_deleter() == &watched_delete) return true;
  // (an empty one, a zero-byte storage's, stays as it is: a DataPtr with a context tests true even without data)
  void* data = current.get();
  if (data == nullptr || current.device().type() != c10::kCPU || !cpu_allocators(current.get_deleter()) ||
      current.get_context() != data)
    return false;
  auto watch = std::make_unique<Watch>(Watch{c10::DataPtr(), storage.getWeakStorageImpl(), sink});
  {
    std::lock_guard<std::mutex> lock(watches_mutex);
    if (!watches.emplace(data, watch.get()).second) return false;  // (another wrapper on this memory: cannot be)
  }
  watch->original = impl->set_data_ptr(c10::DataPtr(data, data, &watched_delete, current.device()));
  watch.release();  // owned through `watches` now, given back by the deleter
  return true;
}

}  // namespace

WatchSink::~WatchSink() {
  PyObject* l = live;
  PyObject* d = devices;
  with_gil([&] {
    Py_DECREF(l);
    Py_DECREF(d);
  });
}

std::shared_ptr<WatchSink> watch_sink(py::object live, py::object devices) {
  return std::make_shared<WatchSink>(std::move(live), std::move(devices));
}

// What tracker.live's entry for a storage charged under `key` holds as its third item: None where the storage's
// DataPtr is wrapped, else a weak reference to its Python object. Under the GIL.
py::object watch_storage(const c10::Storage& storage, const std::shared_ptr<WatchSink>& sink, PyObject* key) {
  if (wrapping.load() && wrap(storage, sink)) return py::none();
  return weak_reference(storage, *sink, key);
}

// Watch the storages swapped out since the last call again; one that died meanwhile, unwatched, is released now.
// Under the GIL.
void rewatch_swapped() {
  if (!any_swapped.load()) return;
  std::vector<Swapped> items;
  {
    std::lock_guard<std::mutex> lock(swapped_mutex);
    items.swap(swapped);
    any_swapped.store(false);
  }
  std::exception_ptr failed;
  for (auto& item : items) {
    try {
      py::object key = key_of(item.storage._unsafe_get_target());
      c10::intrusive_ptr<c10::StorageImpl> alive = item.storage.lock();
      if (!alive) {
        release_entry(item.sink->live, item.sink->devices, key.ptr());
        continue;
      }
      PyObject* found = PyDict_GetItemWithError(item.sink->live, key.ptr());
      if (found == nullptr) {  // no longer charged (transfer took its block): nothing to watch
        if (PyErr_Occurred()) throw py::error_already_set();
        continue;
      }
      py::object entry = py::reinterpret_borrow<py::object>(found);
      const c10::Storage storage(std::move(alive));
      py::object ref = watch_storage(storage, item.sink, key.ptr());
      if (!ref.is_none()) {
        auto updated = py::make_tuple(py::handle(PyTuple_GET_ITEM(entry.ptr(), 0)),
                                      py::handle(PyTuple_GET_ITEM(entry.ptr(), 1)), ref);
        if (PyDict_SetItem(item.sink->live, key.ptr(), updated.ptr()) < 0) throw py::error_already_set();
      }
    } catch (...) {  // the others are still watched; the first failure is raised after
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
}

namespace {

// A fork while another thread is inside one of the two short critical sections above would leave the child's copy
// of that mutex locked for ever (its next storage death would hang): the forking thread holds both across fork().
// Neither is held while waiting for anything else (the GIL included), so taking them here cannot deadlock.
void lock_for_fork() {
  watches_mutex.lock();
  swapped_mutex.lock();
}

void unlock_after_fork() {
  swapped_mutex.unlock();
  watches_mutex.unlock();
}

}  // namespace

namespace {

// What StorageTracker does with a storage while the extension is loaded (tensor.py's tracker.native), done without
// the storage's Python object: torch keeps that object, once made, alive with a reference to the storage for the
// storage's life, and the autograd engine sums a gradient into the one it holds in place only when nothing else
// holds that one's storage (InputBuffer::accumulate). Each gradient Python had asked `untyped_storage()` of (a
// charge, a device lookup) was summed out of place on the CPU: a gradient-sized tensor made and filled where CUDA's
// engine adds into the one it has.
struct StorageNative {
  std::shared_ptr<WatchSink> sink;
};

const c10::Storage& storage_of(const at::Tensor& t) {
  if (!t.has_storage()) throw py::value_error("the tensor has no storage");
  return t.storage();
}

}  // namespace

void register_watch(py::module_& m) {
  py::class_<StorageNative>(m, "StorageNative",
                            "tracker.live's storages, charged and looked at without their Python objects.")
      .def(py::init([](py::object live, py::object devices) {
             if (!PyDict_CheckExact(live.ptr()) || !PyList_CheckExact(devices.ptr()))
               throw py::type_error("StorageNative takes tracker.live (a dict) and runtime.devices (a list)");
             return StorageNative{watch_sink(std::move(live), std::move(devices))};
           }),
           py::arg("live"), py::arg("devices"))
      .def("watch", [](const StorageNative& self, const at::Tensor& t, py::handle key) {
             return watch_storage(storage_of(t), self.sink, key.ptr());
           },
           "The third item of tracker.live's entry for the tensor's storage, charged under `key`: None where its "
           "memory is watched, else a weak reference to its Python object.")
      .def_static("nbytes", [](const at::Tensor& t) { return static_cast<int64_t>(storage_of(t).nbytes()); },
                  "The bytes of the tensor's storage.")
      .def_static("owners", [](const at::Tensor& t) {
             const c10::StorageImpl* impl = storage_of(t).unsafeGetStorageImpl();
             // (a storage's Python object, while it has one, holds one reference: not an owner)
             const int64_t held = static_cast<int64_t>(c10::raw::intrusive_ptr::use_count(
                 const_cast<c10::StorageImpl*>(impl)));
             return held - (impl->pyobj_slot()->load_pyobj() != nullptr ? 1 : 0);
           },
           "How many tensors (and other owners but the storage's own Python object) hold the tensor's storage.");

  static const int forks = pthread_atfork(&lock_for_fork, &unlock_after_fork, &unlock_after_fork);
  if (forks != 0) throw std::runtime_error("pthread_atfork failed for fakecuda's storage watch");
  m.def("rewatch_swapped", &rewatch_swapped,
        "Watch again the charged storages whose memory was swapped since the fast path last ran (a resize).");
  m.def("set_watch_memory", [](bool on) { return wrapping.exchange(on); },
        "Watch storages charged from now on through their memory (on, the default) or their Python object (off: "
        "how it was done before, for tests and comparisons); the previous setting.");
  m.def("watched", [](const at::Tensor& t) {
    return t.has_storage() &&
           t.storage().unsafeGetStorageImpl()->_mutable_data_ptr_no_checks().get_deleter() == &watched_delete;
  }, "Whether the tensor's storage is charged with its DataPtr wrapped (for tests).");
}
