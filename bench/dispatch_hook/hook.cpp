// A do-nothing C++ hook below autograd, for bench/bench_dispatch_hook.py: what fakecuda's charging would cost per
// op if it ran in C++ instead of a Python TorchDispatchMode. A boxed fallback on a dispatch key that the thread's
// included set turns on (as a mode is turned on); it counts ops and fresh output storages, then hands the op on.
#include <torch/extension.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <atomic>
#include <memory>

namespace {

std::atomic<int64_t> ops{0};
std::atomic<int64_t> outputs{0};

// The work a charging hook cannot avoid: look at the inputs, run the op, look at its outputs' storages.
template <c10::DispatchKey Key>
void fallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  ops.fetch_add(1, std::memory_order_relaxed);
  const auto& schema = op.schema();
  const auto n_args = schema.arguments().size();
  const c10::StorageImpl* first_input = nullptr;
  for (auto i = stack->size() - n_args; i < stack->size() && first_input == nullptr; ++i) {
    const auto& v = (*stack)[i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().has_storage()) {
      first_input = v.toTensor().storage().unsafeGetStorageImpl();
    }
  }
  op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, Key), stack);
  const auto n_returns = schema.returns().size();
  for (auto i = stack->size() - n_returns; i < stack->size(); ++i) {
    const auto& v = (*stack)[i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().has_storage() &&
        v.toTensor().storage().unsafeGetStorageImpl() != first_input) {
      outputs.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

std::unique_ptr<c10::impl::IncludeDispatchKeyGuard> active;

void enable(const std::string& key) {
  // The old guard goes first: destroyed after a new one, it would restore the set as it was before both.
  active.reset();
  if (key == "Fake") {
    active = std::make_unique<c10::impl::IncludeDispatchKeyGuard>(c10::DispatchKey::Fake);
  } else if (key == "CustomRNGKeyId") {
    active = std::make_unique<c10::impl::IncludeDispatchKeyGuard>(c10::DispatchKey::CustomRNGKeyId);
  } else {
    throw std::invalid_argument("unknown key '" + key + "'; accepted: Fake, CustomRNGKeyId");
  }
}

void disable() { active.reset(); }

std::vector<int64_t> counts() { return {ops.load(), outputs.load()}; }

}  // namespace

// Fake: below Python and above the backends, and no alias key (CompositeExplicitAutograd) maps onto it.
TORCH_LIBRARY_IMPL(_, Fake, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback<c10::DispatchKey::Fake>>());
}

// CustomRNGKeyId counts as a backend: an op's CompositeExplicitAutograd kernel takes precedence over the fallback
// there, so turning it on changes which kernels run (layer norm through batch norm, foreach ops one by one).
TORCH_LIBRARY_IMPL(_, CustomRNGKeyId, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback<c10::DispatchKey::CustomRNGKeyId>>());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("enable", &enable);
  m.def("disable", &disable);
  m.def("counts", &counts);
}
