// fakecuda's charging hook as a dispatcher fallback: the C++ entry of dispatch.py's ChargeRules.
//
// A Python TorchDispatchMode costs ~5 us per ATen op before its body runs (the Python key's handler, the mode
// stack's pop and push, the dynamo-disable wrapper, the op called again from Python): more than the whole 5%
// budget of issue 22 on a transformer step. Here the dispatcher calls a boxed fallback on the `Fake` key, which
// sits below Python and above the backends and has no kernel of any ATen op, so every op keeps the kernel it
// runs without the hook (bench/bench_dispatch_hook.py measured that). The fallback runs the op itself and calls
// Python only for the bookkeeping, with the op's arguments and outputs as a TorchDispatchMode would see them.
//
// Turned on as a mode is: the thread's included dispatch keys (the autograd engine carries them to the threads
// it runs backward on). While the fallback runs (the op's kernel, the Python rules) `Fake` is excluded, so the
// ops a CPU kernel or a rule calls inside are not charged, as they are not under a mode, which is popped while
// its handler runs.
#include <torch/extension.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/PyInterpreter.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>

#include <time.h>

#include <atomic>
#include <utility>

bool charge_fast(const c10::OperatorHandle& op, const std::vector<c10::IValue>& arguments,
                 const c10::IValue* outputs, size_t n_outputs, int64_t started);  // charge_fast.cpp
void rewatch_swapped();                                                            // storage_watch.cpp
void register_mode_fast(py::module_& m);                                           // mode_fast.cpp

namespace {

// ChargeRules.hook_after(func, args, kwargs, out, started_ns) and .hook_factory(func, args, kwargs, started_ns);
// set while a hook is installed, changed under the GIL only, read before taking it as a hint (a thread whose
// keys include Fake can run ops while another uninstalls), and taken for the call under it. Leaked at exit on
// purpose: the interpreter may be gone when statics die.
std::atomic<PyObject*> after_rule{nullptr};
std::atomic<PyObject*> factory_rule{nullptr};

// The rule as an owned reference, under the GIL; none when uninstalled meanwhile.
py::object rule(const std::atomic<PyObject*>& slot) {
  PyObject* fn = slot.load();
  return fn == nullptr ? py::object() : py::reinterpret_borrow<py::object>(fn);
}

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // Python's time.monotonic_ns() clock: the rules compare with it
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool is_kind(const c10::Argument& arg, c10::TypeKind kind) {
  const auto& type = arg.real_type();
  if (type->kind() == kind) {
    return true;
  }
  auto optional = type->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == kind;
}

// An argument as Python code sees it: dtypes, layouts and memory formats travel as ints on the stack.
py::object to_python(const c10::Argument& arg, const c10::IValue& value) {
  if (value.isNone()) {
    return py::none();
  }
  if (is_kind(arg, c10::ScalarTypeType::Kind)) {
    return py::reinterpret_borrow<py::object>(
        reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(value.toInt()))));
  }
  if (is_kind(arg, c10::LayoutType::Kind)) {
    return py::reinterpret_borrow<py::object>(
        reinterpret_cast<PyObject*>(torch::getTHPLayout(static_cast<c10::Layout>(value.toInt()))));
  }
  if (is_kind(arg, c10::MemoryFormatType::Kind)) {
    return py::reinterpret_borrow<py::object>(
        torch::utils::getTHPMemoryFormat(static_cast<c10::MemoryFormat>(value.toInt())));
  }
  return torch::jit::toPyObject(value);
}

bool is_default(const c10::Argument& arg, const c10::IValue& value) {
  return arg.default_value().has_value() && *arg.default_value() == value;
}

// (args, kwargs) by the rule torch's Python key uses for __torch_dispatch__: keyword-only arguments by name,
// positional ones up to the last that differs from its default, keyword ones only where not the default. The
// rules index positional arguments and fall back to defaults past their end, so the split must be the same.
std::pair<py::tuple, py::dict> to_python_call(const c10::FunctionSchema& schema, const c10::IValue* values) {
  const auto& arguments = schema.arguments();
  size_t keyword_start = arguments.size();
  while (keyword_start > 0 && arguments[keyword_start - 1].kwarg_only()) {
    --keyword_start;
  }
  size_t positional_end = keyword_start;
  while (positional_end > 0 && is_default(arguments[positional_end - 1], values[positional_end - 1])) {
    --positional_end;
  }
  py::tuple args(positional_end);
  for (size_t i = 0; i < positional_end; ++i) {
    args[i] = to_python(arguments[i], values[i]);
  }
  py::dict kwargs;
  for (size_t i = keyword_start; i < arguments.size(); ++i) {
    if (!is_default(arguments[i], values[i])) {
      kwargs[py::str(arguments[i].name())] = to_python(arguments[i], values[i]);
    }
  }
  return {std::move(args), std::move(kwargs)};
}

// The outputs as the op's Python call returns them: one object, or a tuple for several.
py::object outputs_to_python(const c10::FunctionSchema& schema, const c10::IValue* values) {
  const auto n = schema.returns().size();
  if (n == 1) {
    return torch::jit::toPyObject(values[0]);
  }
  py::tuple out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] = torch::jit::toPyObject(values[i]);
  }
  return out;
}

// A creation op for a CUDA device reached the dispatcher (Python code inside one of FakeCudaMode's handlers);
// only the keyword-only device argument counts, as in ChargeMode.
bool cuda_device_argument(const c10::FunctionSchema& schema, const c10::IValue* values) {
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].kwarg_only() && values[i].isDevice() && values[i].toDevice().is_cuda() &&
        arguments[i].name() == "device") {
      return true;
    }
  }
  return false;
}

