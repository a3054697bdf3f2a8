// AutocastScope: the compute dtype of the current thread, set for a scope (torch.autocast).
//
//   { AutocastScope s(DType::bf16); autocast_dtype() == DType::bf16; }   restored at scope exit
//   AutocastScope s(PrecisionType::fp16, AutocastKwargs{.enabled = false})  -> no autocast inside
//
// Ops that honour autocast read autocast_dtype(); scopes nest and are per thread.
#pragma once

#include <optional>

#include "accel/core/dtype.hpp"
#include "accel/utils/dataclasses.hpp"
#include "accel/utils/precision.hpp"

namespace accel::utils {

namespace detail {
inline std::optional<DType>& autocast_slot() noexcept {
  thread_local std::optional<DType> current;
  return current;
}
}  // namespace detail

/// The compute dtype of the innermost enabled scope on this thread (nullopt: none, compute as stored).
inline std::optional<DType> autocast_dtype() noexcept { return detail::autocast_slot(); }
/// True inside an enabled AutocastScope.
inline bool is_autocast_enabled() noexcept { return detail::autocast_slot().has_value(); }

/// RAII: sets this thread's compute dtype for the scope and restores the previous one at exit.
/// A disabled kwargs (enabled = false) turns autocast off inside the scope, like torch.
class AutocastScope {
 public:
  explicit AutocastScope(DType compute_dtype, const AutocastKwargs& kwargs = {}) : previous_(detail::autocast_slot()) {
    detail::autocast_slot() = kwargs.enabled ? std::optional<DType>(compute_dtype) : std::nullopt;
  }
  /// "no" precision means no autocast (f32 compute).
  explicit AutocastScope(PrecisionType p, const AutocastKwargs& kwargs = {}) : previous_(detail::autocast_slot()) {
    const bool on = kwargs.enabled && p != PrecisionType::no;
    detail::autocast_slot() = on ? std::optional<DType>(compute_dtype_of(p)) : std::nullopt;
  }
  ~AutocastScope() { detail::autocast_slot() = previous_; }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

  /// The dtype matmuls compute in under `p` (fp8 computes in bf16, as the fp8 policy says).
  static DType compute_dtype_of(PrecisionType p) {
    return with_precision(p, [](auto tag) { return decltype(tag)::compute_dtype; });
  }

 private:
  std::optional<DType> previous_;
};

}  // namespace accel::utils

namespace accel {
using utils::autocast_dtype;
using utils::AutocastScope;
}  // namespace accel
