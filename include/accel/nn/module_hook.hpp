// What a hook attached to a module sees of a call: the module and every tensor of the call's
// argument pack (or of its results), each replaceable in place.
//
//   class ModuleHook      init_hook / pre_forward / post_forward / detach_hook / execution_device:
//                         the slot's interface (hooks/model_hook.hpp builds Accelerate's ModelHook on it)
//   class TensorRefs      a type-erased view of the tensors in a nested pack: for_each(fn(Tensor&), [skip]), size()
//   TensorRefs::of(pack)  the view of an lvalue pack (a tensor, tuples, structs, optionals, vectors, maps)
//
// Hooks attached at run time (dispatch_model's AlignDevicesHook) do not know a module's forward
// signature, so they get the tensors of the whole pack, in nested-data walk order, through one
// indirect call: AlignDevicesHook moves every one of them as send_to_device would, leaving out
// map entries whose key is in its skip_keys. Non-tensor leaves (ints, pointers to a KV-cache slot)
// are not visited and never copied. Which arguments the pack copies and which it borrows is
// Module::invoke's rule (nn/module.hpp).
#pragma once

#include <cstddef>
#include <optional>
#include <type_traits>

#include "accel/core/device.hpp"
#include "accel/core/tensor.hpp"
#include "accel/nested/for_each_leaf.hpp"

namespace accel::nn {

class Module;

/// A view of every tensor in a nested pack of lvalues; valid while those lvalues live.
class TensorRefs {
 public:
  /// The view of `data` (a tensor, or a tuple / struct / optional / vector / map holding them).
  template <class T>
    requires(!std::is_const_v<T>)
  static TensorRefs of(T& data) {
    return TensorRefs(const_cast<void*>(static_cast<const void*>(std::addressof(data))), &walk<T>);
  }

  /// Calls fn(Tensor&) on every tensor of the pack in walk order; fn may assign a new tensor. Map
  /// entries whose key is in `skip` (when given) are left out, at every level.
  template <class F>
  void for_each(F&& fn, const nested::skip_keys* skip = nullptr) const {
    if (!walk_) return;
    using Fn = std::remove_reference_t<F>;
    auto* ctx = const_cast<void*>(static_cast<const void*>(std::addressof(fn)));
    walk_(pack_, [](void* c, Tensor& t) { (*static_cast<Fn*>(c))(t); }, ctx, skip);
  }
  /// Number of tensors in the pack.
  std::size_t size() const {
    std::size_t n = 0;
    for_each([&](Tensor&) { ++n; });
    return n;
  }

 private:
  using Visitor = void (*)(void* ctx, Tensor& t);
  using Walk = void (*)(void* pack, Visitor visit, void* ctx, const nested::skip_keys* skip);

  TensorRefs(void* pack, Walk walk) : pack_(pack), walk_(walk) {}

  template <class T>
  static void walk(void* pack, Visitor visit, void* ctx, const nested::skip_keys* skip) {
    auto& data = *static_cast<std::remove_const_t<T>*>(pack);
    nested::for_each_leaf([&](Tensor& t) { visit(ctx, t); }, data, nested::tensor_leaf{}, skip);
  }

  void* pack_;
  Walk walk_;
};

/// A hook around a module's forward, type-erased so it can be attached at run time. The defaults
/// do nothing; a hook overrides what it needs (Accelerate's ModelHook, spelled for C++).
class ModuleHook {
 public:
  virtual ~ModuleHook() = default;
  /// Called once when the hook is attached (`Module::set_hook`).
  virtual void init_hook(Module& /*module*/) {}
  /// Called before forward with the arguments: may replace any of their tensors.
  virtual void pre_forward(Module& /*module*/, const TensorRefs& /*args*/) {}
  /// Called after forward with the results: may replace any of their tensors.
  virtual void post_forward(Module& /*module*/, const TensorRefs& /*outputs*/) {}
  /// Called once when the hook is removed or replaced.
  virtual void detach_hook(Module& /*module*/) {}
  /// The device the hooked module computes on (Accelerate's `execution_device`), or nullopt when
  /// the hook does not decide it. Module::execution_device asks this first.
  virtual std::optional<Device> execution_device() const { return std::nullopt; }
  /// Called by Module::to(device) on every hooked module of the tree before anything moves: a
  /// hook that placed the weights may warn, or refuse by throwing (weights parked on meta).
  virtual void before_module_to(Module& /*module*/, Device /*device*/) {}
};

}  // namespace accel::nn