bool holds_cpu_tensor(const c10::IValue& value) {
  if (value.isTensor()) {
    const auto& t = value.toTensor();
    return t.defined() && t.is_cpu();
  }
  if (value.isTensorList()) {
    for (const auto& t : value.toTensorList()) {
      if (static_cast<at::Tensor>(t).is_cpu()) {
        return true;
      }
    }
    return false;
  }
  if (value.isList()) {  // Tensor?[] (index's indices)
    for (const auto& item : value.toListRef()) {
      if (item.isTensor() && item.toTensor().defined() && item.toTensor().is_cpu()) {
        return true;
      }
    }
  }
  return false;
}

// A view (detach, t, expand, ...): its outputs alias an input without writing it. CUDA runs no kernel and allocates
// nothing for one, so the rules have nothing to do; and a Python object made for a view's output here would
// break C++ that gives the same tensor a Python object of its own (nn.Parameter's detach in _make_subclass).
bool is_view(const c10::FunctionSchema& schema) {
  const auto& returns = schema.returns();
  if (returns.empty()) {
    return false;
  }
  for (const auto& r : returns) {
    if (r.alias_info() == nullptr || r.alias_info()->isWrite()) {
      return false;
    }
  }
  return true;
}

void fallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  c10::impl::ExcludeDispatchKeyGuard inside(c10::DispatchKey::Fake);
  const auto started = monotonic_ns();
  const auto& schema = op.schema();
  const auto n_args = schema.arguments().size();
  const c10::IValue* values = stack->data() + stack->size() - n_args;
  if (factory_rule.load() != nullptr && cuda_device_argument(schema, values)) {
    py::gil_scoped_acquire gil;
    py::object factory = rule(factory_rule);
    if (!factory) {  // uninstalled meanwhile: the op as it would run without fakecuda
      py::gil_scoped_release no_gil;
      op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::Fake), stack);
      return;
    }
    auto [args, kwargs] = to_python_call(schema, values);
    torch::jit::drop(*stack, n_args);
    py::object out = factory(torch::detail::getTorchApiFunction(op), args, kwargs, started);
    const auto& returns = schema.returns();
    if (returns.size() == 1) {
      stack->push_back(torch::jit::toIValue(out, returns[0].real_type()));
    } else {
      auto items = out.cast<py::sequence>();
      for (size_t i = 0; i < returns.size(); ++i) {
        stack->push_back(torch::jit::toIValue(items[i], returns[i].real_type()));
      }
    }
    return;
  }
  // The rules charge an op to the fake device of an input; an op with no CPU tensor among its inputs (a
  // creation op for the host, meta tensors under torch.compile's tracing) has none, and a view has nothing to
  // charge: Python is not called for either.
  bool rules = after_rule.load() != nullptr && !is_view(schema);
  if (rules) {
    rules = false;
    for (size_t i = 0; i < n_args && !rules; ++i) {
      rules = holds_cpu_tensor(values[i]);
    }
  }
  if (!rules) {
    op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::Fake), stack);
    return;
  }
  std::vector<c10::IValue> arguments(stack->end() - n_args, stack->end());
  op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::Fake), stack);
  py::gil_scoped_acquire gil;
  rewatch_swapped();  // (a resize_ that just ran swapped a charged storage's memory)
  py::object after = rule(after_rule);
  if (!after) {
    return;
  }
  const size_t n_returns = schema.returns().size();
  if (charge_fast(op, arguments, stack->data() + stack->size() - n_returns, n_returns, started)) {
    return;
  }
  auto [args, kwargs] = to_python_call(schema, arguments.data());
  py::object out = outputs_to_python(schema, stack->data() + stack->size() - n_returns);
  after(torch::detail::getTorchApiFunction(op), args, kwargs, out, started);
}

void install(py::object after, py::object factory) {  // (pybind holds the GIL here)
  Py_XDECREF(after_rule.exchange(after.release().ptr()));
  Py_XDECREF(factory_rule.exchange(factory.release().ptr()));
}

void uninstall() {
  Py_XDECREF(after_rule.exchange(nullptr));
  Py_XDECREF(factory_rule.exchange(nullptr));
}

// On for this thread (and the autograd engine's runs it starts), as a pushed mode is.
void set_enabled(bool on) { c10::impl::tls_set_dispatch_key_included(c10::DispatchKey::Fake, on); }

bool enabled() { return c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::Fake); }

// Off for a stretch of this thread's ops whatever the included set says (dispatch.suspended, a bench's plain
// CPU side); the previous state, to restore.
bool set_excluded(bool off) {
  const bool was = c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Fake);
  c10::impl::tls_set_dispatch_key_excluded(c10::DispatchKey::Fake, off);
  return was;
}

}  // namespace

TORCH_LIBRARY_IMPL(_, Fake, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>()); }

void register_allocator(pybind11::module_& m);  // allocator.cpp
void register_fast(pybind11::module_& m);       // charge_fast.cpp
void register_watch(pybind11::module_& m);      // storage_watch.cpp
void register_busy_ring(pybind11::module_& m);  // busy_ring.cpp

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  register_allocator(m);
  register_fast(m);
  register_watch(m);
  register_mode_fast(m);
  register_busy_ring(m);
  m.def("install", &install, "Route every op's bookkeeping to after(func, args, kwargs, out, started_ns) and "
                             "CUDA creation ops to factory(func, args, kwargs, started_ns) -> out.");
  m.def("uninstall", &uninstall);
  m.def("set_enabled", &set_enabled);
  m.def("enabled", &enabled);
  m.def("set_excluded", &set_excluded);
}
