// PrecisionType <-> DType <-> the precision policy tags (policy/precision.hpp).
//
//   precision_dtype(PrecisionType)       no -> f32, fp16 -> f16, bf16 -> bf16, fp8 -> f8_e4m3fn
//   policy::bf16::id                     PrecisionType::bf16 (compile time; the enum is the policy
//                                        layer's, so a tag and a config value are one spelling)
//   with_precision(PrecisionType, f)     f(policy tag) chosen at run time from a config value
#pragma once

#include <utility>

#include "accel/core/dtype.hpp"
#include "accel/policy/precision.hpp"
#include "accel/utils/enums.hpp"

namespace accel::utils {

/// The dtype weights are held in under a mixed-precision setting ("no" keeps f32).
constexpr DType precision_dtype(PrecisionType p) {
  switch (p) {
    case PrecisionType::fp16: return DType::f16;
    case PrecisionType::bf16: return DType::bf16;
    case PrecisionType::fp8: return DType::f8_e4m3fn;
    case PrecisionType::no: break;
  }
  return DType::f32;
}

/// Calls f(tag) with the policy tag of `p` (fp8 means fp8<e4m3>), so that a run-time config value
/// selects compile-time code.
template <class F>
decltype(auto) with_precision(PrecisionType p, F&& f) {
  switch (p) {
    case PrecisionType::fp16: return std::forward<F>(f)(policy::fp16{});
    case PrecisionType::bf16: return std::forward<F>(f)(policy::bf16{});
    case PrecisionType::fp8: return std::forward<F>(f)(policy::fp8<>{});
    case PrecisionType::no: break;
  }
  return std::forward<F>(f)(policy::fp32{});
}

static_assert(to_string(policy::fp16::id) == policy::fp16::mixed_precision);
static_assert(precision_dtype(policy::fp16::id) == policy::fp16::storage_dtype);
static_assert(precision_dtype(policy::fp8<>::id) == policy::fp8<>::storage_dtype);

}  // namespace accel::utils
