// FakeCudaMode's common path in C++: a torch function without a handler, on fake tensors of one device, outside
// autocast (mode.py's __torch_function__ down to _badge_outputs). Every other call goes to the Python method
// unchanged. Why: the common path runs once per torch call from Python, and what the next big kernel pays for it
// is the memory it touches more than its instructions (bench/bench_footprint.py): Python frames, bytecode, argument
// dicts and a Python storage object per result, here replaced by a scan of the arguments' types and one dict
// lookup per result.
//
// mode_fast_install(mode, ...) sets the mode's instance attribute `__torch_function__` to a method bound to the mode
// (torch requires `__self__ is mode`) whose function is this one; deleting the attribute puts the Python method back.
// Everything runs under the GIL.

#include <torch/extension.h>

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/python_variable.h>

namespace {

struct ModeFast {
  PyObject* fake_tensor;     // FakeCudaTensor
  PyObject* fake_parameter;  // FakeCudaParameter
  PyObject* plain_tensor;    // torch.Tensor
  PyObject* plain_parameter; // torch.nn.Parameter
  PyObject* queries;         // mode._QUERIES (a frozenset)
  PyObject* handlers;        // mode.HANDLERS (a dict)
  PyObject* live;            // tracker.live (a dict)
  PyObject* account;         // tracker.account (bound)
  PyObject* slow;            // FakeCudaMode.__torch_function__ (the Python function, unbound)
  PyObject* index_name;      // "_fc_index"
  PyObject* class_name;      // "__class__"
  PyObject* device_name;     // "device"
};

void destroy(ModeFast* state) {
  for (PyObject* o : {state->fake_tensor, state->fake_parameter, state->plain_tensor, state->plain_parameter,
                      state->queries, state->handlers, state->live, state->account, state->slow, state->index_name,
                      state->class_name, state->device_name})
    Py_XDECREF(o);
  delete state;
}

void release(PyObject* capsule) {
  auto* state = static_cast<ModeFast*>(PyCapsule_GetPointer(capsule, "fakegpu.ModeFast"));
  if (state != nullptr) destroy(state);
}

constexpr int kSlow = -2;  // the call needs the Python method

// The fake device of a tensor argument (-1: none) into `index`; kSlow where the Python path must decide (a second
// device, a CPU tensor that is not a scalar).
int scan_one(const ModeFast& s, PyObject* a, long long& index) {
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(a));
  if (type == s.fake_tensor || type == s.fake_parameter) {
    PyObject* value = PyObject_GetAttr(a, s.index_name);
    if (value == nullptr) return -1;
    const long long i = PyLong_AsLongLong(value);
    Py_DECREF(value);
    if (i == -1 && PyErr_Occurred()) return -1;
    if (index == -1) {
      index = i;
    } else if (i != index) {
      return kSlow;
    }
  } else if (type == s.plain_tensor || type == s.plain_parameter) {
    if (THPVariable_Unpack(a).dim() != 0) return kSlow;
  }
  return 0;
}

int scan(const ModeFast& s, PyObject* a, long long& index) {
  if (PyList_CheckExact(a) || PyTuple_CheckExact(a)) {
    PyObject* seq = a;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject** items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; ++i) {
      const int r = scan_one(s, items[i], index);
      if (r != 0) return r;
    }
    return 0;
  }
  return scan_one(s, a, index);
}

// badge() of tensor.py for a fresh plain tensor: the fake class, the device, and the storage charged (the C++ hook
// has charged it already in the common case; else tracker.account does).
bool badge(const ModeFast& s, PyObject* out, PyObject* index) {
  if (PyObject_SetAttr(out, s.class_name, s.fake_tensor) < 0) return false;
  if (PyObject_SetAttr(out, s.index_name, index) < 0) return false;
  const at::Tensor& t = THPVariable_Unpack(out);
  if (t.has_storage()) {
    PyObject* key = PyLong_FromVoidPtr(t.storage().unsafeGetStorageImpl());
    if (key == nullptr) return false;
    const int has = PyDict_Contains(s.live, key);
    Py_DECREF(key);
    if (has < 0) return false;
    if (has) return true;
  }
  PyObject* done = PyObject_CallFunctionObjArgs(s.account, out, index, nullptr);
  Py_XDECREF(done);
  return done != nullptr;
}

PyObject* call_slow(const ModeFast& s, PyObject* const* args, Py_ssize_t nargs) {
  return PyObject_Vectorcall(s.slow, args, nargs, nullptr);
}

