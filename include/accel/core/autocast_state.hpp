// The autocast slot: this thread's compute dtype for the ops that torch.autocast lowers
// (matmul, linear, scaled_dot_product_attention). It lives in core so that ops can read it and
// the scopes above (utils::AutocastScope) can set it without ops depending on them.
#pragma once

#include <optional>

#include "accel/core/dtype.hpp"

namespace accel::core {

namespace detail {
inline std::optional<DType>& autocast_slot() noexcept {
  thread_local std::optional<DType> current;
  return current;
}
}  // namespace detail

/// The compute dtype of the innermost enabled autocast scope on this thread (nullopt: none,
/// every op computes in its operands' dtype).
inline std::optional<DType> autocast_dtype() noexcept { return detail::autocast_slot(); }
/// True inside an enabled autocast scope.
inline bool is_autocast_enabled() noexcept { return detail::autocast_slot().has_value(); }

/// The dtype an autocast-eligible op should run in for a floating operand of dtype `operand`:
/// the scope's dtype when one is active and the operand is f32 / f16 / bf16, else the operand's own.
inline DType autocast_target(DType operand) noexcept {
  const auto& slot = detail::autocast_slot();
  if (!slot) return operand;
  const bool castable = operand == DType::f32 || operand == DType::f16 || operand == DType::bf16;
  return castable ? *slot : operand;
}

/// RAII: sets this thread's autocast dtype (nullopt: off) for a scope and restores the previous
/// one at exit. utils::AutocastScope builds on it with Accelerate's spellings; nn::BasicModule
/// uses it for the policy bundle's compute dtype.
class AutocastGuard {
 public:
  explicit AutocastGuard(std::optional<DType> dtype) noexcept : previous_(detail::autocast_slot()) {
    detail::autocast_slot() = dtype;
  }
  ~AutocastGuard() { detail::autocast_slot() = previous_; }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> previous_;
};

}  // namespace accel::core
