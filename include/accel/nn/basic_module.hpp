// BasicModule<Derived, P>: a Module whose calls run under the policy bundle P.
//
//   class MyBlock : public BasicModule<MyBlock, P> { ... Out forward(const In&, Tensor positions, Cache*); };
//   block(in, positions, &cache)        hook slot -> P's compute scope -> forward -> fp32 outputs (outermost)
//   using Linear = BasicLinear<>;       default_policies: exactly the plain Module call path
//
// The design (docs/design.md, "Modules and the call path"):
// - `Module` (nn/module.hpp) is the tree: names, tensors, children, the hook slot. Everything that
//   walks a tree without computing (planner, loaders, hooks layer) takes a `Module&`, whatever the
//   bundle, so one planner serves every model.
// - `BasicModule<Derived, P>` is the computing node. P's precision decides the dtype layers hold
//   their weights in (`P::precision::storage_dtype`, the default dtype of BasicLinear<P> & co.) and
//   compute in: a call enters an autocast scope of `compute_dtype` (none for fp32, and none for a
//   module kept in float32, Module::keeps_fp32), so matmul, linear and attention run there. With
//   `convert_outputs_to_fp32`, the outermost call of a bundle converts every f16 / bf16 tensor of
//   its result to f32, as Accelerate wraps only the model's forward. P's offload policy is what the hooks layer attaches (`policies::offload`).
// - Derived is the module's own class (libtorch's Cloneable<Derived> habit): operator() calls
//   `Derived::forward` with any nested argument pack through `Module::invoke`, so the call costs
//   nothing beyond the forward when no hook is attached and the bundle is fp32. The type-erased
//   entry, `Module::operator()(const Tensor&)`, lands in this same operator(): one call path.
// - Mixing bundles in one tree is refused at compile time for direct registration: a child of
//   another bundle would open its own compute scope inside its parent's and change the dtype
//   the parent's next op sees. Policy-neutral containers (ModuleList, ModuleDict) hold any child;
//   their calls run in the scope of whoever calls them.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "accel/core/autocast_state.hpp"
#include "accel/core/dtype.hpp"
#include "accel/nested/for_each_leaf.hpp"
#include "accel/nn/module.hpp"
#include "accel/policy/policies.hpp"

namespace accel::nn {

namespace detail {

/// Depth of policy-scoped calls on this thread: outputs go back to fp32 only at depth 0.
inline int& policy_call_depth() noexcept {
  thread_local int depth = 0;
  return depth;
}

template <class M, class = void>
struct policies_of {
  using type = void;  // a policy-neutral module
};
template <class M>
struct policies_of<M, std::void_t<typename M::policies>> {
  using type = typename M::policies;
};

}  // namespace detail

/// The bundle a module computes under, or void for a policy-neutral Module.
template <class M>
using policies_of_t = typename detail::policies_of<M>::type;

/// A Module computing under the policy bundle P (see the header comment).
template <class Derived, PolicyBundle P = default_policies>
class BasicModule : public Module {
 public:
  using policies = P;
  using precision = typename P::precision;
  /// The dtype layers of this bundle create their weights in.
  static constexpr DType storage_dtype = precision::storage_dtype;
  /// The dtype matmul, linear and attention compute in under this bundle.
  static constexpr DType compute_dtype = precision::compute_dtype;
  /// True when a call of this bundle changes nothing about dtypes (fp32: no scope, no conversion).
  static constexpr bool plain_call = compute_dtype == DType::f32 && !precision::convert_outputs_to_fp32;

  explicit BasicModule(std::string class_name = "Module") : Module(std::move(class_name)) {}

  /// Calls Derived::forward(args...) through the hook slot, in P's compute scope.
  template <class... Args>
  auto operator()(Args&&... args) {
    auto& self = static_cast<Derived&>(*this);
    if constexpr (plain_call) {
      return Module::invoke(self, std::forward<Args>(args)...);
    } else {
      return scoped(this->keeps_fp32(), [&] { return Module::invoke(self, std::forward<Args>(args)...); });
    }
  }

  /// Registers `module` as child `name`; a child computing under another bundle is refused.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    using child = policies_of_t<M>;
    static_assert(std::is_void_v<child> || std::is_same_v<child, P>,
                  "accel::nn::BasicModule<Derived, P>::register_module: the child computes under another policy "
                  "bundle; build every computing module of one tree with the same accel::policies<...> (containers "
                  "such as ModuleList are policy-neutral and may hold any)");
    return Module::register_module(name, std::move(module));
  }
  /// register_module returning the parent's handle on the slot (Module::register_child).
  template <class T = void, class M>
  auto register_child(const std::string& name, std::shared_ptr<M> module) {
    using Ref = ChildRef<std::conditional_t<std::is_void_v<T>, M, T>>;
    register_module(name, std::move(module));
    return Ref(*this, name);
  }

 protected:
  // The type-erased entry goes through operator() above: the same scope, hook and forward.
  Tensor call_erased(const Tensor& input) override {
    auto& self = static_cast<Derived&>(*this);
    if constexpr (requires { { self.forward(input) } -> std::convertible_to<Tensor>; }) {
      return (*this)(input);
    } else {
      throw ValueError(this->class_name() + " has no single-tensor forward: call it with the arguments of its forward");
    }
  }

 private:
  // `full_precision`: a module kept in float32 computes with autocast off (Module::keeps_fp32).
  template <class Call>
  static auto scoped(bool full_precision, Call&& call) {
    int& depth = detail::policy_call_depth();
    const bool outermost = depth == 0;
    struct DepthGuard {
      int& d;
      ~DepthGuard() { --d; }
    } depth_guard{++depth};
    core::AutocastGuard autocast(compute_dtype == DType::f32 || full_precision ? std::nullopt
                                                                               : std::optional<DType>(compute_dtype));
    auto out = call();
    if constexpr (precision::convert_outputs_to_fp32) {
      if (outermost) {
        nested::for_each_leaf(
            [](Tensor& t) {
              if (t.defined() && (t.dtype() == DType::f16 || t.dtype() == DType::bf16)) t = t.to(DType::f32);
            },
            out);
      }
    }
    return out;
  }
};

}  // namespace accel::nn
