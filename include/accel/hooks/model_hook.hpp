// Accelerate's hooks/ModelHook API: hooks around a module's forward, chained at run time or at
// compile time, attached and removed by name of Accelerate's functions.
//
//   class ModelHook : nn::ModuleHook          init_hook / pre_forward / post_forward / detach_hook, no_grad
//   SequentialHook<H...>                      a chain fixed at compile time: SequentialHook(a, b, c) deduces it
//   SequentialHook<HookList>                  the run-time chain: SequentialHook(HookList{pa, pb, pc})
//   add_hook_to_module(module, hook, append = false)
//   prepend_hook_to_module(module, hook)     in front of the module's hooks (no Accelerate counterpart)
//   find_hook<H>(module)                      the module's hook of class H, in a chain or alone
//   remove_hook_from_module(module, recurse = false)
//   remove_hook_from_submodules(module)
//
// The hook slot itself is nn::Module's (nn/module_hook.hpp): pre_forward sees every tensor of the
// argument pack through a TensorRefs and may replace them, as Accelerate's returns new
// (args, kwargs). A compile-time chain calls its hooks directly, with no indirect call between
// them, and an empty chain is no hook at all: add_hook_to_module leaves the slot empty, so the
// call is the bare forward (bench_module_call measures both).
//
// Differences from Accelerate:
// - `no_grad` is kept for the signature; accel computes no gradients, so every forward already
//   runs as under torch.no_grad().
// - add_hook_to_module(append = false) on a module that has a hook runs the old hook's
//   detach_hook before the new one's init_hook (Accelerate drops the old hook without detaching
//   it, which leaves an offloading hook's weights on meta for good).
// - add_hook_to_module(append = true) runs only the new hook's init_hook: the old one stays
//   attached, as it was, at the head of the chain (Accelerate detaches it and initialises it
//   again, which re-registers an offloading hook's weights), and a chain grows flat instead of
//   nesting one SequentialHook in another. prepend_hook_to_module does the same at the head of
//   the chain, for a hook that must see the arguments before the others align them (a split
//   model's stage hooks, dist/split_model.hpp).
#pragma once

#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/nn/module.hpp"
#include "accel/nn/module_hook.hpp"

namespace accel::hooks {

using nn::TensorRefs;

/// Accelerate's ModelHook: the hook slot's interface plus its `no_grad` attribute.
class ModelHook : public nn::ModuleHook {
 public:
  /// Accelerate runs the forward under torch.no_grad() when set; accel never records gradients.
  bool no_grad = false;
};

/// Hooks chained at run time (SequentialHook<HookList>).
using HookList = std::vector<std::shared_ptr<nn::ModuleHook>>;

/// A chain of hooks fixed at compile time: each H is a class with the hook methods it needs (any
/// of init_hook, pre_forward, post_forward, detach_hook, execution_device; ModelHook's defaults
/// otherwise), called directly in order. SequentialHook<> is empty: attaching it attaches
/// nothing.
template <class... H>
class SequentialHook : public ModelHook {
 public:
  explicit SequentialHook(H... hooks) : hooks_(std::move(hooks)...) {}
  SequentialHook()
    requires(sizeof...(H) > 0)
  = default;
  /// Hook I of the chain.
  template <std::size_t I>
  auto& get() noexcept {
    return std::get<I>(hooks_);
  }
  static constexpr std::size_t size = sizeof...(H);

  void init_hook(nn::Module& m) override {
    each([&](auto& h) {
      if constexpr (requires { h.init_hook(m); }) h.init_hook(m);
    });
  }
  void pre_forward(nn::Module& m, const TensorRefs& args) override {
    each([&](auto& h) {
      if constexpr (requires { h.pre_forward(m, args); }) h.pre_forward(m, args);
    });
  }
  void post_forward(nn::Module& m, const TensorRefs& out) override {
    each([&](auto& h) {
      if constexpr (requires { h.post_forward(m, out); }) h.post_forward(m, out);
    });
  }
  void detach_hook(nn::Module& m) override {
    each([&](auto& h) {
      if constexpr (requires { h.detach_hook(m); }) h.detach_hook(m);
    });
  }
  std::optional<Device> execution_device() const override {
    std::optional<Device> out;
    std::apply(
        [&](const auto&... h) {
          (
              [&] {
                if constexpr (requires { h.execution_device(); }) {
                  if (!out) out = h.execution_device();
                }
              }(),
              ...);
        },
        hooks_);
    return out;
  }

 private:
  template <class F>
  void each(F&& f) {
    std::apply([&](auto&... h) { (f(h), ...); }, hooks_);
  }
  std::tuple<H...> hooks_;
};

/// Several hooks chosen at run time, run as one, in order: init_hook and pre_forward first to last, post_forward
/// first to last on the output (Accelerate's SequentialHook), detach_hook first to last.
template <>
class SequentialHook<HookList> : public ModelHook {
 public:
  explicit SequentialHook(HookList hooks) : hooks_(std::move(hooks)) {
    for (const auto& h : hooks_) {
      if (!h) throw ValueError("SequentialHook: a hook of the chain is null");
    }
  }
  const HookList& hooks() const noexcept { return hooks_; }