// (mode, func, types, args[, kwargs]) -> func's result, badged as the mode's _badge_outputs does.
PyObject* torch_function(PyObject* capsule, PyObject* const* args, Py_ssize_t nargs) {
  const auto* state = static_cast<ModeFast*>(PyCapsule_GetPointer(capsule, "fakegpu.ModeFast"));
  if (state == nullptr) return nullptr;
  const ModeFast& s = *state;
  if (nargs < 4 || nargs > 5 || !PyTuple_Check(args[3])) return call_slow(s, args, nargs);
  PyObject* func = args[1];
  PyObject* fargs = args[3];
  PyObject* kwargs = nargs == 5 && args[4] != Py_None ? args[4] : nullptr;
  if (kwargs != nullptr && !PyDict_CheckExact(kwargs)) return call_slow(s, args, nargs);
  if (kwargs != nullptr && PyDict_GET_SIZE(kwargs) == 0) kwargs = nullptr;
  const int query = PySet_Contains(s.queries, func);
  if (query < 0) {
    PyErr_Clear();  // an unhashable func: the Python path says what it says
    return call_slow(s, args, nargs);
  }
  if (query) return PyObject_Call(func, fargs, kwargs);
  PyObject* handler = PyDict_GetItemWithError(s.handlers, func);
  if (handler != nullptr || PyErr_Occurred()) {
    PyErr_Clear();
    return call_slow(s, args, nargs);
  }
  if (kwargs != nullptr) {
    PyObject* device = PyDict_GetItemWithError(kwargs, s.device_name);
    if (device == nullptr && PyErr_Occurred()) return nullptr;
    if (device != nullptr && device != Py_None) return call_slow(s, args, nargs);
  }
  long long index = -1;
  const Py_ssize_t n = PyTuple_GET_SIZE(fargs);
  for (Py_ssize_t i = 0; i < n; ++i) {
    const int r = scan(s, PyTuple_GET_ITEM(fargs, i), index);
    if (r == -1) return nullptr;
    if (r == kSlow) return call_slow(s, args, nargs);
  }
  if (kwargs != nullptr) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs, &pos, &key, &value)) {
      const int r = scan(s, value, index);
      if (r == -1) return nullptr;
      if (r == kSlow) return call_slow(s, args, nargs);
    }
  }
  if (index == -1 || at::autocast::is_autocast_enabled(at::DeviceType::CUDA)) return call_slow(s, args, nargs);
  PyObject* out = PyObject_Call(func, fargs, kwargs);
  if (out == nullptr) return nullptr;
  PyObject* badge_index = PyLong_FromLongLong(index);
  if (badge_index == nullptr) {
    Py_DECREF(out);
    return nullptr;
  }
  bool ok = true;
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(out));
  if (type == s.plain_tensor) {
    // an in-place op on a CPU tensor stays on the CPU
    if (!(n > 0 && out == PyTuple_GET_ITEM(fargs, 0))) ok = badge(s, out, badge_index);
  } else if (PyTuple_CheckExact(out) || PyList_CheckExact(out)) {
    const Py_ssize_t m = PySequence_Fast_GET_SIZE(out);
    for (Py_ssize_t i = 0; i < m && ok; ++i) {
      PyObject* o = PySequence_Fast_ITEMS(out)[i];
      if (reinterpret_cast<PyObject*>(Py_TYPE(o)) == s.plain_tensor) ok = badge(s, o, badge_index);
    }
  } else if (PyTuple_Check(out) || PyList_Check(out)) {  // torch.return_types' named tuples
    const Py_ssize_t m = PySequence_Size(out);
    for (Py_ssize_t i = 0; i < m && ok; ++i) {
      PyObject* o = PySequence_GetItem(out, i);
      if (o == nullptr) {
        ok = false;
        break;
      }
      if (reinterpret_cast<PyObject*>(Py_TYPE(o)) == s.plain_tensor) ok = badge(s, o, badge_index);
      Py_DECREF(o);
    }
  }
  Py_DECREF(badge_index);
  if (!ok) {
    Py_DECREF(out);
    return nullptr;
  }
  return out;
}

PyMethodDef torch_function_def = {"__torch_function__", reinterpret_cast<PyCFunction>(torch_function),
                                  METH_FASTCALL, "FakeCudaMode's common path (mode_fast.cpp)"};

}  // namespace

void register_mode_fast(py::module_& m) {
  m.def("mode_fast_function",
        [](py::object fake_types, py::object plain_types, py::object queries, py::object handlers, py::object live,
           py::object account, py::object slow) -> py::object {
          auto fakes = fake_types.cast<py::tuple>();
          auto plains = plain_types.cast<py::tuple>();
          if (fakes.size() != 2 || plains.size() != 2 || !PyFrozenSet_Check(queries.ptr()) ||
              !PyDict_CheckExact(handlers.ptr()) || !PyDict_CheckExact(live.ptr()))
            throw py::type_error("mode_fast_function takes (FakeCudaTensor, FakeCudaParameter), (torch.Tensor, "
                                 "nn.Parameter), _QUERIES (a frozenset), HANDLERS (a dict), tracker.live (a dict), "
                                 "tracker.account and FakeCudaMode.__torch_function__");
          auto owned = [](py::handle h) { return h.inc_ref().ptr(); };
          auto* state = new ModeFast{owned(fakes[0]), owned(fakes[1]), owned(plains[0]),
                                     owned(plains[1]), queries.inc_ref().ptr(), handlers.inc_ref().ptr(),
                                     live.inc_ref().ptr(), account.inc_ref().ptr(), slow.inc_ref().ptr(),
                                     PyUnicode_InternFromString("_fc_index"), PyUnicode_InternFromString("__class__"),
                                     PyUnicode_InternFromString("device")};
          PyObject* capsule = PyCapsule_New(state, "fakegpu.ModeFast", release);
          if (capsule == nullptr) {
            destroy(state);
            throw py::error_already_set();
          }
          PyObject* fn = PyCFunction_New(&torch_function_def, capsule);
          Py_DECREF(capsule);
          if (fn == nullptr) throw py::error_already_set();
          return py::reinterpret_steal<py::object>(fn);
        },
        "The function of FakeCudaMode's C++ common path, to bind to the mode (its first argument): calls it cannot "
        "finish go to `slow`, FakeCudaMode.__torch_function__, with the same arguments.");
}
