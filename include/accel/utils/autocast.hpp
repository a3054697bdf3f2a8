// AutocastScope: the compute dtype of the current thread, set for a scope (torch.autocast).
//
//   { AutocastScope s(DType::bf16); autocast_dtype() == DType::bf16; }   restored at scope exit
//   AutocastScope s(PrecisionType::fp16, AutocastKwargs{.enabled = false})  -> no autocast inside
//   auto s = autocast<policies<bf16>>();   the bundle's compute dtype (fp32: no autocast)
//
// matmul, linear and scaled_dot_product_attention cast their f32 / f16 / bf16 operands to the
// scope's dtype and return it, as torch.autocast's lower-precision list does; norms, softmax and
// activations already compute in f32. Scopes nest and are per thread.
#pragma once

#include <optional>
#include <type_traits>

#include "accel/core/autocast_state.hpp"
#include "accel/core/dtype.hpp"
#include "accel/policy/policies.hpp"
#include "accel/utils/dataclasses.hpp"
#include "accel/utils/precision.hpp"

namespace accel::utils {

using core::autocast_dtype;
using core::is_autocast_enabled;

/// RAII: sets this thread's compute dtype for the scope and restores the previous one at exit.
/// A disabled kwargs (enabled = false) turns autocast off inside the scope, like torch.
class AutocastScope {
 public:
  explicit AutocastScope(DType compute_dtype, const AutocastKwargs& kwargs = {})
      : guard_(kwargs.enabled ? std::optional<DType>(compute_dtype) : std::nullopt) {}
  /// "no" precision means no autocast (f32 compute).
  explicit AutocastScope(PrecisionType p, const AutocastKwargs& kwargs = {})
      : guard_(kwargs.enabled && p != PrecisionType::no ? std::optional<DType>(compute_dtype_of(p)) : std::nullopt) {}
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

  /// The dtype matmuls compute in under `p` (fp8 computes in bf16, as the fp8 policy says).
  static DType compute_dtype_of(PrecisionType p) {
    return with_precision(p, [](auto tag) { return decltype(tag)::compute_dtype; });
  }

 private:
  core::AutocastGuard guard_;
};

/// The scope for a policy bundle or a precision tag: its compute dtype (bf16 for fp8), and no
/// autocast for fp32. `auto scope = autocast<policies<policy::bf16>>();`
template <class P>
[[nodiscard]] AutocastScope autocast(const AutocastKwargs& kwargs = {}) {
  using precision = typename decltype([] {
    if constexpr (is_policy_bundle_v<P>) {
      return std::type_identity<typename P::precision>{};
    } else {
      static_assert(std::is_base_of_v<policy::precision_tag, P>,
                    "accel::autocast<P>: P must be a policy bundle (accel::policies<...>) or a precision tag "
                    "(fp32, fp16, bf16, fp8<e4m3>, fp8<e5m2>)");
      return std::type_identity<P>{};
    }
  }())::type;
  AutocastKwargs k = kwargs;
  if (precision::compute_dtype == DType::f32) k.enabled = false;
  return AutocastScope(precision::compute_dtype, k);
}

}  // namespace accel::utils

namespace accel {
using utils::autocast_dtype, utils::AutocastScope, utils::autocast;
}  // namespace accel