  void init_hook(nn::Module& m) override {
    for (auto& h : hooks_) h->init_hook(m);
  }
  void pre_forward(nn::Module& m, const TensorRefs& args) override {
    for (auto& h : hooks_) h->pre_forward(m, args);
  }
  void post_forward(nn::Module& m, const TensorRefs& out) override {
    for (auto& h : hooks_) h->post_forward(m, out);
  }
  void detach_hook(nn::Module& m) override {
    for (auto& h : hooks_) h->detach_hook(m);
  }
  /// The first execution device a hook of the chain names.
  std::optional<Device> execution_device() const override {
    for (const auto& h : hooks_) {
      if (auto d = h->execution_device()) return d;
    }
    return std::nullopt;
  }

 private:
  HookList hooks_;
};

namespace detail {
template <class T>
struct is_empty_chain : std::false_type {};
template <>
struct is_empty_chain<SequentialHook<>> : std::true_type {};
}  // namespace detail

/// Attaches `hook` to `module` and returns the module. With `append` and a hook already there,
/// the two run as a SequentialHook (old first; only the new one is initialised, the old one stays
/// attached); without, the old hook is detached and replaced. An empty compile-time chain
/// attaches nothing.
namespace detail {
/// `hook` joins the module's hooks at the back or the front of one flat run-time chain; only
/// `hook` is initialised, the hooks there stay attached as they are.
inline void join_hook_chain(nn::Module& module, std::shared_ptr<nn::ModuleHook> hook, bool at_front) {
  HookList chain;
  if (const auto* seq = dynamic_cast<const SequentialHook<HookList>*>(module.hook().get())) chain = seq->hooks();
  else chain.push_back(module.hook());
  hook->init_hook(module);  // first: if it throws, the module keeps its hook as it was
  chain.insert(at_front ? chain.begin() : chain.end(), std::move(hook));
  module.exchange_hook(std::make_shared<SequentialHook<HookList>>(std::move(chain)));
}
}  // namespace detail

inline nn::Module& add_hook_to_module(nn::Module& module, std::shared_ptr<nn::ModuleHook> hook, bool append = false) {
  if (!hook) throw ValueError("add_hook_to_module(" + module.class_name() + "): the hook is null");
  if (append && module.hook()) detail::join_hook_chain(module, std::move(hook), /*at_front=*/false);
  else module.set_hook(std::move(hook));
  return module;
}

/// Puts `hook` in front of the module's hooks, so that its pre_forward sees the arguments first
/// and its post_forward runs first; only `hook` is initialised (see the header comment). A module
/// without a hook simply gets it.
inline nn::Module& prepend_hook_to_module(nn::Module& module, std::shared_ptr<nn::ModuleHook> hook) {
  if (!hook) throw ValueError("prepend_hook_to_module(" + module.class_name() + "): the hook is null");
  if (module.hook()) detail::join_hook_chain(module, std::move(hook), /*at_front=*/true);
  else module.set_hook(std::move(hook));
  return module;
}

/// The hook of `module` that is an H: the hook itself, or the first H of its run-time chain;
/// null when there is none.
template <class H>
H* find_hook(const nn::Module& module) {
  nn::ModuleHook* h = module.hook().get();
  if (auto* found = dynamic_cast<H*>(h)) return found;
  if (const auto* seq = dynamic_cast<const SequentialHook<HookList>*>(h)) {
    for (const auto& inner : seq->hooks()) {
      if (auto* found = dynamic_cast<H*>(inner.get())) return found;
    }
  }
  return nullptr;
}

/// add_hook_to_module for a hook given by value (a compile-time chain, or any hook class).
template <class Hook>
  requires std::is_base_of_v<nn::ModuleHook, std::remove_cvref_t<Hook>>
nn::Module& add_hook_to_module(nn::Module& module, Hook&& hook, bool append = false) {
  using H = std::remove_cvref_t<Hook>;
  if constexpr (detail::is_empty_chain<H>::value) {
    return module;  // nothing to run: the slot stays as it is
  } else {
    return add_hook_to_module(module, std::make_shared<H>(std::forward<Hook>(hook)), append);
  }
}

/// Removes the hook of `module` (its detach_hook runs), and of every submodule when `recurse`.
inline nn::Module& remove_hook_from_module(nn::Module& module, bool recurse = false) {
  if (module.hook()) module.set_hook(nullptr);
  if (recurse) {
    for (nn::Module* child : module.children()) remove_hook_from_module(*child, true);
  }
  return module;
}

/// Removes the hooks of `module` and of all its submodules.
inline void remove_hook_from_submodules(nn::Module& module) { remove_hook_from_module(module, /*recurse=*/true); }

}  // namespace accel::hooks

namespace accel {
using hooks::add_hook_to_module, hooks::find_hook, hooks::remove_hook_from_module, hooks::remove_hook_from_submodules;
}  // namespace accel
